"""paged_fill_cache: a prompt's K or V written into a paged pool (tile pages or bank-local) through one
user's page-table row.

``validate`` (checks -> `FillInputs`), ``program_factory`` (the rows dealt over the cores, the `Program`),
``op`` (the run per backend and the public `paged_fill_cache`), ``device_step`` (the device backend: a
cached `FillStep` per shape). Kernels: ``kernels/paged_fill/``.
"""

from ttdecode.ops.paged_fill.device_step import FillStep
from ttdecode.ops.paged_fill.op import paged_fill_cache
from ttdecode.ops.paged_fill.program_factory import FILL_CBS, build_program
from ttdecode.ops.paged_fill.validate import FillInputs, validate

__all__ = ["paged_fill_cache", "FillStep", "FillInputs", "build_program", "validate", "FILL_CBS"]
