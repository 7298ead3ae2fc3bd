"""paged_update_cache: one new K or V row per user written into a cache (a paged pool in tile pages or
bank-local, or a contiguous cache) at the user's position.

``validate`` (checks -> `UpdateInputs`), ``program_factory`` (the users dealt over the cores, the
`Program`), ``op`` (the run per backend and the public `paged_update_cache`), ``device_step`` (the device
backend: a cached `UpdateStep` per shape). Kernels: ``kernels/paged_update/``.
"""

from ttdecode.ops.paged_update.device_step import UpdateStep
from ttdecode.ops.paged_update.op import paged_update_cache
from ttdecode.ops.paged_update.program_factory import UPDATE_CBS, build_program
from ttdecode.ops.paged_update.validate import UpdateInputs, validate

__all__ = ["paged_update_cache", "UpdateStep", "UpdateInputs", "build_program", "validate", "UPDATE_CBS"]
