"""tt_transformers' decode attention, replayed on a mock N150 with ttdecode patched in.

The op sequence, arguments and memory configs of ``Attention.forward_decode`` in tenstorrent/tt-metal
``models/tt_transformers/tt/attention.py`` (paged path, one N150: no CCL), with the configs of its
``model_config.py`` (SDPA_DECODE_PROGCFG: grid 8x8, exp_approx_mode False, q/k chunk 0;
SDPA_DECODE_COMPUTE_PROGCFG: HiFi2, no approx, no fp32 dest, no packer L1 acc;
SCORES_BATCHED_MM_OUTPUT_MEMCFG: [32, D] height shards on cores (0,0)..(B-1,0)) and the decode RoPE
of ``rope.py``'s RotarySetup (embedding of the positions into cos/sin, height-sharded on the batch
grid, the decode transformation matrix), at Llama-3.1-8B head shapes (32 q / 8 KV heads, D 128),
B 8, paged K/V bfloat8_b in DRAM (block 64, 128 blocks), under ``ttdecode.patch_ttnn()``:

    ttnn.linear (fused QKV, L1 bf16) -> reshape to the true batch -> nlp_create_qkv_heads_decode
    (L1_HEIGHT_SHARDED) -> rotary_embedding_llama (Q and K, is_decode_mode) -> paged_update_cache (K, V)
    -> ttnn.transformer.paged_scaled_dot_product_attention_decode (ours: the patched name)
    -> to_memory_config(SCORES_BATCHED_MM_OUTPUT_MEMCFG) -> nlp_concat_heads_decode -> O linear,
    then ttnn.plus_one on the positions and on the RoPE indices (advanced on the device).

Differences from the model, none at the attention op's interface: the QKV and O matmuls run ttnn.linear's
default program on interleaved DRAM weights (the model's DRAM-sharded matmul configs tune the matmul;
the tensor handed to nlp_create_qkv_heads_decode is the same L1 interleaved bf16 [1, 1, B (32), 6144]),
the hidden size is 1024 instead of 4096 (the weights' size, not the heads'), random cos/sin tables
(the mock computes nothing) and no trace (trace capture segfaults on the mock).

Checked over 5 steps, in two variants: the model as it is (tile-page pools, the SDPA output in DRAM), and
the model switched to the bank-local layout (its pools allocated by ``ttdecode.allocate_kv_pool``; under
patch_ttnn ttnn.experimental.paged_fill_cache / paged_update_cache then run ttdecode's ops) with the SDPA
output asked for in SCORES_BATCHED_MM_OUTPUT_MEMCFG (where the model moves it next; ttnn's own paged op
refuses a sharded output). Every op accepted; our programs ran (``last_backend() == 'device'``, our
kernels compiled by the JIT for every core kind: check_jit); no host<->device move in steps 2..5
(ttdecode.testing.transfers.count_transfers: ttnn's transfer functions and Tensor.cpu / Tensor.to wrapped
and counted); no new program-cache entry after step 2; our output has the shape, padded shape, dtype, layout
and memory config of ttnn's own op on the same inputs (moved to the sharded config in the second variant),
and the patch is gone after the block. ttnn's graph capture of step 3 pins what a step issues: Q read where
nlp_create_qkv_heads_decode left it (height-sharded in L1) and, bank-local, K / V read there by the cache
updates: no ``to_memory_config`` of ours (the one left in the first variant is the model's own).
"""

from __future__ import annotations

import pytest

from ttdecode.testing.dry_run import check_jit, jit_records

