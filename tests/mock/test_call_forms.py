"""tt_transformers' call forms on ttdecode's FlashDecode device backend, on a mock N150 through the
real ttnn: Q height-sharded in L1 as ``ttnn.experimental.nlp_create_qkv_heads_decode``
makes it (one tile row of 32 padded heads per user on B cores, made anew each step like a model's
QKV split) or interleaved in L1; cur_pos_tensor and page table in DRAM, L1 interleaved or
height-sharded in L1; the output's ``memory_config`` None, DRAM, L1 or height-sharded L1 ``[32, Dv]``
over B cores; ``ttnn.SDPAProgramConfig`` / ``ttnn.WormholeComputeKernelConfig`` objects. Each form
runs 4 steps; pinned against ttnn itself: the output's ``memory_config()`` equals the one asked for
(DRAM interleaved for None) and its shape is [1, B, NH, Dv]; steps 2..4 move no data between host
and device (ttdecode.testing.transfers), validate nothing (the fast path: validate_decode runs on
step 1 only) and add no program-cache entry after step 2. The mock computes nothing (no numerics).

ttnn's own op is run once on each form too: it takes the DRAM / L1 cur_pos_tensor and page table,
sharded Q and DRAM or L1 outputs, but (ttnn 0.81.1) refuses a sharded output with GQA, a Q
interleaved in L1 and a height-sharded page table in int32 (it wants uint16 there, which ttdecode's
int32 page-table rule refuses): ttdecode takes those three forms as extensions."""

from __future__ import annotations

FORMS = r"""
import torch
import ttnn
import ttdecode
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.transfers import count_calls, count_transfers
import ttdecode.api as api

validations = count_calls(api, "validate_decode")  # kept: the block ends when it is collected
validated = validations.__enter__()  # counted for the child's lifetime

d = open_mock_device()
B, NH, NKV, D, S, BLOCK = 4, 32, 8, 128, 1024, 64
grid = d.compute_with_storage_grid_size()
users = ttnn.num_cores_to_corerangeset(B, grid, row_wise=True)
one_core = ttnn.CoreRangeSet([ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(0, 0))])

def height_sharded(shape, cores):
    return ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1,
                             ttnn.ShardSpec(cores, list(shape), ttnn.ShardOrientation.ROW_MAJOR))

OUT_SHARDED = height_sharded((32, D), users)  # tt_transformers' SDPA output: [32 padded heads, Dv] per user
k = ttnn.from_torch(torch.randn(B, NKV, S, D), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=d)
v = ttnn.from_torch(torch.randn(B, NKV, S, D), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=d)
pool = B * S // BLOCK
kp = ttnn.from_torch(torch.randn(pool, NKV, BLOCK, D), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=d)
vp = ttnn.from_torch(torch.randn(pool, NKV, BLOCK, D), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=d)
table_values = torch.randperm(pool, dtype=torch.int32).reshape(B, S // BLOCK)
fused_mem = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.BufferType.L1,  # the fused QKV
                              ttnn.ShardSpec(one_core, [32, (NH + 2 * NKV) * D], ttnn.ShardOrientation.ROW_MAJOR))
fused = ttnn.from_torch(torch.randn(1, 1, B, (NH + 2 * NKV) * D), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                        device=d, memory_config=fused_mem)
q_dram = ttnn.from_torch(torch.randn(1, B, NH, D), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=d)
q_l1 = ttnn.to_memory_config(q_dram, ttnn.L1_MEMORY_CONFIG)
int_mems = {"dram": ttnn.DRAM_MEMORY_CONFIG, "l1": ttnn.L1_MEMORY_CONFIG}

def int_tensor(values, where):
    t = ttnn.from_torch(values, dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=d)
    if where == "sharded":
        return ttnn.to_memory_config(t, height_sharded(tuple(values.shape) if values.dim() == 2 else (1, B), one_core))
    return ttnn.to_memory_config(t, int_mems[where]) if where != "dram" else t

pc = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), q_chunk_size=0, k_chunk_size=0,
                            exp_approx_mode=False)
ckc = ttnn.WormholeComputeKernelConfig(math_fidelity=ttnn.MathFidelity.HiFi2, math_approx_mode=False,
                                       fp32_dest_acc_en=True, packer_l1_acc=False)
FORMS = [  # (q, cur_pos place, paged page-table place or None, output memory_config name, ttnn configs)
    ("sharded", "dram", None, "none", False),
    ("sharded", "l1", None, "dram", True),
    ("sharded", "sharded", None, "sharded", True),
    ("l1", "l1", None, "l1", False),
    ("sharded", "l1", "sharded", "sharded", True),
    ("dram", "sharded", "l1", "l1", False),
]
OUT_MEMS = {"none": None, "dram": ttnn.DRAM_MEMORY_CONFIG, "l1": ttnn.L1_MEMORY_CONFIG, "sharded": OUT_SHARDED}
results = []
for q_form, pos_form, table_form, out_form, ttnn_configs in FORMS:
    pos = int_tensor(torch.tensor([0, 5, 100, S - 1], dtype=torch.int32), pos_form)
    table = None if table_form is None else int_tensor(table_values, table_form)
    requested = OUT_MEMS[out_form]
    kwargs = dict(cur_pos_tensor=pos, memory_config=requested, backend="device")
    if ttnn_configs:
        kwargs.update(program_config=pc, compute_kernel_config=ckc)
    validated.clear()
    row = {"form": [q_form, pos_form, table_form, out_form, ttnn_configs], "mem_ok": [], "shapes": []}
    with count_transfers() as log:
        for step in range(1, 5):
            if q_form == "sharded":
                q, kk, vv = ttnn.experimental.nlp_create_qkv_heads_decode(
                    fused, num_heads=NH, num_kv_heads=NKV, memory_config=ttnn.L1_HEIGHT_SHARDED_MEMORY_CONFIG)
                if step == 1:
                    row["q_mem"] = repr(q.memory_config())
            else:
                q = q_l1 if q_form == "l1" else q_dram
            if step == 1:  # ttnn's own op on the same form (its verdict, for the record)
                theirs = {kk_: vv_ for kk_, vv_ in kwargs.items() if kk_ != "backend"}
                try:
                    if table is None:
                        ref = ttnn.transformer.scaled_dot_product_attention_decode(q, k, v, **theirs)
                    else:
                        ref = ttnn.transformer.paged_scaled_dot_product_attention_decode(
                            q, kp, vp, page_table_tensor=table, **theirs)
                    row["ttnn"] = "accepted"
                    ttnn.deallocate(ref)
                except RuntimeError as e:
                    row["ttnn"] = str(e).split("\n")[0][-160:] + " | " + str(e).split("info:")[-1].split("backtrace")[0].strip()
            if table is None:
                out = ttdecode.scaled_dot_product_attention_decode(q, k, v, **kwargs)
            else:
                out = ttdecode.paged_scaled_dot_product_attention_decode(q, kp, vp, page_table_tensor=table, **kwargs)
            want = ttnn.DRAM_MEMORY_CONFIG if requested is None else requested
            row["mem_ok"].append(out.memory_config() == want)
            row["shapes"].append(list(out.shape))
            ttnn.deallocate(out)
            if q_form == "sharded":
                for t in (q, kk, vv):
                    ttnn.deallocate(t)
            if step == 1:
                log.clear()
                row["validated_step1"] = validated.calls
            if step == 2:  # (ttnn's own op ran on step 1 only: its cache entries are in by now)
                row["entries2"] = int(d.num_program_cache_entries())
        row["entries4"] = int(d.num_program_cache_entries())
        row["moves"] = list(log.moves)
    row["validated"] = validated.calls
    results.append(row)
# a sharded output config the shape cannot meet: refused by name, before anything runs
bad = height_sharded((32, 64), users)
try:
    ttdecode.scaled_dot_product_attention_decode(q_dram, k, v, cur_pos_tensor=int_tensor(
        torch.zeros(B, dtype=torch.int32), "dram"), memory_config=bad, backend="device")
    refusal = None
except ValueError as e:
    refusal = str(e)
emit({"results": results, "refusal": refusal})
ttnn.close_device(d)
"""


