"""What a run of the host runtime returns: DRAM images, counters, events; and its exceptions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ttdecode.core.program_description import CoreCoord, KernelKind

#: One merged program-order event of a kernel (the runner's `Event`, 20 bytes). `count` consecutive
#: identical events are folded into one record. Compute events also carry `l1_bytes`, the L1 bytes one
#: call's unpackers fetch (a pack: the bytes the packer writes), and `unpacks`, the tiles it unpacks.
EVENT_DTYPE = np.dtype([("op", "u1"), ("flag", "u1"), ("peer", "<u2"), ("amount", "<u4"), ("count", "<u4"),
                        ("l1_bytes", "<u4"), ("unpacks", "<u2"), ("reserved", "<u2")])

#: Event ops. peer / amount per op:
#: read_dram/write_dram: DRAM bank / bytes; read_l1/write_l1: core index (RunCounters.cores) / bytes;
#: *_barrier: - / transfers completed; sem_inc: core index / increment; sem_wait: - / target value;
#: sem_set: - / value; cb_*: CB index / pages; compute: ComputeOp index (COMPUTE_OPS) / tiles;
#: blocked: wait kind (1 CB front, 2 CB back, 3 semaphore) / pages or value waited for.
EVENT_OPS = {
    1: "read_dram", 2: "read_l1", 3: "write_dram", 4: "write_l1", 5: "read_barrier", 6: "write_barrier",
    7: "atomic_barrier", 8: "sem_inc", 9: "sem_wait", 10: "sem_set", 11: "cb_reserve", 12: "cb_push",
    13: "cb_wait", 14: "cb_pop", 15: "compute", 16: "blocked",
}
#: Compute ops counted in tiles (`KernelCounters.tiles`), in the runner's order. "max" counts every
#: SFPU binary op on DST tiles (binary_max_tile, add/sub/mul_binary_tile); "scalar" the *_unary_tile ops;
#: "ternary" the SFPU ops on three DST tiles (addcmul_tile); "init" the configuration calls (an op's *_init,
#: a data-format reconfig, reduce_uninit, the hardware start-up), one per call.
COMPUTE_OPS = ("matmul", "add", "sub", "mul", "add_bcast", "sub_bcast", "mul_bcast", "reduce_max", "reduce_sum",
               "copy", "exp", "recip", "log", "scalar", "max", "pack", "ternary", "init")


@dataclass
class KernelCounters:
    """Counters of one kernel on one core."""

    core: CoreCoord
    kind: KernelKind
    name: str
    dram_read_bytes: tuple[int, ...]   # per DRAM bank
    dram_write_bytes: tuple[int, ...]  # per DRAM bank
    noc_write_bytes: dict[CoreCoord, int]  # L1 bytes written into other cores
    noc_read_bytes: dict[CoreCoord, int]   # L1 bytes read from other cores
    sem_incs: dict[CoreCoord, int]         # semaphore increments sent
    tiles: dict[str, int]                  # tiles through each compute op
    cb_calls: int
    cb_blocked: int   # CB waits/reserves that had to wait
    sem_waits: int
    sem_blocked: int  # semaphore waits that had to wait
    events: np.ndarray  # EVENT_DTYPE, program order
    settings: dict[str, object] = field(default_factory=dict)  # compute settings (recorded, not modelled)

    def event_list(self) -> list[tuple[str, int, int, int]]:
        """Events as (op name, peer, amount, count) tuples (small runs only)."""
        return [(EVENT_OPS.get(int(e["op"]), "?"), int(e["peer"]), int(e["amount"]), int(e["count"]))
                for e in self.events]


@dataclass
class RunCounters:
    """Counters of every kernel; `cores[i]` is the core a core index in events refers to."""

    cores: list[CoreCoord]
    kernels: list[KernelCounters]

    def kernel(self, core: CoreCoord, kind: KernelKind) -> KernelCounters:
        for k in self.kernels:
            if k.core == core and k.kind is kind:
                return k
        raise KeyError(f"no {kind.value} kernel ran on {core}")

    @property
    def dram_read_bytes(self) -> int:
        return sum(sum(k.dram_read_bytes) for k in self.kernels)

    @property
    def dram_write_bytes(self) -> int:
        return sum(sum(k.dram_write_bytes) for k in self.kernels)

    def tiles(self, op: str) -> int:
        return sum(k.tiles.get(op, 0) for k in self.kernels)


@dataclass
class RunResult:
    tensors: dict[str, bytes]
    counters: RunCounters
    compile_seconds: float
    run_seconds: float
    schedule_seed: Optional[int] = None  # the perturbed schedule's seed; None: the deterministic schedule


@dataclass(frozen=True)
class KernelState:
    """Where one kernel stood when a run failed."""

    core: CoreCoord
    kind: str
    name: str
    source: str
    state: str  # done / blocked / ready / running
    waiting_for: str
    last_call: str

    def describe(self) -> str:
        s = f"core ({self.core.x}, {self.core.y}) {self.kind} '{self.name}' ({self.source}): {self.state}"
        if self.waiting_for:
            s += f" in {self.waiting_for}"
        return s + f"; last call {self.last_call}"


class RuntimeFailure(Exception):
    """A run that did not complete; `failing` is the kernel at fault (if one), `kernels` all states."""

    def __init__(self, kind: str, message: str, failing: KernelState | None, kernels: list[KernelState]):
        self.kind = kind
        self.message = message
        self.failing = failing
        self.kernels = kernels
        super().__init__(self._text())

    def _text(self) -> str:
        lines = []
        if self.failing is not None:
            f = self.failing
            lines.append(f"core ({f.core.x}, {f.core.y}) {f.kind} kernel '{f.name}' ({f.source}), "
                         f"in {f.last_call}: {self.message}")
        else:
            lines.append(self.message)
        others = [k for k in self.kernels if k.state != "done"] if self.kind != "deadlock" else self.kernels
        if others and self.kind != "internal":
            lines.append("kernel states:")
            lines.extend("  " + k.describe() for k in others)
        return "\n".join(lines)


class KernelError(RuntimeFailure):
    """A kernel broke a device rule, crashed, looped without API calls, or failed to compile."""


class DeadlockError(RuntimeFailure):
    """Every live kernel was blocked; `kernels` says what each one waited for."""
