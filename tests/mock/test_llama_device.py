"""The Llama decoder on a mock N150 (`LlamaDecoder(backend="device", device=...)`): a small random
Llama (2 layers) decodes 20 steps with users joining and leaving, every layer through ttnn's ops and
ours; every op is accepted, no program-cache entry is added after step 2, and each step moves one
host -> device write (the token ids, with their positions and page table in the same int32 row) and
one device -> host read (the logits, or the argmax ids) and nothing else. The mock computes nothing
(reads return zeros): the numerics are the host backends' (tests/models), not checked here. The small
Llama also runs with 16-position blocks, in tile pages and in the default bank-local pages."""

from __future__ import annotations

import pytest

from ttdecode.testing.dry_run import check_jit, jit_records

COUNTER = r"""
import time
import torch
import ttnn
from ttdecode.models import LlamaDecoder, LlamaSpec
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device

# every host <-> device move of ttnn, by name (outermost call only: to_torch calls from_device)
from ttdecode.testing.drivers import join_leave_steps
from ttdecode.testing.transfers import count_transfers
transfers = count_transfers()  # kept: the block ends when it is collected
log = transfers.__enter__()  # counted for the child's lifetime
moves = log.moves


def our_kernels(dec):
    # the kernels of our programs in the step: the rotary append's and every cached FlashDecode step's of the
    # decoder's block size and pages
    from pathlib import Path
    from ttdecode.ops.flash_decode.device_steps import STEPS
    programs = [dec._device.rotary.program] + [s.program for s in STEPS.steps() if s.plan.block_size == dec.block_size
                                               and s.plan.kv_pages == dec.kv_pages]
    return [{"name": k.name, "source": str(Path(k.source).resolve()), "kind": k.kind.value}
            for p in programs for k in p.kernels]
"""

SMALL = COUNTER + r"""
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, max_position_embeddings=256, rope_theta=10000.0,
                  rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None, pad_token_id=None)
hf = LlamaForCausalLM(cfg).eval()
device = open_mock_device()
t0 = time.perf_counter()
dec = LlamaDecoder.from_hf(hf, batch=4, max_seq_len=64, block_size=32, backend="device", device=device)
build_moves, moves[:] = list(moves), []
build_s = time.perf_counter() - t0
steps = join_leave_steps(dec, device, 4, log)  # the default joins and leaves
kernels = our_kernels(dec)  # the decode steps' programs (generate's 32-token step adds its own)
# the default kv_pages "key_row": bank-local pools, the append writing and FlashDecode reading that layout
from ttdecode import is_bank_local
from ttdecode.ops.flash_decode.device_steps import STEPS
layout = {"pools": [is_bank_local(c) for kv in dec._device.caches for c in kv],
          "append": dec._device.rotary.program.tensor("k_cache").layout,
          "flash": sorted({bool(s.plan.bank_local) for s in STEPS.steps()}),
          "policy": dec.allocator.policy}
# generate: the prompts in one step of 32 tokens per user (tests/mock/test_llama_device_prompts.py has more)
entries = int(device.num_program_cache_entries())
gen = dec.generate(torch.arange(64).reshape(2, 32), 3, progress=False)
gen_moves = list(moves)
dec.close()


# A block_size 16 decoder (max_seq_len 72, 5 blocks a user, page tables of 6 entries per user) in `kv_pages`:
# slot 0 decodes to position 19 (across the block at 16), then (`generate`) the 32-token prompts (two blocks
# each).
def block16_run(kv_pages, generate):
    moves[:] = []
    dec = LlamaDecoder.from_hf(hf, batch=4, max_seq_len=72, block_size=16, kv_pages=kv_pages, backend="device",
                               device=device)
    build = list(moves)
    steps_ = join_leave_steps(dec, device, 4, log, joins={0: [0, 1], 2: [2], 5: [3], 12: [1]},
                              leaves={10: [1], 16: [2]})
    bank_local = kv_pages == "key_row"
    layout = {"pools": [is_bank_local(c) for kv in dec._device.caches for c in kv],
              "append": dec._device.rotary.program.tensor("k_cache").layout,
              "flash": sorted({(s.plan.block_size, bool(s.plan.bank_local)) for s in STEPS.steps()
                               if s.plan.block_size == 16 and bool(s.plan.bank_local) == bank_local}),
              "policy": dec.allocator.policy, "table": dec._device.max_blocks}
    if bank_local:  # blocks handed out in pairs (the default pool 6 blocks per user)
        layout.update(shape=list(dec._device.cache_shape), held=[len(b) for b in dec.allocator.blocks])
    out = {"build_moves": build, "steps": steps_, "kernels": our_kernels(dec), "layout": layout}
    if generate:
        entries_before = int(device.num_program_cache_entries())
        moves[:] = []
        made = dec.generate(torch.arange(64).reshape(2, 32), 3, progress=False)
        out["generate"] = {"shape": list(made.shape), "moves": len(moves),
                           "writes": moves.count("copy_host_to_device_tensor"),
                           "new_entries": int(device.num_program_cache_entries()) - entries_before}
    dec.close()
    return out


# block_size 16 in tile pages (ttnn's padded tile per block), then in the bank-local pages (the default kv_pages
# "key_row": a page per (block, KV head)); the same schedule
block16 = block16_run("tile", generate=True)
block16k = block16_run("key_row", generate=False)
emit({"build_seconds": round(build_s, 2), "build_moves": build_moves, "steps": steps, "kernels": kernels,
      "layout": layout, "generate": {"shape": list(gen.shape), "new_entries": int(device.num_program_cache_entries()) - entries,
                   "moves": len(gen_moves), "writes": gen_moves.count("copy_host_to_device_tensor")},
      "block16": block16, "block16_key_row": block16k})
ttnn.close_device(device)
"""

