"""PreparedProgram's per-core runtime args sent once (ttdecode/ttnn_backend/, class doc), through the real
ttnn 0.81.1 generic_op on a mock N150, in one subprocess: a paged FlashDecode step (every address a
common arg) runs its first call with the full descriptor and then the `lean` one (every per-core list
empty) without adding a program-cache entry; the full descriptor still runs after 50 lean runs (a
resized cached per-core list would corrupt memory there); a cleared program
cache makes the next call a full one again (the entry comes back, one entry after 10 more calls);
any other program built between two runs makes the next one full; a lean run forced onto a cache
miss raises DeviceError naming it; with the cache disabled every run is
a full one. The mock computes nothing: what is
pinned is ttnn's program cache and that the process survives."""

from __future__ import annotations

CODE = r"""
import torch
import ttnn
import ttdecode
from ttdecode.ttnn_backend import DeviceError
from ttdecode.ops.flash_decode.device_steps import STEPS
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device

d = open_mock_device()
B, NH, NKV, D, BS, MB = 4, 8, 1, 128, 64, 4
put = dict(device=d, memory_config=ttnn.DRAM_MEMORY_CONFIG)
tile, rm = ttnn.TILE_LAYOUT, ttnn.ROW_MAJOR_LAYOUT
q = ttnn.from_torch(torch.zeros(1, B, NH, D), dtype=ttnn.bfloat16, layout=tile, **put)
k = ttnn.from_torch(torch.zeros(B * MB, NKV, BS, D), dtype=ttnn.bfloat8_b, layout=tile, **put)
v = ttnn.from_torch(torch.zeros(B * MB, NKV, BS, D), dtype=ttnn.bfloat8_b, layout=tile, **put)
pos = ttnn.from_torch(torch.tensor([5, 70, 200, -1], dtype=torch.int32), dtype=ttnn.int32, layout=rm, **put)
table = ttnn.from_torch(torch.arange(B * MB, dtype=torch.int32).reshape(B, MB), dtype=ttnn.int32, layout=rm, **put)
call = lambda: ttdecode.paged_scaled_dot_product_attention_decode(q, k, v, page_table_tensor=table,
                                                                  cur_pos_tensor=pos, backend="device")
res = {}
call()
pp = STEPS.steps()[0].prepared
res["lean"] = pp.lean is not None
res["lean_per_core"] = [sum(len(kd.runtime_args[c.x][c.y]) for c in kern.runtime_args)
                        for kd, kern in zip(pp.lean.kernels, pp.program.kernels)]
res["full_per_core"] = [sum(len(kd.runtime_args[c.x][c.y]) for c in kern.runtime_args)
                        for kd, kern in zip(pp.descriptor.kernels, pp.program.kernels)]
res["entries_1"] = int(d.num_program_cache_entries())
res["primed_1"] = pp._entries_primed
for _ in range(50):
    call()
res["entries_51"] = int(d.num_program_cache_entries())
# another program built between two of ours: the next run is a full one, the one after lean again
used = []
_generic_op = ttnn.generic_op
ttnn.generic_op = lambda tensors, desc: (used.append("full" if desc is pp.descriptor else "lean"),
                                         _generic_op(tensors, desc))[1]
ttnn.plus_one(pos)  # a new program in the cache
call()
call()
ttnn.generic_op = _generic_op
res["after_new_program"] = used
vals = {"q": q, "k": k, "v": v, "cur_pos": pos, "page_table": table}
ins = [vals[s.name] for s in pp.inputs]
outs = pp.run_ordered(ins)
for _ in range(20):
    ttnn.generic_op(ins + outs, pp.descriptor)  # the full descriptor on the same cache entry
res["entries_full"] = int(d.num_program_cache_entries())
d.clear_program_cache()
res["entries_cleared"] = int(d.num_program_cache_entries())
call()
res["primed_after_clear"] = pp._entries_primed
for _ in range(10):
    call()
res["entries_end"] = int(d.num_program_cache_entries())
d.clear_program_cache()
pp._entries_primed = 0  # pretend a full run primed an empty cache: the next run is lean on a miss
try:
    call()
    res["miss_error"] = None
except DeviceError as e:
    res["miss_error"] = str(e)
res["primed_after_miss"] = pp._entries_primed
d.disable_and_clear_program_cache()  # a disabled cache: every run full (no entry to keep per-core args)
call()
call()
res["primed_disabled"] = pp._entries_primed
res["entries_disabled"] = int(d.num_program_cache_entries())
emit(res)
"""


def test_per_core_args_are_sent_once_and_a_cleared_cache_gets_them_again(run_mock) -> None:
    r = run_mock(CODE)
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert res["lean"] and res["lean_per_core"] == [0, 0, 0] and all(n > 0 for n in res["full_per_core"]), res
    assert res["entries_1"] == res["entries_51"] == res["primed_1"], res
    assert res["after_new_program"] == ["full", "lean"], res
    assert res["entries_full"] == res["entries_51"] + 1, res  # + plus_one's program
    assert res["entries_cleared"] == 0 and res["primed_after_clear"] == 1 and res["entries_end"] == 1, res
    assert res["miss_error"] is not None and "program-cache entry (0 -> 1)" in res["miss_error"], res
    assert res["primed_after_miss"] is None, res
    assert res["entries_disabled"] == 0 and res["primed_disabled"] is None, res
