"""Prompts at device speed on a mock N150: `LlamaDecoder.generate` on the device backend feeds each
prompt in chunks of up to 32 tokens per user, one device step a chunk (one rotary append of the chunk's
T B rows and one multi-token FlashDecode per layer), one write and one read a step; greedy decoding
reads the argmax ids alone (no read has a vocabulary dimension), ``return_logits=True`` reads the
logits. A second call adds no program-cache entry. The mock computes nothing (no numerics here: the
twin, tests/models/test_llama_device_twin.py, checks them)."""

from __future__ import annotations

PROMPTS = r"""
import torch
import ttnn
from transformers import LlamaConfig, LlamaForCausalLM
from ttdecode.models import LlamaDecoder
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.transfers import count_transfers

torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, max_position_embeddings=256, rope_theta=10000.0,
                  rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None, pad_token_id=None)
hf = LlamaForCausalLM(cfg).eval()
device = open_mock_device()
dec = LlamaDecoder.from_hf(hf, batch=4, max_seq_len=64, block_size=32, backend="device", device=device)
prompts = [list(range(1, 33)), [5, 6, 7]]  # 32 and 3 tokens: one step of 32 tokens per user (user 1's padded)
reads = []  # the shape of every device -> host read
to_torch = ttnn.to_torch


def read(t, *args, **kwargs):
    out = to_torch(t, *args, **kwargs)
    reads.append(list(out.shape))
    return out


ttnn.to_torch = read
steps = []
step = dec._device.step


def counted(tokens, positions, table, greedy=False):
    out = step(tokens, positions, table, greedy=greedy)
    steps.append({"t": 1 if tokens.dim() == 1 else tokens.shape[1], "ops": dict(dec._device.ops)})
    return out


dec._device.step = counted
runs = {}
for name, logits in (("first", False), ("greedy", False), ("logits", True)):
    entries = int(device.num_program_cache_entries())
    reads.clear()
    steps.clear()
    with count_transfers(ttnn) as log:
        dec.generate(prompts, 3, return_logits=logits, progress=False)
    runs[name] = {"reads": list(reads), "moves": log.counts(), "steps": list(steps),
                  "generate_steps": list(dec.generate_steps),
                  "new_entries": int(device.num_program_cache_entries()) - entries}
runs["chunk_append_pages"] = dec._device.chunk_rotary[32].program.tensor("k_cache").layout  # bank-local
dec.close()
emit(runs)
ttnn.close_device(device)
"""


def test_generate_feeds_prompts_in_32_token_steps_and_greedy_reads_ids_only(run_mock) -> None:
    r = run_mock(PROMPTS, timeout=600)
    assert r.returncode == 0 and r.result is not None, r.describe()
    runs = r.result
    assert runs.pop("chunk_append_pages") == "key_row"  # the T B rows' append writes the bank-local pools
    for name in ("first", "greedy", "logits"):
        run = runs[name]
        # 1 prompt step (32 tokens per user), 2 decode steps of one token
        assert run["generate_steps"] == [1, 2], (name, run)
        assert [s["t"] for s in run["steps"]] == [32, 1, 1], (name, run["steps"])
        for s in run["steps"]:  # per layer (2) one rotary append of the step's rows and one FlashDecode
            assert s["ops"]["rotary_kv_append"] == 2 and s["ops"]["flash_decode"] == 2, s
    # the first call makes the chunk's input row on the device (one from_torch) and compiles its programs
    assert runs["first"]["moves"] == {"from_torch": 1, "copy_host_to_device_tensor": 3, "to_torch": 3}
    assert runs["first"]["new_entries"] > 0
    for name in ("greedy", "logits"):
        assert runs[name]["moves"] == {"copy_host_to_device_tensor": 3, "to_torch": 3}, (name, runs[name])
        assert runs[name]["new_entries"] == 0, (name, runs[name])
    # greedy: every read is the ids [T B] of the step's rows; return_logits: the logits (vocab 256)
    assert runs["greedy"]["reads"] == [[1, 1, 128], [1, 1, 4], [1, 1, 4]], runs["greedy"]["reads"]
    assert all(shape[-1] == 256 for shape in runs["logits"]["reads"]), runs["logits"]["reads"]
    assert [s["ops"].get("argmax", 0) for s in runs["greedy"]["steps"]] == [1, 1, 1]
    assert [s["ops"].get("argmax", 0) for s in runs["logits"]["steps"]] == [0, 0, 0]