# One Llama-3.1-8B layer (the vocabulary cut to 1024: the LM head's shape is not the layer's), batch 32.
LLAMA31_8B_LAYER = COUNTER + r"""
spec = LlamaSpec(vocab_size=1024, hidden_size=4096, num_layers=1, num_heads=32, num_kv_heads=8, head_dim=128,
                 intermediate_size=14336, rms_norm_eps=1e-5, rope_theta=500000.0,
                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192}, attention_bias=False, mlp_bias=False)
g = torch.Generator().manual_seed(0)
r = lambda *shape: torch.randn(*shape, generator=g) * 0.02
p = "model.layers.0."
state = {"model.embed_tokens.weight": r(1024, 4096), "model.norm.weight": torch.ones(4096),
         "lm_head.weight": r(1024, 4096), p + "input_layernorm.weight": torch.ones(4096),
         p + "post_attention_layernorm.weight": torch.ones(4096), p + "self_attn.q_proj.weight": r(4096, 4096),
         p + "self_attn.k_proj.weight": r(1024, 4096), p + "self_attn.v_proj.weight": r(1024, 4096),
         p + "self_attn.o_proj.weight": r(4096, 4096), p + "mlp.gate_proj.weight": r(14336, 4096),
         p + "mlp.up_proj.weight": r(14336, 4096), p + "mlp.down_proj.weight": r(4096, 14336)}
device = open_mock_device()
t0 = time.perf_counter()
dec = LlamaDecoder(spec, state, batch=32, max_seq_len=1024, block_size=64, backend="device", device=device)
build_moves, moves[:] = list(moves), []
build_s = time.perf_counter() - t0
steps = join_leave_steps(dec, device, 32, log,
                         joins={0: list(range(0, 32, 2)), 4: list(range(1, 32, 4)), 9: [0, 2, 4],
                                12: list(range(3, 32, 4))},
                         leaves={7: [0, 2, 4, 6], 15: list(range(1, 32, 4))})
kernels = our_kernels(dec)
dec.close()
emit({"build_seconds": round(build_s, 2), "build_moves": build_moves, "steps": steps, "kernels": kernels})
ttnn.close_device(device)
"""