def test_tt_transformers_call_forms_run_on_the_device_backend_with_the_placements_asked_for(run_mock) -> None:
    r = run_mock(FORMS, timeout=400)
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    for row in res["results"]:
        form = row["form"]
        if form[0] == "sharded":  # what nlp_create_qkv_heads_decode made: [32, D] shards on B=4 cores
            assert "HEIGHT_SHARDED" in row["q_mem"] and "shape=[32, 128]" in row["q_mem"], row["q_mem"]
        assert row["mem_ok"] == [True] * 4, f"{form}: output memory_config() == the one asked for: {row['mem_ok']}"
        assert row["shapes"] == [[1, 4, 32, 128]] * 4, form
        assert row["moves"] == [], f"{form}: host<->device moves in steps 2..4: {row['moves']}"
        assert row["entries2"] == row["entries4"], f"{form}: program-cache entries at steps 2 / 4"
        assert row["validated_step1"] == 1 and row["validated"] == 1, f"{form}: validations {row}"
    # ttnn 0.81.1's own op on the same forms: it takes 1, 2 and 6; the others are ttdecode's extensions,
    # each refused by ttnn for its own reason (pinned so that a ttnn that starts taking them is noticed)
    verdicts = [row["ttnn"] for row in res["results"]]
    assert [verdicts[i] for i in (0, 1, 5)] == ["accepted"] * 3, verdicts
    assert "Sharded output not supported for GQA" in verdicts[2], verdicts[2]
    assert "Q tensor buffer type must be DRAM when not sharded" in verdicts[3], verdicts[3]
    assert "only supports UINT16 datatype for sharded" in verdicts[4], verdicts[4]
    assert res["refusal"] is not None and "argument 'memory_config'" in res["refusal"] \
        and "shard width Dv=128" in res["refusal"] and "got shard shape [32, 64]" in res["refusal"], res["refusal"]
