"""A `Program` made into a ttnn descriptor once for one device, then run per step: `PreparedProgram`.

Each run checks tensor metadata only, patches the buffer addresses (and any common runtime args the
caller names) into the kept descriptor and calls ``ttnn.generic_op``; once the program is in the
device's program cache a program whose per-core args hold no address runs its lean descriptor (the
per-core args held back; class doc).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any, Mapping, Sequence

from ttdecode.core.program_description import BufferAddress, Program
from ttdecode.ttnn_backend.descriptor import DeviceError, TtnnDeviceView, build_program_descriptor
from ttdecode.ttnn_backend.tensors import (
    check_input_tensor,
    check_page_geometry,
    holds_shards,
    is_key_row_memory_config,
    key_row_memory_config,
    tensor_dtype,
    tensor_layout,
    tensor_signature,
)
from ttdecode.ttnn_env import require_ttnn

#: Runs of every PreparedProgram in this process by descriptor: "full" (per-core args sent) or "lean"
#: (held back, the cached program's kept); the hardware check reads them to name the path a call took.
RUN_COUNTS: dict[str, int] = {"full": 0, "lean": 0}


def _without_per_core_args(program: Program) -> Program:
    """`program` with every kernel's per-core runtime-arg list empty (cores, common args, all else kept)."""
    kernels = [dataclasses.replace(k, runtime_args={core: [] for core in k.runtime_args}) for k in program.kernels]
    return dataclasses.replace(program, kernels=kernels)


class _ZeroAddresses(TtnnDeviceView):
    """A device view whose tensors all sit at address 0: the descriptor is built once with these and
    every run patches the real addresses in."""

    def buffer_address(self, name: str) -> int:
        return 0


def _structure_hash(program: Program, per_core_values: bool = False) -> int:
    """A 64-bit hash of everything a ttnn Program bakes in at construction (kernels, their sources,
    compile-time args, defines, cores, configs, runtime-arg COUNTS, CBs, semaphores): set as the
    descriptor's custom_program_hash so that generic_op skips its descriptor walk on every call.
    `per_core_values`: the per-core runtime-arg VALUES too (a PreparedProgram that stops re-sending
    them must not share its cached ttnn program with one whose per-core values differ)."""
    parts: list[Any] = []
    for k in program.kernels:
        parts.append((k.name, str(Path(k.source).resolve()), k.kind.value, repr(k.cores), tuple(k.compile_time_args),
                      tuple(sorted(k.named_compile_time_args.items())), tuple(sorted(k.defines.items())),
                      repr(k.compute), len(k.common_runtime_args),
                      tuple((c.x, c.y, len(a)) for c, a in sorted(k.runtime_args.items(), key=lambda i: (i[0].y, i[0].x)))))
        if per_core_values:
            parts.append(tuple((c.x, c.y, tuple(a)) for c, a in sorted(k.runtime_args.items(),
                                                                      key=lambda i: (i[0].y, i[0].x))))
    parts.append(tuple(repr(cb) for cb in program.circular_buffers))
    parts.append(tuple(repr(s) for s in program.semaphores))
    parts.append(tensor_signature(program))
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