# The tensor-parallel decoder on a mock T3K (1 x 8 mesh, FABRIC_1D, WORKER dispatch): 8 q and 8 KV heads
# (one of each per chip), MLP columns and the vocabulary split 8 ways.
T3K_TP = COUNTER + r"""
VOCAB = 250  # not a multiple of 8: the LM head's last slice is zero-padded, sliced off before the argmax
from transformers import LlamaConfig, LlamaForCausalLM
from ttdecode.testing.mock import open_mock_mesh

torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                  num_key_value_heads=8, head_dim=32, max_position_embeddings=256, rope_theta=10000.0,
                  rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None, pad_token_id=None)
hf = LlamaForCausalLM(cfg).eval()
t0 = time.perf_counter()
device = open_mock_mesh((1, 8), fabric=True)
open_s = time.perf_counter() - t0
t0 = time.perf_counter()
dec = LlamaDecoder.from_hf(hf, batch=4, max_seq_len=64, block_size=32, devices=8, backend="device", device=device)
build_moves, moves[:] = list(moves), []
build_s = time.perf_counter() - t0
steps = join_leave_steps(dec, device, 4, log)  # the default joins and leaves
shapes = {name: list(t.shape) for name, t in dec._device.w.items() if name.startswith("0.") or name == "lm_head"}
kernels = our_kernels(dec)
dec.close()
emit({"open_seconds": round(open_s, 1), "build_seconds": round(build_s, 2), "build_moves": build_moves,
      "steps": steps, "kernels": kernels, "shapes": shapes, "cache_bytes_per_device": dec.cache_bytes_per_device})
ttnn.close_mesh_device(device)
"""


def _per_layer(layers: int, tp: int = 1, padded: bool = False) -> dict[str, int]:
    """The ttnn calls of one step: the input row's slices and casts, the RoPE rows, the embedding, per
    layer norm, QKV, our append and attention, head concat, O (all-reduced over a mesh), residual, norm,
    SwiGLU, down (all-reduced), residual; the final norm and the LM head (all-gathered)."""
    ops = {"slice": 3, "typecast": 2, "relu": 1, "embedding": 3, "reshape": 5 + 2 * layers,
           "rms_norm": 2 * layers + 1, "linear": 5 * layers + 1, "rotary_kv_append": layers,
           "flash_decode": layers, "add": 2 * layers, "mul": layers}
    if tp > 1:
        ops.update(all_reduce=2 * layers, all_gather=1)
    if padded:  # the gathered logits cut to the vocabulary
        ops["slice"] += 1
    return ops


def _check_steps(result: dict, layers: int, batch: int, vocab: int, tp: int = 1, jit_log=None,
                 padded: bool = False) -> list[dict]:
    steps = result["steps"]
    # our programs' kernels (rotary append: reader, compute, writer; FlashDecode: the same) were each
    # compiled by tt-metal's JIT for every RISC-V core they run on
    kinds = sorted(k["kind"] for k in result["kernels"])
    assert kinds == ["compute", "compute", "reader", "reader", "writer", "writer"], kinds
    if jit_log is not None:
        problems = check_jit(result["kernels"], jit_records(jit_log))
        assert not problems, "\n".join(problems)
    assert len(steps) == 20
    for s in steps:
        want = dict(_per_layer(layers, tp, padded), **({"argmax": 1} if s["greedy"] else {}))
        assert s["ops"] == want, (s["step"], s["ops"])
        # one write (token ids | positions | page table in one int32 row), one read (logits or ids)
        assert s["moves"] == ["copy_host_to_device_tensor", "to_torch"], (s["step"], s["moves"])
        assert s["writes"] == 1
        assert s["out_shape"] == ([batch] if s["greedy"] else [batch, vocab])
        # idle slots: zero logits, id -1 (set on the host)
        assert all(v == (-1 if s["greedy"] else 0.0) for v in s["idle_out"]), s
    entries = [s["entries"] for s in steps]
    # steps 1 and 2 have seen every program (logits and argmax); nothing is added after step 2
    assert all(e == entries[1] for e in entries[1:]), entries
    # the weights, caches, RoPE tables and the input row go to the device once, at build
    assert result["build_moves"] and set(result["build_moves"]) <= {"to_device", "from_torch"}
    return steps


