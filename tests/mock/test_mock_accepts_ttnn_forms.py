"""What ttnn 0.81.1's own sdpa_decode accepts on a mock N150, and ttdecode's device path on the same
inputs, in one process: a bfloat8_b Q (one KV head: ttnn refuses a block-float Q with
GQA) and bfloat8_b / bfloat4_b masks run through ttnn.typecast + generic_op; any q_chunk_size; the grid is
the device's (8x8 on the fast-dispatch mock), a larger one refused naming it; a paged table padded with -1
beyond the users' reach passes and one within is refused by name; ttnn's block_size 16 runs on both sides. The mock
computes nothing: acceptance, shapes and the names in errors are checked, not values."""

from __future__ import annotations

ACCEPTS = r"""
import torch, ttnn, ttdecode
from ttdecode.config import SDPAProgramConfig
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
d = open_mock_device()
res = {}
g = d.compute_with_storage_grid_size()
res["grid"] = [g.x, g.y]
def dev(x, dt=ttnn.bfloat16):
    return ttnn.from_torch(x, dtype=dt, layout=ttnn.TILE_LAYOUT, device=d)
def ints(x):
    return ttnn.from_torch(torch.tensor(x, dtype=torch.int32), dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=d)
def pc(**kw):
    base = dict(compute_with_storage_grid_size=ttnn.CoreCoord(8, 8), q_chunk_size=0, k_chunk_size=0)
    base.update(kw)
    return ttnn.SDPAProgramConfig(**base)
def both(name, theirs, ours):
    for who, fn in (("ttnn", theirs), ("ours", ours)):
        try:
            out = fn()
            res[f"{name}/{who}"] = ["ok", list(out.shape)]
        except Exception as e:
            res[f"{name}/{who}"] = ["err", str(e).splitlines()[0][:400]]
B, S = 2, 256
sdpa, psdpa = ttnn.transformer.scaled_dot_product_attention_decode, ttnn.transformer.paged_scaled_dot_product_attention_decode
q8 = dev(torch.randn(1, B, 8, 64), ttnn.bfloat8_b)
k, v = dev(torch.randn(B, 1, S, 64)), dev(torch.randn(B, 1, S, 64))
both("q_bfp8", lambda: sdpa(q8, k, v, cur_pos=[10, 20], program_config=pc()),
     lambda: ttdecode.scaled_dot_product_attention_decode(q8, k, v, cur_pos=[10, 20], backend="device"))
q = dev(torch.randn(1, B, 8, 64))
for name, mdt in (("mask_bfp8", ttnn.bfloat8_b), ("mask_bfp4", ttnn.bfloat4_b)):
    m = dev(torch.zeros(B, 1, 8, S), mdt)
    both(name, lambda: sdpa(q, k, v, is_causal=False, attn_mask=m, program_config=pc(k_chunk_size=128)),
         lambda: ttdecode.scaled_dot_product_attention_decode(q, k, v, is_causal=False, attn_mask=m, backend="device",
                                                              program_config=pc(k_chunk_size=128)))
both("q_chunk_7", lambda: sdpa(q, k, v, cur_pos=[10, 20], program_config=pc(q_chunk_size=7)),
     lambda: ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos=[10, 20], backend="device",
                                                          program_config=pc(q_chunk_size=7)))
both("grid_8x9", lambda: sdpa(q, k, v, cur_pos=[10, 20], program_config=pc(compute_with_storage_grid_size=ttnn.CoreCoord(8, 9))),
     lambda: ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos=[10, 20], backend="device",
                                                          program_config=SDPAProgramConfig(compute_with_storage_grid_size=(8, 9))))
kp, vp = dev(torch.randn(8, 1, 32, 64)), dev(torch.randn(8, 1, 32, 64))
# the mock reads device tensors back as zeros: our side gets the values as torch tensors (checked on the host,
# uploaded by the step), the same check validate_values=True runs on values read back from a device
table_t = torch.tensor([[3, 1, -1, -1], [7, 6, 5, 4]], dtype=torch.int32)
table, pos = ints(table_t.tolist()), ints([40, 127])
both("paged_minus1_beyond", lambda: psdpa(q, kp, vp, page_table_tensor=table, cur_pos_tensor=pos, program_config=pc()),
     lambda: ttdecode.paged_scaled_dot_product_attention_decode(q, kp, vp, table_t, backend="device",
                                                                cur_pos_tensor=torch.tensor([40, 127], dtype=torch.int32)))
res["paged_minus1_within/ours"] = "ok"
try:
    ttdecode.paged_scaled_dot_product_attention_decode(q, kp, vp, table_t, backend="device",
                                                       cur_pos_tensor=torch.tensor([64, 127], dtype=torch.int32))
except ValueError as e:
    res["paged_minus1_within/ours"] = str(e)
k16, v16 = dev(torch.randn(8, 1, 16, 64)), dev(torch.randn(8, 1, 16, 64))
table16 = ints([[0, 1, 2, 3], [4, 5, 6, 7]])
both("paged_bs16", lambda: psdpa(q, k16, v16, page_table_tensor=table16, cur_pos_tensor=pos, program_config=pc()),
     lambda: ttdecode.paged_scaled_dot_product_attention_decode(q, k16, v16, table16, cur_pos_tensor=ints([40, 60]),
                                                                backend="device"))
emit(res)
ttnn.close_device(d)
"""


def test_ttnn_accepts_and_ttdecode_device_agrees_on_a_mock_n150(run_mock) -> None:
    r = run_mock(ACCEPTS, timeout=600)
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert res["grid"] == [8, 8]  # the mock N150's compute grid with fast dispatch
    for name in ("q_bfp8", "mask_bfp8", "mask_bfp4", "q_chunk_7", "paged_minus1_beyond"):
        assert res[f"{name}/ttnn"] == ["ok", [1, 2, 8, 64]], (name, res[f"{name}/ttnn"])
        assert res[f"{name}/ours"] == ["ok", [1, 2, 8, 64]], (name, res[f"{name}/ours"])
    # a grid beyond the device's: ttnn refuses it, so does ttdecode, naming the device's grid
    assert res["grid_8x9/ttnn"][0] == "err" and "num_cores_available <= num_cores_in_grid" in res["grid_8x9/ttnn"][1]
    assert res["grid_8x9/ours"][0] == "err"
    assert ("'program_config.compute_with_storage_grid_size': expected a grid within the device's compute grid 8x8"
            in res["grid_8x9/ours"][1]), res["grid_8x9/ours"]
    assert "argument 'page_table[0, 2]': expected a block id in 0..7 (user 0 at position 64 reads entries 0..2" \
        in res["paged_minus1_within/ours"], res["paged_minus1_within/ours"]
    # block_size 16 (a padded tile per block): ttnn runs it, and so does ttdecode (validation, plan, the
    # reader's half-tile build compiled through generic_op)
    assert res["paged_bs16/ttnn"] == ["ok", [1, 2, 8, 64]]
    assert res["paged_bs16/ours"] == ["ok", [1, 2, 8, 64]], res["paged_bs16/ours"]
