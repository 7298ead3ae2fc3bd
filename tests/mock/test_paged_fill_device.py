"""paged_fill_cache as a device op on a mock N150 through the real ttnn.generic_op: a prompt's K written
into a bank-local pool (ttdecode.allocate_kv_pool, kv_pages "key_row") and into ttnn's interleaved tile
pool, for several users through a page table on the device. Pinned: the reader and writer JIT-compile and
ttnn accepts the program with the ND-sharded pool; one cached step serves every user (the user is a common
runtime arg patched per call: no program-cache entry after the first call, no host <-> device move with
device inputs, one upload for a torch page table); a pool of at most 12 key-tile rows (ttnn holds it as
legacy height sharding) runs too; a pool whose pages are not the kv_pages asked for is refused before launch. The mock computes nothing (the bytes: tests/test_paged_fill.py on the host runtime)."""

from __future__ import annotations

import pytest

from ttdecode.testing.dry_run import check_jit, jit_records

FILL = r"""
import torch
import ttnn
import ttdecode
from ttdecode.ops.paged_fill import device_step as fd
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.transfers import count_transfers
from ttdecode.ttnn_backend import DeviceError

PAGES = "{pages}"
B, NKV, D, BLOCK, S = 4, 8, 128, 64, 200
d = open_mock_device()
pool = ttdecode.allocate_kv_pool(16, NKV, BLOCK, D, dtype="bfloat8_b", kv_pages=PAGES, device=d)
x = ttnn.from_torch(torch.randn(1, NKV, S, D), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=d)
host_table = torch.arange(16, dtype=torch.int32).reshape(B, 4)
table = ttnn.from_torch(host_table, dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=d)
res = {{"moves": [], "entries": [], "bank_local": ttdecode.is_bank_local(pool), "users": []}}
_generic_op = ttnn.generic_op
def _record(tensors, desc):  # the user each launch's writer receives (its common arg 2)
    res["users"].append(int(desc.kernels[1].common_runtime_args[2]))
    return _generic_op(tensors, desc)
ttnn.generic_op = _record
with count_transfers() as log:
    for user in (0, 1, 3):
        log.clear()
        out = ttdecode.paged_fill_cache(pool, x, table, batch_idx=user, kv_pages=PAGES, backend="device")
        res["moves"].append(log.counts())
        res["entries"].append(int(d.num_program_cache_entries()))
        assert out is pool
    log.clear()
    ttdecode.paged_fill_cache(pool, x, host_table, batch_idx=2, kv_pages=PAGES, backend="device")
    res["host_table_moves"] = log.counts()
step = next(iter(fd._steps.values()))
res.update(steps=fd.cached_steps(), calls=step.calls,
           kernels=[{{"name": k.name, "source": str(k.source), "kind": k.kind.value}} for k in step.program.kernels])
other = ttdecode.to_tile_pages(pool) if PAGES == "key_row" else ttdecode.to_bank_local(pool)
try:
    ttdecode.paged_fill_cache(other, x, table, batch_idx=0, kv_pages=PAGES, backend="device")
    res["refused"] = None
except DeviceError as exc:
    res["refused"] = str(exc)
# a pool of at most 12 key-tile rows, which ttnn holds as legacy height sharding: accepted and run too
small = ttdecode.allocate_kv_pool(3, 1, 32, D, dtype="bfloat8_b", kv_pages=PAGES, device=d)
short = ttnn.from_torch(torch.randn(1, 1, 40, D), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=d)
res["small_layout"] = str(small.memory_config().memory_layout)
res["small_ran"] = ttdecode.paged_fill_cache(small, short, torch.tensor([[2, 0]]), batch_idx=0, kv_pages=PAGES,
                                             backend="device") is small
emit(res)
ttnn.close_device(d)
"""


@pytest.mark.parametrize("pages", ["key_row", "tile"], ids=["bank-local", "tile-pages"])
def test_paged_fill_on_the_mock_one_step_for_every_user(run_mock, tmp_path, pages: str) -> None:
    log = tmp_path / "jit.log"  # this test's own log and JIT cache: the kernels compiled here, by this run
    r = run_mock(FILL.format(pages=pages), timeout=300, jit_log=str(log), cache=tmp_path / "cache")
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert not check_jit(res["kernels"], jit_records(log)), check_jit(res["kernels"], jit_records(log))
    assert res["bank_local"] == (pages == "key_row")
    assert res["moves"] == [{}, {}, {}], res["moves"]
    assert len(set(res["entries"])) == 1, res["entries"]  # the first call's program serves the others
    assert res["host_table_moves"] == {"from_torch": 1}, res["host_table_moves"]
    assert res["steps"] == 1 and res["calls"] == 4, res
    assert res["users"][:4] == [0, 1, 3, 2], res["users"]  # then the small pool's launch
    assert res["small_ran"], res
    assert res["small_layout"] == ("TensorMemoryLayout.HEIGHT_SHARDED" if pages == "key_row"
                                   else "TensorMemoryLayout.INTERLEAVED"), res["small_layout"]
    want = "ND-sharded" if pages == "key_row" else "interleaved DRAM"
    assert res["refused"] is not None and want in res["refused"], res["refused"]
