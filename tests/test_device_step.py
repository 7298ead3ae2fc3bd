"""Plan once, run per step (FlashDecode on the device backend), with ttnn's device calls faked.

Real ttnn 0.81.1 descriptor objects; the device, its tensors, `generic_op` and the output allocation
are stand-ins (no device here). Pins: one plan / Program / descriptor per decode shape, the same
descriptor object and runtime-argument COUNTS on every call (ttnn's generic_op cache key ignores the
count), addresses and list positions patched per call, and no host<->device data in a step.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ttdecode
from ttdecode.ops.flash_decode import device_steps as step_cache
from ttdecode.ops.flash_decode.device_steps import STEPS

B, NH, NKV, S, D = 4, 32, 8, 1024, 128


def _fake_tensor_class() -> type:
    class Tensor:  # describe() takes a class called Tensor from a ttnn module for a ttnn tensor
        next_address = 0x100000

        def __init__(self, ttnn: Any, dtype: Any, layout: Any, shape: tuple[int, ...], device: Any) -> None:
            self.dtype, self.layout, self.shape, self._device = dtype, layout, tuple(shape), device
            self.address = Tensor.next_address
            Tensor.next_address += 0x100000
            self._mem = ttnn.DRAM_MEMORY_CONFIG

        def memory_config(self) -> Any:
            return self._mem

        def buffer_address(self) -> int:
            return self.address

        def device(self) -> Any:
            return self._device

        @property
        def spec(self) -> "Spec":  # what ttnn's TensorSpec holds: compared by the cached-call path
            return Spec(self.dtype, self.layout, self.shape, self._mem)

        def is_allocated(self) -> bool:
            return True

    Tensor.__module__ = "ttnn.fake"
    return Tensor


class Spec:
    """A stand-in TensorSpec: equal when dtype, layout, shape and memory config are."""

    def __init__(self, dtype: Any, layout: Any, shape: tuple[int, ...], memory_config: Any) -> None:
        self.memory_config = memory_config
        self._key = (dtype, layout, shape, memory_config)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Spec) and self._key == other._key


class Dev:
    def __init__(self, ttnn: Any) -> None:
        self.ttnn = ttnn

    def compute_with_storage_grid_size(self) -> Any:
        return self.ttnn.CoreCoord(8, 8)

    def dram_grid_size(self) -> Any:  # Wormhole's 12 DRAM banks
        return self.ttnn.CoreCoord(12, 1)

    def worker_core_from_logical_core(self, c: Any) -> Any:
        return self.ttnn.CoreCoord(c.x + 18, c.y + 18)


@pytest.fixture()
def fake(ttnn: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    Tensor = _fake_tensor_class()
    device = Dev(ttnn)
    calls: dict[str, Any] = {"generic_op": [], "moves": 0, "device_ops": []}

    def generic_op(tensors: list[Any], desc: Any) -> Any:
        counts = [(len(k.common_runtime_args),
                   sorted((x, y, len(k.runtime_args[x][y])) for x in range(8) for y in range(8)
                          if _has_core(k, x, y))) for k in desc.kernels]
        calls["generic_op"].append((desc, desc.custom_program_hash, counts, list(desc.kernels[0].common_runtime_args),
                                    list(desc.kernels[1].common_runtime_args), [t.address for t in tensors]))
        return tensors[-1]

    def move(*a: Any, **k: Any) -> Any:
        calls["moves"] += 1
        raise AssertionError("a host<->device move inside a step")

    monkeypatch.setattr(ttnn, "generic_op", generic_op)
    def allocate(shape: Any, dtype: Any, layout: Any, dev_: Any, mem: Any) -> Any:  # in `mem`, as ttnn's
        out = Tensor(ttnn, dtype, layout, tuple(shape), dev_)
        out._mem = mem
        return out

    monkeypatch.setattr(ttnn, "allocate_tensor_on_device", allocate)
    monkeypatch.setattr(ttnn, "is_tensor_storage_on_device", lambda t: isinstance(t, Tensor))

    def to_memory_config(t: Any, mem: Any) -> Any:  # a device op: a new tensor in `mem`, no data to the host
        calls["device_ops"].append(("to_memory_config", t.address, mem))
        moved = Tensor(ttnn, t.dtype, t.layout, t.shape, t.device())
        moved._mem = mem
        return moved

    monkeypatch.setattr(ttnn, "to_memory_config", to_memory_config)
    monkeypatch.setattr(ttnn, "deallocate", lambda t: calls["device_ops"].append(("deallocate", t.address, None)))
    for name in ("to_torch", "from_torch", "to_device", "from_device"):
        monkeypatch.setattr(ttnn, name, move)
    monkeypatch.setattr(step_cache, "has_tenstorrent_device", lambda: True)
    STEPS.clear()
    tiles = ttnn.TILE_LAYOUT
    t = dict(
        q=Tensor(ttnn, ttnn.bfloat16, tiles, (1, B, NH, D), device),
        k=Tensor(ttnn, ttnn.bfloat8_b, tiles, (B, NKV, S, D), device),
        v=Tensor(ttnn, ttnn.bfloat8_b, tiles, (B, NKV, S, D), device),
        cur_pos=Tensor(ttnn, ttnn.int32, ttnn.ROW_MAJOR_LAYOUT, (B,), device),
        k_paged=Tensor(ttnn, ttnn.bfloat8_b, tiles, (B * S // 64, NKV, 64, D), device),
        v_paged=Tensor(ttnn, ttnn.bfloat8_b, tiles, (B * S // 64, NKV, 64, D), device),
        page_table=Tensor(ttnn, ttnn.int32, ttnn.ROW_MAJOR_LAYOUT, (B, S // 64), device),
    )
    yield {"calls": calls, "t": t, "Tensor": Tensor, "device": device}
    STEPS.clear()


def _has_core(k: Any, x: int, y: int) -> bool:
    return any(r.start.x <= x <= r.end.x and r.start.y <= y <= r.end.y for r in k.core_ranges.ranges())


def test_twenty_steps_with_a_cur_pos_tensor_reuse_one_descriptor_and_move_nothing(fake: dict[str, Any]) -> None:
    t, calls = fake["t"], fake["calls"]
    for step in range(20):
        ttdecode.scaled_dot_product_attention_decode(t["q"], t["k"], t["v"], cur_pos_tensor=t["cur_pos"],
                                                     backend="device")
    assert calls["moves"] == 0
    assert len(STEPS) == 1
    descs = {id(c[0]) for c in calls["generic_op"]}
    hashes = {c[1] for c in calls["generic_op"]}
    counts = [c[2] for c in calls["generic_op"]]
    assert len(calls["generic_op"]) == 20 and len(descs) == 1 and len(hashes) == 1
    assert all(c == counts[0] for c in counts)  # the runtime-argument count never changes
    # reader common args: the addresses of q, k, v, cur_pos (no page table, sink or mask)
    reader_common = calls["generic_op"][-1][3]
    assert reader_common == [t["q"].address, t["k"].address, t["v"].address, t["cur_pos"].address, 0, 0, 0]
    # each step's fresh output address reaches the writer
    outs = [c[4][0] for c in calls["generic_op"]]
    assert len(set(outs)) == 20 and all(c[4][0] == c[5][-1] for c in calls["generic_op"])


def test_list_positions_travel_as_common_runtime_args_with_a_fixed_count(fake: dict[str, Any]) -> None:
    t, calls = fake["t"], fake["calls"]
    seen = []
    for step in range(5):
        pos = [10 * step + b for b in range(B - 1)] + [-1]
        ttdecode.scaled_dot_product_attention_decode(t["q"], t["k"], t["v"], cur_pos=pos, backend="device")
        seen.append(calls["generic_op"][-1][3][7:])
    assert seen[3] == [30, 31, 32, 0xFFFFFFFF]
    counts = [c[2] for c in calls["generic_op"]]
    assert all(c == counts[0] for c in counts) and counts[0][0][0] == 7 + B
    assert len(STEPS) == 1 and len({id(c[0]) for c in calls["generic_op"]}) == 1
    # a host check stays eager for a list
    with pytest.raises(ValueError, match=r"cur_pos\[0\]"):
        ttdecode.scaled_dot_product_attention_decode(t["q"], t["k"], t["v"], cur_pos=[S] * B, backend="device")


def test_paged_steps_read_the_device_page_table_without_a_readback(fake: dict[str, Any]) -> None:
    t, calls = fake["t"], fake["calls"]
    for _ in range(3):
        ttdecode.paged_scaled_dot_product_attention_decode(t["q"], t["k_paged"], t["v_paged"], t["page_table"],
                                                           cur_pos_tensor=t["cur_pos"], backend="device")
    assert calls["moves"] == 0 and len(STEPS) == 1
    assert calls["generic_op"][-1][3][4] == t["page_table"].address


def test_a_new_address_is_patched_and_a_new_shape_is_a_new_step(fake: dict[str, Any], ttnn: Any) -> None:
    t, calls, Tensor = fake["t"], fake["calls"], fake["Tensor"]
    ttdecode.scaled_dot_product_attention_decode(t["q"], t["k"], t["v"], cur_pos_tensor=t["cur_pos"], backend="device")
    q2 = Tensor(ttnn, ttnn.bfloat16, ttnn.TILE_LAYOUT, (1, B, NH, D), fake["device"])
    ttdecode.scaled_dot_product_attention_decode(q2, t["k"], t["v"], cur_pos_tensor=t["cur_pos"], backend="device")
    assert calls["generic_op"][-1][3][0] == q2.address and len(STEPS) == 1
    ttdecode.scaled_dot_product_attention_decode(t["q"], t["k"], t["v"], cur_pos=[1] * B, backend="device")
    assert len(STEPS) == 2


def test_page_table_tensor_is_ttnns_name_and_page_table_its_alias(fake: dict[str, Any]) -> None:
    t, calls = fake["t"], fake["calls"]
    ttdecode.paged_scaled_dot_product_attention_decode(t["q"], t["k_paged"], t["v_paged"],
                                                       page_table_tensor=t["page_table"],
                                                       cur_pos_tensor=t["cur_pos"], backend="device")
    ttdecode.paged_scaled_dot_product_attention_decode(t["q"], t["k_paged"], t["v_paged"], page_table=t["page_table"],
                                                       cur_pos_tensor=t["cur_pos"], backend="device")
    assert len(calls["generic_op"]) == 2
    with pytest.raises(TypeError, match="page_table"):
        ttdecode.paged_scaled_dot_product_attention_decode(t["q"], t["k_paged"], t["v_paged"], t["page_table"],
                                                           page_table=t["page_table"], cur_pos_tensor=t["cur_pos"],
                                                           backend="device")


def test_auto_takes_the_device_only_for_device_tensors(fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from ttdecode import backend, ttnn_env

    monkeypatch.setattr(ttnn_env, "has_tenstorrent_device", lambda: True)
    t = fake["t"]
    assert backend.select_backend(t["q"], t["k"], t["v"]) == "device"
    assert backend.select_backend(torch.zeros(1, B, NH, D), t["k"], t["v"]) == "host"
    assert backend.select_backend(t["q"], t["k"], None) == "device"  # MLA: no V


def _counting_validate(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    import ttdecode.api as api

    count = [0]
    real = api.validate_decode

    def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "validate_decode", counting)
    return count


def test_ttnn_config_objects_take_the_fast_path_and_a_mutated_one_or_a_changed_spec_misses(
        fake: dict[str, Any], ttnn: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    t, calls = fake["t"], fake["calls"]
    validated = _counting_validate(monkeypatch)
    pc = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), q_chunk_size=0, k_chunk_size=0,
                                exp_approx_mode=False)
    ckc = ttnn.WormholeComputeKernelConfig(math_fidelity=ttnn.MathFidelity.HiFi4, math_approx_mode=False,
                                           fp32_dest_acc_en=True, packer_l1_acc=False)

    def call(q: Any = None) -> Any:
        return ttdecode.scaled_dot_product_attention_decode(
            t["q"] if q is None else q, t["k"], t["v"], cur_pos_tensor=t["cur_pos"], program_config=pc,
            compute_kernel_config=ckc, backend="device")

    for _ in range(3):
        call()
    assert validated[0] == 1 and len(calls["generic_op"]) == 3  # steps 2 and 3: the fast path
    ckc.math_fidelity = ttnn.MathFidelity.HiFi2  # the same object, mutated: another program
    call()
    assert validated[0] == 2 and len(STEPS) == 2
    call()
    assert validated[0] == 2  # the mutated object's conversion is reused while it stays as it is
    # a Q of another placement (same shape and dtype) is another spec: validated, and moved to DRAM
    q_l1 = fake["Tensor"](ttnn, ttnn.bfloat16, ttnn.TILE_LAYOUT, (1, B, NH, D), fake["device"])
    q_l1._mem = ttnn.L1_MEMORY_CONFIG
    calls["device_ops"].clear()
    call(q_l1)
    assert validated[0] == 3
    call(q_l1)
    assert validated[0] == 3  # now cached: the fast path moves it too
    ops = calls["device_ops"]
    assert [o[0] for o in ops] == ["to_memory_config", "deallocate"] * 2
    assert all(o[1] == q_l1.address and o[2] == ttnn.DRAM_MEMORY_CONFIG for o in ops[0::2])
    read = [c[3][0] for c in calls["generic_op"][-2:]]  # the Q address each of the two programs read
    assert [o[1] for o in ops[1::2]] == read  # the moved copy is what the program read, then freed
    # the program read the moved copy, never the L1 tensor
    assert calls["generic_op"][-1][3][0] != q_l1.address and calls["moves"] == 0
    counts = [c[2] for c in calls["generic_op"]]
    assert all(c == counts[0] for c in counts)  # moves around the program never change its arg count


def test_an_output_memory_config_is_met_by_a_device_move_or_written_in_its_shards(fake: dict[str, Any],
                                                                                   ttnn: Any) -> None:
    t, calls = fake["t"], fake["calls"]
    grid = ttnn.CoreRangeSet([ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(B - 1, 0))])
    sharded = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1,
                                ttnn.ShardSpec(grid, [32, D], ttnn.ShardOrientation.ROW_MAJOR))
    # L1 interleaved: the program writes a DRAM tensor, moved then freed
    out = ttdecode.scaled_dot_product_attention_decode(t["q"], t["k"], t["v"], cur_pos_tensor=t["cur_pos"],
                                                       memory_config=ttnn.L1_MEMORY_CONFIG, backend="device")
    assert out.memory_config() == ttnn.L1_MEMORY_CONFIG
    written = calls["generic_op"][-1][5][-1]
    assert calls["device_ops"] == [("to_memory_config", written, ttnn.L1_MEMORY_CONFIG), ("deallocate", written, None)]
    # height-sharded [32 padded heads, Dv] per user (tt_transformers' SCORES_BATCHED_MM_OUTPUT_MEMCFG): the
    # writer writes the output in its L1 shards (validating and fast path alike), nothing moved
    for _ in range(3):
        out = ttdecode.scaled_dot_product_attention_decode(t["q"], t["k"], t["v"], cur_pos_tensor=t["cur_pos"],
                                                           memory_config=sharded, backend="device")
        assert out.memory_config() == sharded and calls["generic_op"][-1][5][-1] == out.address
        writer = calls["generic_op"][-1][4]  # its common args: out, lse, then the holders' NoC (x, y)
        assert writer[2:] == [v for b in range(B) for v in (18 + b, 18)]
    assert len(calls["device_ops"]) == 2
    out = ttdecode.scaled_dot_product_attention_decode(t["q"], t["k"], t["v"], cur_pos_tensor=t["cur_pos"],
                                                       memory_config=ttnn.DRAM_MEMORY_CONFIG, backend="device")
    assert out.memory_config() == ttnn.DRAM_MEMORY_CONFIG and len(calls["device_ops"]) == 2
    too_few = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1,
                                ttnn.ShardSpec(ttnn.CoreRangeSet([ttnn.CoreRange(ttnn.CoreCoord(0, 0),
                                                                                 ttnn.CoreCoord(1, 0))]),
                                               [32, D], ttnn.ShardOrientation.ROW_MAJOR))
    with pytest.raises(ValueError, match=r"argument 'memory_config': .*\(128 tile rows.*got shard shape \[32, 128\] on 2 cores"):
        ttdecode.scaled_dot_product_attention_decode(t["q"], t["k"], t["v"], cur_pos_tensor=t["cur_pos"],
                                                     memory_config=too_few, backend="device")


def test_plan_decode_plans_once_and_its_step_runs_per_token_without_validation(
        fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The visible plan/run object: ``plan_decode`` validates and builds once; ``step.run`` per token
    validates its first call, then checks tensor specs only; it is not one of the API's kept steps."""
    import ttdecode.ops.flash_decode.device_step as device_step

    t, calls = fake["t"], fake["calls"]
    count = [0]
    real = device_step.validate_decode

    def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(device_step, "validate_decode", counting)
    step = ttdecode.plan_decode(t["q"], t["k_paged"], t["v_paged"],
                                ttdecode.DecodeOptions(paged=True, page_table=t["page_table"],
                                                       cur_pos_tensor=t["cur_pos"]))
    assert isinstance(step, ttdecode.FlashDecodeStep) and count[0] == 1 and calls["generic_op"] == []
    for _ in range(5):
        step.run(t["q"], t["k_paged"], t["v_paged"], cur_pos_tensor=t["cur_pos"], page_table=t["page_table"])
    assert count[0] == 2 and step.calls == 5 and len(calls["generic_op"]) == 5 and len(STEPS) == 0
    assert {id(c[0]) for c in calls["generic_op"]} == {id(step.prepared.descriptor)} and calls["moves"] == 0
    assert calls["generic_op"][-1][3][4] == t["page_table"].address
    with pytest.raises(ValueError, match="cur_pos"):  # causal: this token's positions are needed
        step.run(t["q"], t["k_paged"], t["v_paged"], page_table=t["page_table"])
    with pytest.raises(ValueError, match="not of the decode shape the step was planned for"):
        step.run(t["q"], t["k_paged"], t["v_paged"], cur_pos=[1] * B, page_table=t["page_table"])


def test_the_api_and_a_planned_step_build_the_same_program(fake: dict[str, Any]) -> None:
    t, calls = fake["t"], fake["calls"]
    ttdecode.scaled_dot_product_attention_decode(t["q"], t["k"], t["v"], cur_pos_tensor=t["cur_pos"], backend="device")
    step = ttdecode.plan_decode(t["q"], t["k"], t["v"], ttdecode.DecodeOptions(cur_pos_tensor=t["cur_pos"]))
    step.run(t["q"], t["k"], t["v"], cur_pos_tensor=t["cur_pos"])
    kept = STEPS.steps()
    assert len(kept) == 1 and kept[0].key == step.key and kept[0].plan == step.plan
    assert calls["generic_op"][0][1] == calls["generic_op"][1][1]  # one program hash
