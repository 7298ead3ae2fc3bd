"""rotary_kv_append and the combine as per-step device ops on a mock N150, through the real
ttnn.generic_op: 20 steps each with every input a device tensor (the new rows, the caches -- a paged one
also as the bank-local pool, kv_pages "key_row" --, int32 cur_pos and page table, the cos/sin in the
kernels' per-column form; the combine's partials and LSEs) and positions advanced on the device. Pinned:
no host <-> device move after the first step (`ttdecode.testing.transfers`; the rotary's first step uploads its constant rotate-half blocks), no
program-cache entry added after step 2, one cached step (one plan, one Program, one descriptor)
serving all 20 calls, and the runtime-argument counts of that cached program the same after step 20
as when it was built; the rotary's calls after the first launch PreparedProgram's lean descriptor (its
buffer addresses are common runtime args). The mock computes nothing (numerics: tests/test_rotary_kv_append.py,
tests/test_combine_kernel.py on the host runtime)."""

from __future__ import annotations

import pytest

ROTARY = r"""
import torch
import ttnn
import ttdecode
from ttdecode.ops.rotary_append import device_step as rd
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.transfers import count_transfers

PAGED = {paged}
PAGES = "{pages}"  # "key_row" with PAGED: the bank-local pool (ttdecode.to_bank_local)
B, NH, NKV, D, S, BLOCK = 4, 8, 2, 128, 256, 64
d = open_mock_device()
tile, rm = ttnn.TILE_LAYOUT, ttnn.ROW_MAJOR_LAYOUT
put = lambda t, dt, lay: ttnn.from_torch(t, dtype=dt, layout=lay, device=d)
qkv = put(torch.randn(1, B, (NH + 2 * NKV) * D), ttnn.bfloat16, tile)
rows = B * S // BLOCK if PAGED else B
kc = put(torch.zeros(rows, NKV, BLOCK if PAGED else S, D), ttnn.bfloat8_b, tile)
vc = put(torch.zeros(rows, NKV, BLOCK if PAGED else S, D), ttnn.bfloat8_b, tile)
if PAGES == "key_row":
    kc, vc = ttdecode.to_bank_local(kc), ttdecode.to_bank_local(vc)
    res_bank_local = [ttdecode.is_bank_local(kc), ttdecode.is_bank_local(vc)]
table = put(torch.arange(rows, dtype=torch.int32).reshape(B, S // BLOCK), ttnn.int32, rm) if PAGED else None
pos = put(torch.tensor([0, 7, 40, -1], dtype=torch.int32), ttnn.int32, rm)
one = put(torch.ones(B, dtype=torch.int32), ttnn.int32, rm)
freq = 1.0 / 10000 ** (torch.arange(0, D, 2) / D)
ang = torch.arange(B)[:, None] * freq[None]
cos, sin = rd.angles_to_device(torch.cat([ang.cos()] * 2, 1), torch.cat([ang.sin()] * 2, 1), device=d,
                               rotary_interleaved=True)
res = {{"moves": [], "entries": {{}}, "shapes": [], "bank_local": res_bank_local if PAGES == "key_row" else None}}
launched = []  # the descriptor of each generic_op call
_generic_op = ttnn.generic_op
def _record(tensors, desc):
    launched.append(desc)
    return _generic_op(tensors, desc)
ttnn.generic_op = _record
with count_transfers() as log:
    for step in range(1, 21):
        log.clear()
        q_rot, k2, v2 = ttdecode.rotary_kv_append(qkv=qkv, k_cache=kc, v_cache=vc, cur_pos=pos, cos=cos, sin=sin,
                                                  page_table=table, num_q_heads=NH, rotary_interleaved=True,
                                                  kv_pages=PAGES, backend="device")
        res["moves"].append(log.counts())
        res["shapes"].append(list(q_rot.shape))
        assert k2 is kc and v2 is vc
        ttnn.deallocate(q_rot)
        log.counting = False
        new_pos = ttnn.add(pos, one)  # the positions advance on the device
        ttnn.deallocate(pos)
        pos = new_pos
        log.counting = True
        if step in (2, 20):
            res["entries"][step] = int(d.num_program_cache_entries())
step = next(iter(rd._steps.values()))
res.update(steps=rd.cached_steps(), calls=step.calls, want_calls=20,
           counts_same=step.prepared.runtime_arg_counts() == step.prepared.arg_counts)
# every address a common arg: PreparedProgram has a lean descriptor (no per-core list) and runs it
res["lean"] = [None if step.prepared.lean is None else desc is step.prepared.lean for desc in launched]
# host inputs (torch HF cos/sin, a torch page table): one upload each; positions as a list: runtime args
hf = torch.cat([ang.cos()] * 2, 1), torch.cat([ang.sin()] * 2, 1)
torch_table = torch.arange(rows, dtype=torch.int32).reshape(B, S // BLOCK) if PAGED else None
with count_transfers() as log:
    q_rot, _, _ = ttdecode.rotary_kv_append(qkv=qkv, k_cache=kc, v_cache=vc, cur_pos=[1, 2, 3, -1], cos=hf[0],
                                            sin=hf[1], page_table=torch_table, num_q_heads=NH,
                                            rotary_interleaved=True, kv_pages=PAGES, backend="device")
    res["host_input_moves"] = log.counts()
    ttnn.deallocate(q_rot)
res["steps_after_host_inputs"] = rd.cached_steps()  # host positions: a step of its own (runtime args)
emit(res)
ttnn.close_device(d)
"""

