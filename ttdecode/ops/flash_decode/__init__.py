"""FlashDecode: decode attention over a long KV cache.

- ``options``: ``DecodeOptions``, a call's options, built once by the public functions;
- ``validate``: the argument checks -> ``DecodeInputs``;
- ``plan``: the work planner (pure data) -> ``DecodePlan``;
- ``program_factory``: plan -> ``Program`` (the kernels' CBs, arguments, tensors) and the host-runtime run;
- ``program_inputs``: the inputs checked against the plan -> their byte images (``FactoryError``);
- ``kernel_args``: the kernels' compile-time, common and per-core runtime args of a plan;
- ``op``: the host runtime's run and the float64 reference;
- ``device_step``: ``plan_decode`` -> ``FlashDecodeStep``, planned once per decode shape and run per
  token on a Wormhole through ``ttdecode.ttnn_backend``;
- ``step_cache``: ``DeviceSteps``, the public functions' kept steps (the device backend).

The kernels: ``kernels/flash_decode/``. The public entry points: ``ttdecode.api``.
"""
