"""The device decoder's weights and tables, host-side (no device): every weight of
`llama_device_weights.device_weights` round-trips through its ttnn host tensor (bfloat16 exactly as rounded,
bfloat8_b within its shared-exponent precision; the embedding also through the row-major layout
``ttnn.embedding`` reads), the RoPE tables rotate the permuted rows as Hugging Face rotates the
original ones, and the step's input row holds ids, positions and page table in order."""

from __future__ import annotations

import pytest
import torch

from ttdecode.models import LlamaSpec
from ttdecode.models import llama_device as ld
from ttdecode.models import llama_device_weights as lw
from ttdecode.models import rope

from _llama_cases import hf_llama


def _bfp8_bound(w: torch.Tensor) -> torch.Tensor:
    """Per element, half a bfloat8_b step of its 16-value group (along the last dim) with margin: the
    group's largest magnitude times 2**-6 (7 mantissa bits under the shared exponent)."""
    groups = w.reshape(*w.shape[:-1], -1, 16).abs().amax(-1, keepdim=True)
    return (groups * 2.0**-6).expand(*w.shape[:-1], -1, 16).reshape(w.shape)


def test_every_device_weight_round_trips_through_its_ttnn_host_tensor(ttnn):
    hf = hf_llama(4, 2, 32, layers=2, hidden=128, intermediate=256, vocab=96)
    spec = LlamaSpec.from_config(hf.config)
    state = hf.state_dict()
    torch_w = lw.device_torch_weights(state, spec, 1)[0]
    tensors = lw.device_weights(state, spec, 1, ttnn)[0]
    plan = {p.name: p for p in lw.weight_plan(spec, 1)}
    assert set(tensors) == set(torch_w) == set(plan)
    for name, t in tensors.items():
        back = ttnn.to_torch(t).to(torch.float32).reshape(torch_w[name].shape)
        want = torch_w[name]
        if plan[name].dtype == "bfloat16":
            assert torch.equal(back, want.to(torch.bfloat16).to(torch.float32)), name
        else:
            assert plan[name].dtype == "bfloat8_b"
            err = (back - want).abs()
            assert bool((err <= _bfp8_bound(want)).all()), (name, float(err.max()))
    # the table ttnn.embedding reads: row-major bfloat16, the same values
    emb = ttnn.to_layout(tensors["embedding"], ttnn.ROW_MAJOR_LAYOUT)
    assert emb.layout == ttnn.ROW_MAJOR_LAYOUT
    assert torch.equal(ttnn.to_torch(emb).to(torch.float32),
                       state["model.embed_tokens.weight"].to(torch.bfloat16).to(torch.float32))
    # the fused QKV, un-permuted, is Hugging Face's q, k, v projections
    perm = lw.rope_permutation(32)
    inv = torch.argsort(perm)
    unperm = lambda w: w[:4 * 32].reshape(4, 32, -1)[:, inv].reshape(4 * 32, -1)  # noqa: E731
    q = unperm(ttnn.to_torch(tensors["0.wqkv"]).to(torch.float32).T)  # [(NH + 2 NKV) * D, hidden] -> q rows
    bound = unperm(_bfp8_bound(torch_w["0.wqkv"]).T)  # each value's group as stored ([hidden, out] rows)
    hf_q = state["model.layers.0.self_attn.q_proj.weight"]
    assert bool(((q - hf_q).abs() <= bound).all())


def test_rope_tables_rotate_the_permuted_rows_as_hugging_face_rotates_the_originals():
    hf = hf_llama(4, 2, 64, layers=1)
    spec = LlamaSpec.from_config(hf.config)  # llama3 rope scaling
    cos_t, sin_t = ld.rope_tables(spec, 100)
    assert cos_t.shape == sin_t.shape == (100, 64)
    perm = lw.rope_permutation(64)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 64, generator=g)
    positions = torch.tensor([0, 17, 99])
    cos, sin = rope.cos_sin(rope.inv_freq(64, spec.rope_theta, spec.rope_scaling), positions)
    want = rope.apply_rope(x, cos, sin)[..., perm]
    xp = x[..., perm]
    rot = torch.stack([-xp[..., 1::2], xp[..., 0::2]], dim=-1).reshape(xp.shape)  # pairs (2i, 2i+1)
    for table, name in ((cos_t, "cos"), (sin_t, "sin")):
        bf = table.to(torch.bfloat16).to(torch.float32)  # as stored on the device
        assert float((bf - table).abs().max()) <= 2.0**-8, name
    got = xp * cos_t[positions][:, None] + rot * sin_t[positions][:, None]
    assert torch.allclose(got, want, atol=1e-5)


def test_step_row_holds_ids_positions_and_page_table_in_order():
    table = torch.tensor([[3, 0], [1, 2], [0, 0]], dtype=torch.int32)
    row = ld.step_row(torch.tensor([5, 6, 0]), [4, 40, -1], table)
    assert row.dtype == torch.int32
    assert row.tolist() == [5, 6, 0, 4, 40, -1, 3, 0, 1, 2, 0, 0]


def test_step_row_of_t_tokens_is_token_major_with_the_table_per_row():
    table = torch.tensor([[3, 0], [1, 2]], dtype=torch.int32)
    row = ld.step_row(torch.tensor([[5, 6], [7, 8]]), [30, -1], table)
    # ids token-major, the append's positions per row, FlashDecode's last positions, the table per row
    assert row.tolist() == [5, 7, 6, 8] + [30, -1, 31, -1] + [31, -1] + [3, 0, 1, 2] * 2


@pytest.mark.parametrize("batch, grid, cores", [(1, (8, 8), (1, 1)), (4, (8, 8), (4, 1)), (32, (8, 8), (8, 4)),
                                                (64, (8, 8), (8, 8)), (96, (8, 8), (8, 6)), (13, (8, 8), (1, 1)),
                                                (26, (8, 7), (2, 1))])
def test_chunk_grid_gives_every_user_one_core(batch, grid, cores):
    # n = x * y divides B, so row j * B + b lands on core (j * B + b) mod n = b mod n for every token j
    assert ld.chunk_grid(batch, grid) == cores
    n = cores[0] * cores[1]
    assert batch % n == 0 and cores[0] <= grid[0] and cores[1] <= grid[1]
