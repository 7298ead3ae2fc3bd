"""The Llama decoder on a mock N150 (`LlamaDecoder(backend="device", device=...)`): a small random
Llama (2 layers) decodes 20 steps with users joining and leaving, every layer through ttnn's ops and
ours; every op is accepted, no program-cache entry is added after step 2, and each step moves one
host -> device write (the token ids, with their positions and page table in the same int32 row) and
one device -> host read (the logits, or the argmax ids) and nothing else. The mock computes nothing
(reads return zeros): the numerics are the host backends' (tests/models), not checked here."""

from __future__ import annotations

import pytest

CHILD = r"""
import time
import torch
import ttnn
from transformers import LlamaConfig, LlamaForCausalLM
from ttdecode.models import LlamaDecoder
from ttdecode.models.llama_device import TRANSFER_FUNCTIONS
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device

# every host <-> device move of ttnn, counted by kind (outermost call only: to_torch calls from_device)
moves = []
depth = [0]
def wrap(name, fn):
    def counted(*args, **kwargs):
        if name == "from_torch":
            on_device = kwargs.get("device") is not None or (len(args) > 3 and args[3] is not None)
        elif name == "to_torch":
            on_device = ttnn.is_tensor_storage_on_device(args[0])
        else:
            on_device = True
        if on_device and depth[0] == 0:
            moves.append(name)
        depth[0] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            depth[0] -= 1
    return counted
for name in TRANSFER_FUNCTIONS:
    setattr(ttnn, name, wrap(name, getattr(ttnn, name)))

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

B = 4
joins = {0: [0, 1], 3: [2], 8: [3], 11: [0], 14: [1]}   # slot (re)starts at position 0
leaves = {6: [1], 10: [0], 17: [2]}                     # slot goes idle (-1)
pos = [-1] * B
nxt = torch.zeros(B, dtype=torch.int64)
steps = []
for s in range(20):
    for b in leaves.get(s, []):
        pos[b] = -1
    for b in joins.get(s, []):
        pos[b] = 0
        nxt[b] = 1 + 7 * b + s
    greedy = s % 3 != 0           # logits on steps 0, 3, 6, ...; argmax on the device on the others
    t0 = time.perf_counter()
    positions = torch.tensor(pos, dtype=torch.int64)
    if greedy:
        out = dec.next_tokens(nxt, positions)
        ids = out
    else:
        out = dec.step(nxt, positions)
        ids = out.argmax(-1)
    seconds = time.perf_counter() - t0
    steps.append({"step": s, "positions": list(pos), "greedy": greedy, "seconds": round(seconds, 4),
                  "moves": list(moves), "writes": dec._device.writes, "ops": dict(dec._device.ops),
                  "entries": int(device.num_program_cache_entries()), "out_shape": list(out.shape),
                  "idle_out": [float(out[b].abs().sum()) if not greedy else int(out[b])
                               for b in range(B) if pos[b] < 0]})
    moves[:] = []
    nxt = torch.where(positions >= 0, ids, nxt).clamp(min=0)
    pos = [p + 1 if p >= 0 else -1 for p in pos]
dec.close()
ttnn.close_device(device)
emit({"build_seconds": round(build_s, 2), "build_moves": build_moves, "steps": steps,
      "cache_bytes": dec.cache_bytes})
"""

#: ttnn ops of one step of this 2-layer model (plus "argmax" on greedy steps).
EXPECTED_OPS = {"slice": 3, "typecast": 2, "relu": 1, "reshape": 9, "embedding": 3, "rms_norm": 5, "linear": 11,
                "rotary_kv_append": 2, "flash_decode": 2, "add": 4, "mul": 2}


@pytest.mark.slow
def test_llama_decoder_runs_20_steps_on_a_mock_n150_with_one_write_and_one_read_per_step(run_mock) -> None:
    r = run_mock(CHILD, timeout=600)
    assert r.returncode == 0 and r.result is not None, r.describe()
    steps = r.result["steps"]
    assert len(steps) == 20
    for s in steps:
        want = dict(EXPECTED_OPS, **({"argmax": 1} if s["greedy"] else {}))
        assert s["ops"] == want, (s["step"], s["ops"])
        # one write (token ids | positions | page table in one int32 row), one read (logits or ids)
        assert s["moves"] == ["copy_host_to_device_tensor", "to_torch"], (s["step"], s["moves"])
        assert s["writes"] == 1
        assert s["out_shape"] == ([4] if s["greedy"] else [4, 256])
        # idle slots: zero logits, id -1 (set on the host; the device's rows are not read as results)
        assert all(v == (-1 if s["greedy"] else 0.0) for v in s["idle_out"]), s
    entries = [s["entries"] for s in steps]
    # steps 1 and 2 see every program (logits and argmax); nothing is added after step 2
    assert all(e == entries[1] for e in entries[1:]), entries
    # the weights, caches, RoPE tables and the input row go to the device once, at build
    assert r.result["build_moves"] and set(r.result["build_moves"]) <= {"to_device", "from_torch"}