class PreparedProgram:
    """A `Program` made into a ttnn `ProgramDescriptor` once for one device, then run per step.

    Each `run` checks the io tensors' metadata only (on the device, dtype, layout, shape, memory
    config: no data moves), allocates the outputs (or takes the caller's), patches the buffer
    addresses -- and any common runtime args the caller names -- in place in the kept descriptor, and
    calls ``ttnn.generic_op``. The runtime-argument count of every kernel and core is fixed when the
    descriptor is built (ttnn's generic_op cache key ignores it, and a changed count on a cache hit
    corrupts memory), so every run of one PreparedProgram is the same cached ttnn program.

    Per-core args sent once: on a program-cache hit generic_op copies every non-empty per-core
    runtime-arg list of the descriptor into the cached program (per kernel and core; on a mesh once per
    device, so a T3K 1x8 pays it eight times) and leaves a core whose list is EMPTY as the cached
    program has it. When no per-core arg is a buffer address (FlashDecode's addresses are all common
    args), the per-core args never change between runs, so after a run with the full descriptor has put
    the program in the device's cache the runs use `lean`: the same descriptor with every per-core list
    empty (common args and CBs as before). The cached program keeps its per-core args and their COUNT
    (nothing resizes them). `lean` would be wrong on a cache MISS (ttnn would build the program with no
    per-core args), so: the hash then covers the per-core VALUES too (no other program shares the
    entry), the full descriptor is used whenever the device's program-cache entry count differs from the
    count after this program's last run (any program built or the cache cleared in between: in a steady
    decode loop the count is constant) or a full run left the cache empty (a disabled cache), and a lean
    run that added an entry raises. What this cannot see: the cache cleared and refilled by other
    programs to exactly the former count between two runs (ttnn 0.81.1 cannot be asked whether one hash
    is cached); after ``clear_program_cache()`` call `reset_lean` on kept programs (`FlashDecodeStep`s:
    ``ttdecode.ops.flash_decode.device_steps.STEPS.clear()`` forgets them).
    """

    def __init__(self, program: Program, device: Any) -> None:
        ttnn = require_ttnn()
        if not isinstance(program, Program):
            raise DeviceError(f"program: expected a ttdecode.core.program_description.Program, got {type(program).__name__}")
        self.program = program
        self.device = device
        inputs = [t for t in program.tensors if not t.is_output]
        self.outputs = [t for t in program.tensors if t.is_output]
        if not self.outputs and not any(t.in_place for t in inputs):
            raise DeviceError("program: expected at least one output or in-place tensor, got none")
        self.inputs = [t for t in inputs if not t.in_place] + [t for t in inputs if t.in_place]
        for spec in self.inputs + self.outputs:
            check_page_geometry(spec)
        self.descriptor = build_program_descriptor(program, _ZeroAddresses(device, {}))
        per_core_fixed = not any(isinstance(a, BufferAddress) for k in program.kernels
                                 for args in k.runtime_args.values() for a in args)
        counts_entries = callable(getattr(device, "num_program_cache_entries", None))
        use_lean = per_core_fixed and counts_entries
        self.descriptor.custom_program_hash = _structure_hash(program, per_core_values=use_lean)
        #: the descriptor with every per-core runtime-arg list empty (class doc), or None
        self.lean = None
        if use_lean:
            self.lean = build_program_descriptor(_without_per_core_args(program), _ZeroAddresses(device, {}))
            self.lean.custom_program_hash = self.descriptor.custom_program_hash
        #: the device's program-cache entry count after this program's last run (None: run full next)
        self._entries_primed: int | None = None
        # the expected metadata of each input, and the patch slots: (vector, index, tensor name)
        self._expect = []
        for spec in self.inputs:
            layout = tensor_layout(ttnn, spec.layout, f"tensor {spec.name!r}")
            mem = (None if spec.sharded  # compared with holds_shards
                   else key_row_memory_config(ttnn, device, spec.shape[-1]) if spec.layout == "key_row"
                   else ttnn.DRAM_MEMORY_CONFIG)
            self._expect.append((spec, tensor_dtype(ttnn, spec), layout, tuple(spec.shape), mem))
        self._out_alloc = [(spec.name, ttnn.Shape(list(spec.shape)), tensor_dtype(ttnn, spec),
                            tensor_layout(ttnn, spec.layout, f"tensor {spec.name!r}")) for spec in self.outputs]
        self._slots: list[tuple[Any, int, str]] = []
        self._common: dict[str, Any] = {}
        kernels = self.descriptor.kernels
        for kd, kernel in zip(kernels, program.kernels):
            common = kd.common_runtime_args
            self._common[kernel.name] = common
            for i, a in enumerate(kernel.common_runtime_args):
                if isinstance(a, BufferAddress):
                    self._slots.append((common, i, a.name))
            for core, args in kernel.runtime_args.items():
                if any(isinstance(a, BufferAddress) for a in args):
                    vec = kd.runtime_args[core.x][core.y]
                    for i, a in enumerate(args):
                        if isinstance(a, BufferAddress):
                            self._slots.append((vec, i, a.name))
        self.arg_counts = self.runtime_arg_counts()
        order = {spec.name: i for i, spec in enumerate(self.inputs + self.outputs)}
        self._slot_pos = [(vec, i, order[name]) for vec, i, name in self._slots]
        self._lean_common: dict[str, Any] = {}
        self._lean_slot_pos: list[tuple[Any, int, int]] = []
        if self.lean is not None:
            for kd, kernel in zip(self.lean.kernels, program.kernels):
                self._lean_common[kernel.name] = kd.common_runtime_args
                for i, a in enumerate(kernel.common_runtime_args):
                    if isinstance(a, BufferAddress):
                        self._lean_slot_pos.append((kd.common_runtime_args, i, order[a.name]))

    def reset_lean(self) -> None:
        """Run the full descriptor next (e.g. after the device's program cache was cleared)."""
        self._entries_primed = None

    def runtime_arg_counts(self) -> dict[str, tuple[int, dict[tuple[int, int], int]]]:
        """Per kernel: (common runtime-arg count, {core: runtime-arg count}) of the kept descriptor."""
        out = {}
        for kd, kernel in zip(self.descriptor.kernels, self.program.kernels):
            per_core = {(c.x, c.y): len(kd.runtime_args[c.x][c.y]) for c in kernel.runtime_args}
            out[kernel.name] = (len(kd.common_runtime_args), per_core)
        return out

    def check_inputs(self, io_tensors: Mapping[str, Any]) -> None:
        """Metadata only: each input a device tensor with the program's dtype, layout, shape and memory config."""
        ttnn = require_ttnn()
        if len(io_tensors) != len(self._expect) or any(spec.name not in io_tensors for spec, *_ in self._expect):
            raise DeviceError(f"io_tensors: expected exactly {[s.name for s, *_ in self._expect]}, got {sorted(io_tensors)}")
        for spec, dtype, layout, shape, mem in self._expect:
            t = io_tensors[spec.name]
            placed = (holds_shards(ttnn, t.memory_config(), spec) if spec.sharded
                      else is_key_row_memory_config(t.memory_config(), mem) if spec.layout == "key_row"
                      else t.memory_config() == mem)
            if (t.dtype != dtype or t.layout != layout or tuple(t.shape) != shape
                    or not ttnn.is_tensor_storage_on_device(t) or not placed):
                check_input_tensor(ttnn, spec, t)  # raises naming what differs
                raise DeviceError(f"io_tensors[{spec.name!r}]: expected {mem}, got {t.memory_config()}")

    def _launch(self, tensors: Sequence[Any], common_args: Mapping[str, Mapping[int, int]] | None) -> None:
        """Patch the addresses of `tensors` (inputs then outputs, program order) and `common_args` into
        the descriptor this run uses (`lean` once the full one has primed the device's program cache;
        class doc) and call ``ttnn.generic_op``."""
        ttnn = require_ttnn()
        if self.lean is None:
            lean = False
        else:
            before = int(self.device.num_program_cache_entries())
            lean = self._entries_primed is not None and before == self._entries_primed
        desc, slots, common = ((self.lean, self._lean_slot_pos, self._lean_common) if lean
                               else (self.descriptor, self._slot_pos, self._common))
        for vec, i, pos in slots:
            vec[i] = tensors[pos].buffer_address()
        if common_args:
            self._patch_common(common_args, common)
        ttnn.generic_op(list(tensors), desc)
        RUN_COUNTS["lean" if lean else "full"] += 1
        if self.lean is not None:
            after = int(self.device.num_program_cache_entries())
            if not lean:  # no entry after a full run: the cache is disabled, so never lean
                self._entries_primed = after if after > 0 else None
            elif after != before:
                self._entries_primed = None
                raise DeviceError(
                    f"program cache: a run with per-core runtime args held back (PreparedProgram.lean) added a "
                    f"program-cache entry ({before} -> {after}): the cached program was gone (the cache cleared "
                    f"and refilled between runs?), so ttnn built it without per-core args; its outputs are "
                    f"invalid. Clear the device's program cache and run again")

    def _patch_common(self, common_args: Mapping[str, Mapping[int, int]],
                      into: Mapping[str, Any] | None = None) -> None:
        """Write {kernel name: {index: uint32}} into the kept common runtime args. Every index is checked
        first: a patch may only overwrite existing args, never add one (a cached program's arg COUNT must
        not change: on a cache hit that corrupts memory); nothing is written when one is refused."""
        into = self._common if into is None else into
        for kernel, values in common_args.items():
            vec = into.get(kernel)
            if vec is None:
                raise DeviceError(f"common_args: {kernel!r} is not a kernel of the program (expected one of "
                                  f"{sorted(self._common)})")
            n = len(vec)
            for i in values:
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
                    raise DeviceError(f"common_args[{kernel!r}]: expected an index in [0, {n}) (the kernel has {n} "
                                      f"common runtime args; a cached program's arg count never changes), got {i!r}")
        for kernel, values in common_args.items():
            vec = into[kernel]
            for i, value in values.items():
                vec[i] = value

    def run(self, io_tensors: Mapping[str, Any], *, common_args: Mapping[str, Mapping[int, int]] | None = None,
            outputs: Mapping[str, Any] | None = None, check: bool = True) -> list[Any]:
        """Run once: `io_tensors` the inputs by name; `common_args` {kernel name: {index: uint32}} patched
        into the kernels' common runtime args (their count never changes); `outputs` caller-given output
        tensors by name (else allocated in DRAM). Returns the output tensors in program order."""
        ttnn = require_ttnn()
        if check:
            self.check_inputs(io_tensors)
        allocated = dict(outputs or {})
        for name, shape, dtype, layout in self._out_alloc:
            if name not in allocated:
                allocated[name] = ttnn.allocate_tensor_on_device(shape, dtype, layout, self.device,
                                                                 ttnn.DRAM_MEMORY_CONFIG)
        ordered = [io_tensors[s.name] for s in self.inputs] + [allocated[s.name] for s in self.outputs]
        self._launch(ordered, common_args)
        return [allocated[s.name] for s in self.outputs]

    def run_ordered(self, inputs: Sequence[Any], common_args: Mapping[str, Mapping[int, int]] | None = None,
                    outputs: Sequence[Any] | None = None) -> list[Any]:
        """`run` without the checks, for a caller that has checked the inputs' metadata itself (the
        cached-call path of ``ttdecode.ops.flash_decode.device_step``): `inputs` the input tensors in
        `self.inputs` order; `outputs` the caller's output tensors in program order (else allocated in
        DRAM); returns the outputs in program order."""
        ttnn = require_ttnn()
        outs = list(outputs) if outputs is not None else [
            ttnn.allocate_tensor_on_device(shape, dtype, layout, self.device, ttnn.DRAM_MEMORY_CONFIG)
            for _, shape, dtype, layout in self._out_alloc]
        self._launch(list(inputs) + outs, common_args)
        return outs
