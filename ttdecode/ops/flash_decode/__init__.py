"""FlashDecode: decode attention over a long KV cache.

- ``options``: ``DecodeOptions``, a call's options, built once by the public functions;
- ``validate``: the argument checks -> ``DecodeInputs``;
- ``plan``: the work planner (pure data) -> ``DecodePlan``;
- ``program_factory``: plan -> ``Program`` (the kernels' CBs, arguments, tensors) and the host-runtime run;
- ``op``: the host runtime's run and the float64 reference;
- ``device_step``: ``plan_decode`` -> ``FlashDecodeStep``, planned once per decode shape and run per
  token on a Wormhole through ``ttdecode.ttnn_backend``;
- ``step_cache``: ``DeviceSteps``, the public functions' kept steps (the device backend).

The kernels: ``kernels/flash_decode/``. The public entry points: ``ttdecode.api``.
"""