REPLAY = r"""
import torch
import ttnn
import ttdecode
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device

B, NH, NKV, D, BLOCK, DIM, MAX_SEQ, STEPS = 8, 32, 8, 128, 64, 1024, 1024, 5
NBLOCKS = B * MAX_SEQ // BLOCK

from ttdecode.testing.transfers import count_transfers

d = open_mock_device()
g = torch.Generator().manual_seed(0)
DRAM = ttnn.DRAM_MEMORY_CONFIG
tile = dict(layout=ttnn.TILE_LAYOUT, device=d)
x = ttnn.from_torch(torch.randn(1, 1, B, DIM, generator=g), dtype=ttnn.bfloat16, **tile)
wqkv = ttnn.from_torch(torch.randn(1, 1, DIM, (NH + 2 * NKV) * D, generator=g) * 0.02, dtype=ttnn.bfloat8_b, **tile)
wo = ttnn.from_torch(torch.randn(1, 1, NH * D, DIM, generator=g) * 0.02, dtype=ttnn.bfloat8_b, **tile)
POOL = "__POOL__"
if POOL == "bank_local":  # the one change that switches the model: its pools allocated through ttdecode
    keys = ttdecode.allocate_kv_pool(NBLOCKS, NKV, BLOCK, D, dtype="bfloat8_b", device=d)
    values = ttdecode.allocate_kv_pool(NBLOCKS, NKV, BLOCK, D, dtype="bfloat8_b", device=d)
else:
    keys = ttnn.from_torch(torch.zeros(NBLOCKS, NKV, BLOCK, D), dtype=ttnn.bfloat8_b, memory_config=DRAM, **tile)
    values = ttnn.from_torch(torch.zeros(NBLOCKS, NKV, BLOCK, D), dtype=ttnn.bfloat8_b, memory_config=DRAM, **tile)
pools_bank_local = [ttdecode.is_bank_local(keys), ttdecode.is_bank_local(values)]
page_table = ttnn.from_torch(torch.randperm(NBLOCKS, generator=g).reshape(B, NBLOCKS // B).to(torch.int32),
                             dtype=ttnn.int32, device=d, memory_config=DRAM)
start = torch.tensor([0, 5, 17, 63, 64, 200, 511, 1000])
current_pos = ttnn.from_torch(start.to(torch.int32), dtype=ttnn.int32, device=d, memory_config=DRAM)
rot_idxs = ttnn.from_torch(torch.nn.functional.pad(start, (0, 32 - B)).reshape(1, 32).to(torch.int32),
                           dtype=ttnn.uint32, layout=ttnn.ROW_MAJOR_LAYOUT, device=d, memory_config=DRAM)
cos_matrix = ttnn.from_torch(torch.randn(1, 1, MAX_SEQ, D, generator=g), dtype=ttnn.bfloat16,
                             layout=ttnn.ROW_MAJOR_LAYOUT, device=d)
sin_matrix = ttnn.from_torch(torch.randn(1, 1, MAX_SEQ, D, generator=g), dtype=ttnn.bfloat16,
                             layout=ttnn.ROW_MAJOR_LAYOUT, device=d)

def sharded(shape, grid):
    return ttnn.create_sharded_memory_config(shape=shape, core_grid=grid, strategy=ttnn.ShardStrategy.HEIGHT,
                                             orientation=ttnn.ShardOrientation.ROW_MAJOR,
                                             use_height_and_width_as_shard_shape=True)
batch_grid = ttnn.num_cores_to_corerangeset(B, d.compute_with_storage_grid_size(), row_wise=True)
trans = torch.zeros(1, 1, 32, 32)  # the decode RoPE transformation matrix (pairs rotated), one tile per user
trans[..., torch.arange(0, 32, 2), torch.arange(1, 32, 2)] = 1
trans[..., torch.arange(1, 32, 2), torch.arange(0, 32, 2)] = -1
trans_mat = ttnn.from_torch(trans.repeat(1, 1, B, 1), dtype=ttnn.bfloat16, memory_config=sharded((32, 32), batch_grid),
                            **tile)
SDPA_DECODE_PROGCFG = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), exp_approx_mode=False,
                                             q_chunk_size=0, k_chunk_size=0)
SDPA_DECODE_COMPUTE_PROGCFG = ttnn.WormholeComputeKernelConfig(math_fidelity=ttnn.MathFidelity.HiFi2,
                                                               math_approx_mode=False, fp32_dest_acc_en=False,
                                                               packer_l1_acc=False)
SCORES_BATCHED_MM_OUTPUT_MEMCFG = sharded(
    (32, D), ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(B - 1, 0))}))

def rot_mats():
    # RotarySetup.get_rot_mats (decode)
    cos = ttnn.embedding(rot_idxs, cos_matrix, layout=ttnn.TILE_LAYOUT)
    sin = ttnn.embedding(rot_idxs, sin_matrix, layout=ttnn.TILE_LAYOUT)
    cos, sin = ttnn.unsqueeze_to_4D(cos), ttnn.unsqueeze_to_4D(sin)
    cos, sin = ttnn.transpose(cos, 1, 2), ttnn.transpose(sin, 1, 2)
    cos, sin = cos[:, :B, :, :], sin[:, :B, :, :]
    mc = sharded((ttnn.TILE_SIZE, D), batch_grid)
    return [ttnn.interleaved_to_sharded(cos, mc), ttnn.interleaved_to_sharded(sin, mc)]

def form(t):
    return {"shape": list(t.shape), "padded": list(t.padded_shape), "dtype": str(t.dtype), "layout": str(t.layout),
            "memory_config": repr(t.memory_config())}

OUT = "__OUT__"  # "dram": the model's call; "sharded": the output asked for where the model moves it
OUT_MEMCFG = ttnn.DRAM_MEMORY_CONFIG if OUT == "dram" else SCORES_BATCHED_MM_OUTPUT_MEMCFG

def sdpa(q):
    return ttnn.transformer.paged_scaled_dot_product_attention_decode(
        q, keys, values, cur_pos_tensor=current_pos, page_table_tensor=page_table, scale=D ** -0.5,
        program_config=SDPA_DECODE_PROGCFG, compute_kernel_config=SDPA_DECODE_COMPUTE_PROGCFG,
        memory_config=OUT_MEMCFG)

class Refused(Exception):
    pass

def run(op, fn):
    try:
        return fn()
    except Exception as e:
        raise Refused(op, f"{type(e).__name__}: {e}")

def forward_decode():
    # Attention.forward_decode, paged, one device
    xqkv_fused = run("linear(qkv)", lambda: ttnn.linear(x, wqkv, memory_config=ttnn.L1_MEMORY_CONFIG, dtype=ttnn.bfloat16))
    n = xqkv_fused.shape[3]
    xqkv_fused = run("reshape", lambda: ttnn.reshape(xqkv_fused, (1, 1, B, n), (1, 1, 32, n)))
    q_pre, k_pre, v = run("nlp_create_qkv_heads_decode", lambda: ttnn.experimental.nlp_create_qkv_heads_decode(
        xqkv_fused, num_heads=NH, num_kv_heads=NKV, memory_config=ttnn.L1_HEIGHT_SHARDED_MEMORY_CONFIG))
    ttnn.deallocate(xqkv_fused)
    rm = run("rot_mats", rot_mats)
    q = run("rotary_embedding_llama(q)", lambda: ttnn.experimental.rotary_embedding_llama(
        q_pre, rm[0], rm[1], trans_mat, is_decode_mode=True))
    k = run("rotary_embedding_llama(k)", lambda: ttnn.experimental.rotary_embedding_llama(
        k_pre, rm[0], rm[1], trans_mat, is_decode_mode=True))
    ttnn.deallocate(q_pre)
    ttnn.deallocate(k_pre)
    run("paged_update_cache(k)", lambda: ttnn.experimental.paged_update_cache(
        keys, k, update_idxs_tensor=current_pos, page_table=page_table))
    run("paged_update_cache(v)", lambda: ttnn.experimental.paged_update_cache(
        values, v, update_idxs_tensor=current_pos, page_table=page_table))
    ttnn.deallocate(k)
    ttnn.deallocate(v)
    attn = run("paged_scaled_dot_product_attention_decode", lambda: sdpa(q))
    backend = ttdecode.last_backend()
    attn_form = form(attn)
    if OUT == "dram":
        attn_11BH = run("to_memory_config", lambda: ttnn.to_memory_config(attn, memory_config=SCORES_BATCHED_MM_OUTPUT_MEMCFG))
        ttnn.deallocate(attn)
    else:
        attn_11BH = attn
    cat = run("nlp_concat_heads_decode", lambda: ttnn.experimental.nlp_concat_heads_decode(attn_11BH, num_heads=NH))
    ttnn.deallocate(attn_11BH)
    dense = run("linear(o)", lambda: ttnn.linear(cat, wo, memory_config=cat.memory_config()))
    cat_form = form(cat)
    ttnn.deallocate(cat)
    return q, dense, backend, attn_form, cat_form

def prefill_fill():
    # Attention.forward_prefill's cache fill: one user's prompt K and V through its page-table row
    prompt = ttnn.from_torch(torch.randn(1, NKV, 2 * BLOCK, D, generator=g), dtype=ttnn.bfloat8_b, **tile)
    for cache in (keys, values):
        run("paged_fill_cache", lambda: ttnn.experimental.paged_fill_cache(cache, prompt, page_table, batch_idx=3))
    ttnn.deallocate(prompt)

def top_level_ops(graph):
    # the ops a step issued at the top level (ttnn::... names, in order)
    names, depth = [], 0
    for node in graph:
        if node["node_type"] == "function_start":
            if depth == 0:
                names.append(node["params"]["name"])
            depth += 1
        elif node["node_type"] == "function_end":
            depth -= 1
    return names

steps, refused, q, fill_backend = [], None, None, None
try:
    with count_transfers() as log, ttdecode.patch_ttnn():
        prefill_fill()
        fill_backend = ttdecode.last_backend()
        for step in range(1, STEPS + 1):
            log.clear()
            if q is not None:
                ttnn.deallocate(q)
            if step == 3:
                ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
            q, dense, backend, attn_form, cat_form = forward_decode()
            ops = top_level_ops(ttnn.graph.end_graph_capture()) if step == 3 else None
            ttnn.deallocate(dense)
            run("plus_one", lambda: (ttnn.plus_one(current_pos), ttnn.plus_one(rot_idxs)))
            steps.append({"step": step, "backend": backend, "moves": list(log.moves), "attn": attn_form,
                          "cat": cat_form, "entries": int(d.num_program_cache_entries()), "ops": ops})
except Refused as e:
    refused = {"op": e.args[0], "error": e.args[1]}
restored = all(type(op).__name__ == "FastOperation" for op in (
    ttnn.transformer.paged_scaled_dot_product_attention_decode, ttnn.experimental.paged_update_cache,
    ttnn.experimental.paged_fill_cache))
ttnn_form = None
if q is not None and refused is None:
    if POOL == "bank_local":  # ttnn's own op reads interleaved tile pages: the same pools moved there
        keys, values = ttdecode.to_tile_pages(keys), ttdecode.to_tile_pages(values)
    if OUT == "dram":
        ttnn_form = form(sdpa(q))  # ttnn's own op (unpatched) on the last step's inputs
    else:  # ttnn's paged op refuses a sharded output (TT_FATAL): its DRAM output moved there, as the model does
        OUT_MEMCFG = ttnn.DRAM_MEMORY_CONFIG
        ttnn_form = form(ttnn.to_memory_config(sdpa(q), memory_config=SCORES_BATCHED_MM_OUTPUT_MEMCFG))
from pathlib import Path
from ttdecode.ops.flash_decode.device_steps import STEPS
from ttdecode.ops.paged_fill import device_step as fill_steps
from ttdecode.ops.paged_update import device_step as update_steps
def kernels_of(programs):
    return [{"name": k.name, "source": str(Path(k.source).resolve()), "kind": k.kind.value}
            for p in programs for k in p.kernels]
kernels = kernels_of(s.program for s in STEPS.steps())
cache_kernels = kernels_of(s.program for m in (fill_steps, update_steps) for s in m._steps.values())
emit({"steps": steps, "refused": refused, "restored": restored, "ttnn_form": ttnn_form, "kernels": kernels,
      "cache_kernels": cache_kernels, "fill_backend": fill_backend, "bank_local": pools_bank_local})
ttnn.close_device(d)
"""

