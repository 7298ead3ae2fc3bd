"""The device backend: a `Program` as a `ttnn.ProgramDescriptor`, launched with `ttnn.generic_op`.

- ``descriptor``: the backend-neutral `Program` (``ttdecode.core.program_description``) as ttnn's
  descriptor objects, placeholders resolved through a `DeviceView`; `DeviceError`.
- ``tensors``: the io tensors' ttnn dtype, layout, page geometry and memory config, and their checks.
- ``launching``: one launch with ``ttnn.generic_op`` (`launch`; `launch_mesh`, one program per device).
- ``prepared``: `PreparedProgram`, the descriptor built once and run per step.
- ``step_cache``: `StepCache`, the per-shape steps an operator keeps.

Whether a device is present and importing ttnn: ``ttdecode.ttnn_env`` (`has_tenstorrent_device`,
`require_ttnn`).
"""

from ttdecode.ttnn_backend.descriptor import (
    DeviceError,
    DeviceView,
    TtnnDeviceView,
    build_program_descriptor,
    cb_descriptor,
    core_range_set,
    kernel_descriptor,
    resolve_arg,
    semaphore_descriptor,
    to_program_descriptor,
    ttnn_data_type,
)
from ttdecode.ttnn_backend.launching import launch, launch_mesh, mesh_program_descriptor
from ttdecode.ttnn_backend.prepared import PreparedProgram
from ttdecode.ttnn_backend.step_cache import StepCache
from ttdecode.ttnn_backend.tensors import (
    check_input_tensor,
    check_key_row_memory_config,
    check_page_geometry,
    dram_banks,
    is_key_row_memory_config,
    key_row_memory_config,
    tensor_dtype,
    tensor_layout,
)

__all__ = [
    "DeviceError",
    "DeviceView",
    "PreparedProgram",
    "StepCache",
    "TtnnDeviceView",
    "build_program_descriptor",
    "cb_descriptor",
    "check_input_tensor",
    "check_key_row_memory_config",
    "check_page_geometry",
    "core_range_set",
    "dram_banks",
    "is_key_row_memory_config",
    "kernel_descriptor",
    "key_row_memory_config",
    "launch",
    "launch_mesh",
    "mesh_program_descriptor",
    "resolve_arg",
    "semaphore_descriptor",
    "tensor_dtype",
    "tensor_layout",
    "to_program_descriptor",
    "ttnn_data_type",
]
