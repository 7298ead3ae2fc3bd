"""FlashDecode: decode attention over a long KV cache.

- ``validate``: the argument checks -> ``DecodeInputs``;
- ``plan``: the work planner (pure data) -> ``DecodePlan``;
- ``program_factory``: plan -> ``Program`` (the kernels' CBs, arguments, tensors) and the host-runtime run;
- ``op``: the run per backend (host runtime, device, float64 reference);
- ``device_step``: the cached step on a Wormhole through ``ttdecode.ttnn_backend``.

The kernels: ``kernels/flash_decode/``. The public entry points: ``ttdecode.api``.
"""