@pytest.mark.parametrize("pool, out", [("tile", "dram"), ("bank_local", "sharded")])
def test_tt_transformers_decode_attention_replays_with_ttdecode_patched_in(run_mock, mock_run, pool: str,
                                                                           out: str) -> None:
    r = run_mock(REPLAY.replace("__POOL__", pool).replace("__OUT__", out), timeout=400)
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert res["restored"], "ttnn's ops not restored after the block"
    refused = res["refused"]
    assert refused is None, f"{refused['op']} refused: {refused['error']}"
    assert res["bank_local"] == [pool == "bank_local"] * 2
    steps = res["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5]
    assert all(s["backend"] == "device" for s in steps), [s["backend"] for s in steps]
    assert res["kernels"], "no FlashDecode program was built"
    assert sorted(k["kind"] for k in res["kernels"]) == ["compute", "reader", "writer"], res["kernels"]
    problems = check_jit(res["kernels"] + res["cache_kernels"], jit_records(mock_run["jit_log"]))
    assert not problems, "\n".join(problems)
    for s in steps[1:]:
        assert s["moves"] == [], f"host<->device moves in step {s['step']}: {s['moves']}"
    assert all(s["entries"] == steps[1]["entries"] for s in steps[1:]), [s["entries"] for s in steps]
    # our output is what ttnn's op returns for the same call (shape [1, B, NH, D], padded, bf16, tile,
    # the requested memory config): the form to_memory_config / nlp_concat_heads_decode take
    for s in steps:
        assert s["attn"] == res["ttnn_form"], (s["attn"], res["ttnn_form"])
    assert steps[0]["attn"]["shape"] == [1, 8, 32, 128] and steps[0]["attn"]["dtype"] == "DataType.BFLOAT16"
    assert steps[0]["cat"]["shape"][-1] == 32 * 128
    ops = steps[2]["ops"]  # ttnn's graph capture of step 3: every op the step issued at the top level
    # the attention op reads Q where nlp_create_qkv_heads_decode left it (height-sharded in L1): our step
    # is an output allocation and the program. With the DRAM output the one to_memory_config is the model's
    # own, after it; with the output asked for in SCORES_BATCHED_MM_OUTPUT_MEMCFG the writer writes it
    # there (its L1 shards) and nlp_concat_heads_decode takes it as it comes: no to_memory_config at all
    rotary = len(ops) - 1 - ops[::-1].index("ttnn.experimental.rotary_embedding_llama")
    sdpa = ops.index("ttnn.allocate_tensor_on_device", rotary)
    after = "ttnn.to_memory_config" if out == "dram" else "ttnn.experimental.nlp_concat_heads_decode"
    assert ops[sdpa:sdpa + 3] == ["ttnn.allocate_tensor_on_device", "ttnn.generic_op", after], ops
    if pool == "bank_local":  # the two cache updates: one program each, reading K / V where they lie too
        assert ops[rotary + 1:sdpa] == ["ttnn.deallocate"] * 2 + ["ttnn.generic_op"] * 2 + ["ttnn.deallocate"] * 2, ops
    assert ops.count("ttnn.to_memory_config") == (1 if out == "dram" else 0), ops
    if pool == "bank_local":
        # the prompt fill and both cache updates are ttdecode's programs (generic_op), the pool never leaves
        # the bank-local layout (no to_memory_config of K or V), and ttnn's paged_update_cache is not called
        assert res["fill_backend"] == "device"
        assert sorted(k["name"] for k in res["cache_kernels"]) == sorted(
            ["fill_reader", "fill_writer", "update_reader", "update_writer", "update_compute"]), res["cache_kernels"]
        assert not any("paged_update_cache" in n for n in ops), ops
    else:
        assert res["cache_kernels"] == [] and sum("paged_update_cache" in n for n in ops) == 2, ops