COMBINE = r"""
import torch
import ttnn
from ttdecode.ops.combine import device_step as cd
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.transfers import count_transfers

n, B, NH, DV = 4, 8, 32, 128
d = open_mock_device()
outs = ttnn.from_torch(torch.randn(n, B, NH, DV), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=d)
lses = ttnn.from_torch(torch.randn(n, B, NH, 1), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=d)
res = {"moves": [], "entries": {}, "shapes": []}
with count_transfers() as log:
    for step in range(1, 21):
        log.clear()
        out, lse = cd.combine_on_device(outs, lses)
        res["moves"].append(log.counts())
        res["shapes"].append([list(out.shape), list(lse.shape), str(out.dtype), str(lse.dtype)])
        ttnn.deallocate(out)
        ttnn.deallocate(lse)
        if step in (2, 20):
            res["entries"][step] = int(d.num_program_cache_entries())
step = next(iter(cd._steps.values()))
res.update(steps=cd.cached_combine_steps(), calls=step.calls, want_calls=20,
           counts_same=step.prepared.runtime_arg_counts() == step.prepared.arg_counts)
emit(res)
ttnn.close_device(d)
"""


def _check_common(res: dict) -> None:
    assert all(m == {} for m in res["moves"][1:]), f"host<->device moves in steps 2..20: {res['moves']}"
    assert res["entries"]["2"] == res["entries"]["20"], f"program-cache entries after step 2 / 20: {res['entries']}"
    assert res["steps"] == 1 and res["calls"] == res["want_calls"], res  # one plan / Program / descriptor
    assert res["counts_same"], "the cached program's runtime-argument counts changed"


@pytest.mark.parametrize("paged,pages", [(False, "tile"), (True, "tile"), (True, "key_row")],
                         ids=["contiguous", "paged", "paged-bank-local"])
def test_rotary_kv_append_20_device_steps_move_nothing_after_the_first(run_mock, paged: bool, pages: str) -> None:
    r = run_mock(ROTARY.format(paged=paged, pages=pages), timeout=300)
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    _check_common(res)
    assert res["bank_local"] in (None, [True, True]), res["bank_local"]
    # step 1: the step's rotate-half blocks, its one constant input, uploaded once
    assert res["moves"][0] == {"from_torch": 1}, res["moves"][0]
    assert res["shapes"] == [[1, 4, 8, 128]] * 20
    # a 21st call with host inputs uploads cos, sin (and the table); its positions are the writer's
    # runtime args (no upload), a step of its own, which uploads its rotate-half blocks once
    assert res["host_input_moves"] == {"from_torch": 4 if paged else 3}, res["host_input_moves"]
    # no per-core runtime arg is an address (all are common args), so PreparedProgram holds the per-core
    # lists back once the program is cached: step 1 runs the full descriptor, step 2 too (the ttnn.add
    # advancing the positions built a program in between: the cache count moved), every later call lean
    assert res["lean"] == [False, False] + [True] * 18, res["lean"]
    assert res["steps_after_host_inputs"] == 2


def test_combine_20_device_steps_move_nothing(run_mock) -> None:
    r = run_mock(COMBINE, timeout=300)
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    _check_common(res)
    assert res["moves"][0] == {}, res["moves"][0]
    assert res["shapes"] == [[[1, 8, 32, 128], [1, 8, 32, 1], "DataType.BFLOAT16", "DataType.FLOAT32"]] * 20


def test_the_transfer_counter_counts_moves_only_outermost_and_restores_ttnn() -> None:
    """count_transfers on a stand-in ttnn module (no subprocess): moves by name, conversions on the
    host and nested calls not counted, `counting` False ignored, the originals back after the block."""
    import types

    from ttdecode.testing.transfers import count_transfers

    class Layout:
        pass

    class Tensor:
        def __init__(self, on_device: bool) -> None:
            self.on_device = on_device

        def cpu(self) -> "Tensor":
            return Tensor(False)

        def to(self, target: object) -> "Tensor":
            return Tensor(not isinstance(target, Layout))

    fake = types.SimpleNamespace(Tensor=Tensor, Layout=Layout, is_tensor_storage_on_device=lambda t: t.on_device)
    fake.from_device = lambda t: Tensor(False)
    fake.to_torch = lambda t: fake.from_device(t) if t.on_device else t  # a nested move: counted once
    fake.from_torch = lambda x, dtype=None, *, device=None: Tensor(device is not None)
    fake.to_device = lambda t, device: Tensor(True)
    fake.copy_host_to_device_tensor = lambda src, dst: None
    originals = (fake.from_torch, fake.to_torch, Tensor.cpu, Tensor.to)
    with count_transfers(fake) as log:
        host = fake.from_torch(1)                 # host conversion: not a move
        dev = fake.from_torch(1, device="d")      # move
        fake.to_torch(dev)                        # move (its from_device inside: not counted again)
        fake.to_torch(host)                       # host tensor: not a move
        dev.cpu()                                 # move
        host.to(Layout())                         # layout conversion: not a move
        host.to("d")                              # move
        fake.copy_host_to_device_tensor(host, dev)  # move
        log.counting = False
        fake.to_device(host, "d")                 # ignored
        assert log.moves == ["from_torch", "to_torch", "Tensor.cpu", "Tensor.to", "copy_host_to_device_tensor"]
        assert log.counts()["to_torch"] == 1 and len(log) == 5
    assert (fake.from_torch, fake.to_torch, Tensor.cpu, Tensor.to) == originals