@pytest.mark.slow
def test_small_llama_decodes_20_steps_on_a_mock_n150_with_one_write_and_one_read_per_step(run_mock, mock_run) -> None:
    r = run_mock(SMALL, timeout=600)
    assert r.returncode == 0 and r.result is not None, r.describe()
    _check_steps(r.result, layers=2, batch=4, vocab=256, jit_log=mock_run["jit_log"])
    assert r.result["layout"] == {"pools": [True] * 4, "append": "key_row", "flash": [True], "policy": "balanced"}
    gen = r.result["generate"]
    # 2 prompts of 32 tokens + 3 new: one device step for the prompts (its input row made on the device
    # once: one from_torch), 2 more; one write and one read a step
    assert gen["shape"] == [2, 35]
    assert gen["writes"] == 3 and gen["moves"] == 7
    # block_size 16, kv_pages "tile": the same per-step contract (every op accepted, one write and one read a
    # step, no program-cache entry after step 2), the pools and both programs in tile pages, FlashDecode planned
    # for 16-position blocks, page tables of 6 entries per user (5 blocks rounded up to whole key tiles)
    b16 = r.result["block16"]
    steps16 = _check_steps(b16, layers=2, batch=4, vocab=256, jit_log=mock_run["jit_log"])
    assert max(max(s["positions"]) for s in steps16) == 19  # slot 0 across the block at 16
    assert b16["layout"] == {"pools": [False] * 4, "append": "tile", "flash": [[16, False]], "policy": "first_free",
                             "table": 6}
    assert b16["generate"]["shape"] == [2, 35] and b16["generate"]["writes"] == 3
    # block_size 16 in the default bank-local pages: the same per-step contract, the pools, the append and
    # FlashDecode in key-row pages, blocks balanced in pairs (every user holds whole key tiles)
    k16 = r.result["block16_key_row"]
    _check_steps(k16, layers=2, batch=4, vocab=256, jit_log=mock_run["jit_log"])
    assert k16["layout"]["pools"] == [True] * 4 and k16["layout"]["append"] == "key_row", k16["layout"]
    assert k16["layout"]["flash"] == [[16, True]] and k16["layout"]["policy"] == "balanced", k16["layout"]
    assert k16["layout"]["table"] == 6 and k16["layout"]["shape"] == [4 * 6, 1, 16, 32], k16["layout"]
    assert all(h % 2 == 0 for h in k16["layout"]["held"]), k16["layout"]


@pytest.mark.slow
def test_llama31_8b_layer_decodes_20_steps_on_a_mock_n150_batch_32(run_mock, mock_run) -> None:
    r = run_mock(LLAMA31_8B_LAYER, timeout=600)
    assert r.returncode == 0 and r.result is not None, r.describe()
    _check_steps(r.result, layers=1, batch=32, vocab=1024, jit_log=mock_run["jit_log"])


@pytest.mark.slow
def test_tensor_parallel_llama_decodes_20_steps_on_a_mock_t3k_1x8(run_mock, mock_run) -> None:
    # a cold run builds the fabric and JIT-compiles the CCL programs: hence the long timeout
    r = run_mock(T3K_TP, timeout=900, system="t3k")
    assert r.returncode == 0 and r.result is not None, r.describe()
    _check_steps(r.result, layers=2, batch=4, vocab=250, tp=8, jit_log=mock_run["jit_log"], padded=True)
    # each chip: its q/k/v heads (1 + 1 + 1 of 32), 1/8 of the O rows, MLP columns and vocabulary (250
    # padded to 256)
    assert r.result["shapes"] == {"0.attention_norm": [1, 256], "0.wqkv": [256, 96], "0.wo": [32, 256],
                                  "0.ffn_norm": [1, 256], "0.w_gate": [256, 64], "0.w_up": [256, 64],
                                  "0.w_down": [64, 256], "lm_head": [256, 32]}
    assert set(r.result["build_moves"]) == {"from_torch"}
