"""The device backend of the public functions: their `FlashDecodeStep`s, one per decode shape, kept in
`DeviceSteps` (``ttdecode.ttnn_backend.StepCache``: bounded, least recently used out).

A call of ``backend="device"`` first tries `DeviceSteps.run_cached`: keyed by its options (`fast_key`),
it runs a kept step whose validated call had the same tensor specs (``FlashDecodeStep.run_fast``: no
validation, tensor metadata only). Otherwise the API validates and `DeviceSteps.run` takes the step of
the inputs' decode shape (planned on a miss), launches it and, for a call the fast path can take,
remembers the step under its fast key. `STEPS` is the cache the public functions use.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Optional

from ttdecode.ops.flash_decode.device_step import MISS, FlashDecodeStep, device_of, step_key
from ttdecode.ops.flash_decode.op import Result, check_kernel_gaps
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.ops.flash_decode.validate import DecodeInputs
from ttdecode.ttnn_backend.step_cache import StepCache
from ttdecode.ttnn_env import has_tenstorrent_device, require_ttnn
from ttdecode.config import ComputeKernelConfig, SDPAProgramConfig

__all__ = ["DeviceSteps", "STEPS", "MISS", "STEP_CACHE_SIZE", "FAST_STEPS_PER_KEY", "fast_key"]

#: Decode shapes whose steps `STEPS` keeps (a model has a handful: one per layer kind and batch).
STEP_CACHE_SIZE = 32
#: Steps (decode shapes) kept per fast key: e.g. the batch sizes a server alternates between.
FAST_STEPS_PER_KEY = 4

#: The fields of a ttnn config object its conversion reads (ttdecode.config ``from_ttnn``).
_TTNN_CONFIG_FIELDS = {
    "SDPAProgramConfig": ("compute_with_storage_grid_size", "sub_core_grids", "q_chunk_size", "k_chunk_size",
                          "exp_approx_mode", "max_cores_per_head_batch", "max_k_splits",
                          "matmul_math_fidelity", "segmented_accumulation"),
    "WormholeComputeKernelConfig": ("math_fidelity", "math_approx_mode", "fp32_dest_acc_en", "packer_l1_acc",
                                    "dst_full_sync_en"),
}


class _Conversions(OrderedDict):
    """id(ttnn config object) -> (the object, a snapshot of its fields, ttdecode's frozen config of it),
    bounded to `size` entries (oldest out)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def own_config(self, value: Any, own_type: type) -> Any:
        """`value` as a hashable ttdecode config for the fast key: None and ttdecode's own as they are; a
        ttnn config converted once per object (``own_type.coerce``) and reused while a snapshot of the
        fields the conversion reads (their reprs) is unchanged -- a mutated object is converted anew.
        Returns `MISS` for anything else or a config the conversion refuses (the validating path names
        the reason)."""
        if value is None or isinstance(value, own_type):
            return value
        fields = _TTNN_CONFIG_FIELDS.get(type(value).__name__)
        if fields is None:
            return MISS
        snapshot = tuple(repr(getattr(value, f, None)) for f in fields)
        hit = self.get(id(value))
        if hit is not None and hit[0] is value and hit[1] == snapshot:
            return hit[2]
        try:
            own = own_type.coerce(value)
        except (TypeError, ValueError):
            return MISS
        self[id(value)] = (value, snapshot, own)  # the object is held: its id is not reused meanwhile
        while len(self) > self.size:
            self.popitem(last=False)
        return own


def fast_key(v: Any, options: DecodeOptions, conversions: _Conversions) -> Optional[tuple]:
    """The key of a call that may skip validation, or None. Only device tensors (Q, K, V, the
    cur_pos_tensor, the page table), no positions list, mask, sink or LSE; configs None, ttdecode's
    frozen (hashable) ones or ttnn config objects (converted to ttdecode's, `_Conversions.own_config`);
    the output memory config by its repr. Then the call's options are in the key by value, and
    ``FlashDecodeStep.run_fast`` compares every tensor's TensorSpec (shape, dtype, layout, memory
    config) and device with those of a validated call of the step: all that the validation of such a
    call looks at."""
    o = options
    if o.cur_pos is not None or o.attn_mask is not None or o.attention_sink is not None or o.return_lse:
        return None
    pcfg = conversions.own_config(o.program_config, SDPAProgramConfig)
    ccfg = conversions.own_config(o.compute_kernel_config, ComputeKernelConfig)
    if pcfg is MISS or ccfg is MISS:
        return None
    mem = o.memory_config
    if mem is not None and type(mem).__name__ != "MemoryConfig":
        return None
    try:
        key = (v is None, o.paged, o.cur_pos_tensor is None, o.page_table is None,
               (o.is_causal, o.scale, o.sliding_window_size, o.share_cache, o.head_dim_v), pcfg, ccfg,
               None if mem is None else repr(mem))
        hash(key)
    except TypeError:
        return None
    return key


class DeviceSteps:
    """The public functions' device backend: `FlashDecodeStep`s by decode shape (`step_key`, at most
    `size`, least recently used out) and, by fast key, the steps a call may run without validation
    (at most `FAST_STEPS_PER_KEY` per key, `size` keys)."""

    def __init__(self, size: int = STEP_CACHE_SIZE) -> None:
        self.size = size
        self._steps = StepCache(size)  # step_key -> FlashDecodeStep
        self._fast: "OrderedDict[Any, list[FlashDecodeStep]]" = OrderedDict()  # fast key -> steps, newest first
        self._conversions = _Conversions(size)

    def __len__(self) -> int:
        """How many decode steps are kept."""
        return len(self._steps)

    def steps(self) -> list[FlashDecodeStep]:
        """The kept steps, least recently used first."""
        return list(self._steps.values())

    def clear(self) -> None:
        """Forget every step (their ttnn programs stay in the device's program cache)."""
        self._steps.clear()
        self._fast.clear()
        self._conversions.clear()

    def run_cached(self, q: Any, k: Any, v: Any, options: DecodeOptions) -> Any:
        """Run a call without validation (`fast_key`, ``FlashDecodeStep.run_fast``), or return `MISS`
        (having run nothing)."""
        key = fast_key(v, options, self._conversions)
        if key is None:
            return MISS
        steps = self._fast.get(key)
        if not steps:
            return MISS
        cur, table = options.cur_pos_tensor, options.page_table
        for step in steps:
            out = step.run_fast(q, k, v, cur, table)
            if out is not MISS:
                return out
        return MISS

    def get(self, options: DecodeOptions, inputs: DecodeInputs) -> FlashDecodeStep:
        """The kept step of these validated inputs' decode shape (planned and kept on a miss)."""
        device = device_of(inputs.q)
        return self._steps.get_or_make(step_key(inputs, device), lambda: FlashDecodeStep(options, inputs, device))

    def run(self, q: Any, k: Any, v: Any, options: DecodeOptions, inputs: DecodeInputs) -> Result:
        """Run FlashDecode for validated `inputs` of the call (Q, K, V and `options`) on the Wormhole
        holding them, through the kept step of their decode shape (``FlashDecodeStep.launch``); then,
        unless ``options.validate_values``, keep the step for the fast path of later calls. Q, K, V
        (none with MLA) must be ttnn tensors on one device (``device_step`` module doc for the
        placements); returns the output (and the LSE ``[T, B, NH]`` as float32 torch when
        ``inputs.return_lse``: a read back)."""
        check_kernel_gaps("device", inputs)
        meta = inputs.q
        # Q already on a device means a device is open (a card, or the mock N150 of ttdecode.testing,
        # which has no /dev/tenstorrent*): only refuse when neither holds.
        if not (meta.kind == "ttnn" and require_ttnn().is_tensor_storage_on_device(meta.obj)) and not has_tenstorrent_device():
            raise RuntimeError(
                "backend 'device': no Tenstorrent device found (no /dev/tenstorrent*); "
                "use backend='host' to run the same kernels on the host runtime"
            )
        step = self.get(options, inputs)
        out = step.launch(inputs)
        if not options.validate_values:
            self._remember(q, k, v, options, step)
        return out

    def _remember(self, q: Any, k: Any, v: Any, options: DecodeOptions, step: FlashDecodeStep) -> None:
        """After a validated call of `step`: later calls of the same fast key and tensor specs take the
        fast path."""
        key = fast_key(v, options, self._conversions)
        if key is None or not step.remember_specs(q, k, v, options.cur_pos_tensor, options.page_table):
            return
        steps = [step] + [s for s in self._fast.get(key, []) if s is not step]
        self._fast[key] = steps[:FAST_STEPS_PER_KEY]
        self._fast.move_to_end(key)
        while len(self._fast) > self.size:
            self._fast.popitem(last=False)


#: The steps of the public functions' device backend.
STEPS = DeviceSteps(STEP_CACHE_SIZE)
