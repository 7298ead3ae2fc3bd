"""rotary_kv_append: the fused RoPE + KV-cache append of a decode step.

``validate`` (checks -> `RotaryInputs`), ``program_factory`` (the rotate-half blocks and the `Program`), ``op``
(the run per backend and the public `rotary_kv_append`), ``device_step`` (the device backend: a cached
`RotaryStep` per shape; `angles_to_device`, the cos/sin form the kernels read). Kernels:
``kernels/rotary_append/``.
"""

from ttdecode.ops.rotary_append.device_step import RotaryStep, angles_to_device
from ttdecode.ops.rotary_append.op import rotary_kv_append
from ttdecode.ops.rotary_append.program_factory import ROTARY_CBS, build_program, device_program, rotate_half_blocks
from ttdecode.ops.rotary_append.validate import CACHE_DTYPES, RotaryInputs, validate

__all__ = ["rotary_kv_append", "RotaryStep", "angles_to_device", "rotate_half_blocks", "RotaryInputs", "build_program",
           "device_program", "validate", "ROTARY_CBS", "CACHE_DTYPES"]
