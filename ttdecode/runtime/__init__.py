"""The ttdecode host runtime: runs Metalium programs (the unmodified kernel sources) on the CPU.

See README.md in this directory for the model (memory map, NoC, compute semantics, strictness rules).
"""

from ttdecode.runtime.driver import run_program
from ttdecode.runtime.layout import L1_UNRESERVED_BASE, noc_coord
from ttdecode.runtime.results import (COMPUTE_OPS, EVENT_DTYPE, EVENT_OPS, DeadlockError, KernelCounters, KernelError,
                                      KernelState, RunCounters, RunResult, RuntimeFailure)

__all__ = [
    "run_program", "RunResult", "RunCounters", "KernelCounters", "KernelState", "KernelError", "DeadlockError",
    "RuntimeFailure", "noc_coord", "L1_UNRESERVED_BASE", "EVENT_DTYPE", "EVENT_OPS", "COMPUTE_OPS",
]
