"""One test per validation rule; each asserts the message names the argument, the expectation and
what came (``ttdecode: argument '<arg>': expected <...>, got <...>``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ttdecode.config import SDPAProgramConfig
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.ops.flash_decode.validate import DecodeInputs, describe, validate_decode

B, NH, NKV, S, D = 2, 8, 2, 64, 64


def tensors(b: int = B, nh: int = NH, nkv: int = NKV, s: int = S, d: int = D, dv: int = D) -> dict[str, Any]:
    return dict(q=torch.randn(1, b, nh, d), k=torch.randn(b, nkv, s, d), v=torch.randn(b, nkv, s, dv))


def run(**over: Any) -> DecodeInputs:
    args: dict[str, Any] = tensors()
    args["cur_pos"] = [S - 1, 3]
    args.update(over)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    return validate_decode(q, k, v, DecodeOptions(**args))


def paged(num_blocks: int = 6, block: int = 32, max_blocks: int = 2, **over: Any) -> DecodeInputs:
    args: dict[str, Any] = dict(
        q=torch.randn(1, B, NH, D), k=torch.randn(num_blocks, NKV, block, D), v=torch.randn(num_blocks, NKV, block, D),
        page_table=torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)[:, :max_blocks], paged=True, cur_pos=[5, 60],
    )
    args.update(over)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    return validate_decode(q, k, v, DecodeOptions(**args))


def test_valid_call_reports_shapes_formats_and_scale() -> None:
    r = run()
    assert (r.batch, r.num_heads, r.num_kv_heads, r.seq_len, r.head_dim, r.head_dim_v) == (B, NH, NKV, S, D, D)
    assert r.kv_dtype == "bfloat16" and r.q.storage_dtype == "bfloat16"
    assert r.positions == (S - 1, 3) and r.cur_pos == (S - 1, 3) and r.cur_pos_tensor is None
    assert r.scale == pytest.approx(D ** -0.5)
    assert r.program_config == SDPAProgramConfig()


def test_tensor_arguments_must_be_tensors() -> None:
    with pytest.raises(TypeError, match="argument 'k': expected a torch.Tensor, ttdecode TileTensor or ttnn.Tensor, got list"):
        run(k=[[1.0]])


def test_q_must_be_rank_4() -> None:
    with pytest.raises(ValueError, match=r"argument 'q': expected a 4-D tensor \[T, B, NH, D\], got shape \[2, 8, 64\]"):
        run(q=torch.randn(B, NH, D))


def test_q_first_dim_is_1_to_32_tokens_with_positions_of_the_last() -> None:
    r = run(q=torch.randn(4, B, NH, D))  # cur_pos [S - 1, 3]: the last of 4 tokens at 3 is valid
    assert r.num_tokens == 4
    for t in (0, 33):
        with pytest.raises(ValueError, match=rf"argument 'q': expected shape \[T, B>=1, NH>=1, D\] with 1 <= T <= 32 "
                                             rf"new tokens per user, got shape \[{t}, 2, 8, 64\]"):
            run(q=torch.randn(t, B, NH, D))
    with pytest.raises(ValueError, match=r"argument 'cur_pos\[1\]': expected -1 or the position of the last of T=5"):
        run(q=torch.randn(5, B, NH, D))


def test_head_dim_must_be_whole_tiles() -> None:
    with pytest.raises(ValueError, match=r"argument 'q': expected a head dim D .*multiple of 32, got shape \[1, 2, 8, 48\]"):
        run(**tensors(d=48, dv=48))


def test_q_format_torch_float16_is_refused() -> None:
    with pytest.raises(TypeError, match="argument 'q': expected a torch float32, float64 or bfloat16 tensor, got dtype torch.float16"):
        run(q=torch.randn(1, B, NH, D, dtype=torch.float16))


def test_kv_format_torch_integer_is_refused() -> None:
    with pytest.raises(TypeError, match="argument 'v': expected a torch float32, float64 or bfloat16 tensor, got dtype torch.int64"):
        run(v=torch.zeros(B, NKV, S, D, dtype=torch.int64))


def test_k_head_dim_must_match_q() -> None:
    with pytest.raises(ValueError, match=r"argument 'k': expected head dim \(last dim\) D=64 like q, got shape \[2, 2, 64, 32\]"):
        run(k=torch.randn(B, NKV, S, 32))


def test_num_heads_must_be_a_multiple_of_kv_heads() -> None:
    with pytest.raises(ValueError, match=r"argument 'k': expected a number of KV heads \(dim 1\) that divides NH=8, got shape \[2, 3, 64, 64\]"):
        run(**tensors(nkv=3))


def test_seq_len_must_be_whole_tiles() -> None:
    with pytest.raises(ValueError, match=r"argument 'k': expected a sequence length \(dim 2\) .*multiple of 32, got shape \[2, 2, 40, 64\]"):
        run(**tensors(s=40), cur_pos=[1, 2])


def test_kv_batch_must_match_q() -> None:
    with pytest.raises(ValueError, match=r"argument 'k': expected batch \(dim 0\) B=2 like q, got shape \[3, 2, 64, 64\]"):
        t = tensors(b=3)
        run(k=t["k"], v=t["v"])


def test_q_given_as_b_1_nh_d_names_q_s_shape_and_layout_not_only_k() -> None:
    """q [4, 1, 8, 64] reads as T=4 tokens of B=1 user: the message says k's batch 4 is against q's B=1
    (dim 1 of q [T, B, NH, D]), shows q's shape, and says how to pass 4 users of one token."""
    with pytest.raises(ValueError) as e:
        validate_decode(torch.randn(4, 1, NH, D), torch.randn(4, NKV, S, D), torch.randn(4, NKV, S, D),
                        DecodeOptions(cur_pos=[S - 1]))
    msg = str(e.value)
    assert "argument 'k': expected batch (dim 0) B=1 like q, got shape [4, 2, 64, 64]" in msg, msg
    assert "k's batch 4 against q's B=1, dim 1 of q [T, B, NH, D] = [4, 1, 8, 64] (4 new tokens per user)" in msg, msg
    assert "pass it as [1, 4, 8, 64] (q.transpose(0, 1))" in msg, msg
    with pytest.raises(ValueError) as e:  # a plain batch mismatch: both sides named, no transpose hint
        run(k=tensors(b=3)["k"], v=tensors(b=3)["v"])
    assert "k's batch 3 against q's B=2, dim 1 of q [T, B, NH, D] = [1, 2, 8, 64] (1 new token per user)" in str(e.value)
    assert "transpose" not in str(e.value)


def test_share_cache_needs_kv_batch_1() -> None:
    t = tensors(b=1)
    assert run(k=t["k"], v=t["v"], share_cache=True).share_cache is True
    with pytest.raises(ValueError, match=r"argument 'k': expected batch \(dim 0\) 1 \(share_cache.*got shape \[2, 2, 64, 64\]"):
        run(share_cache=True)


def test_share_cache_none_means_false_like_ttnn() -> None:
    assert run(share_cache=None).share_cache is False


def test_v_must_match_k_in_the_first_three_dims() -> None:
    with pytest.raises(ValueError, match=r"argument 'v': expected the first three dims of k \[2, 2, 64\], got shape \[2, 2, 32, 64\]"):
        run(v=torch.randn(B, NKV, 32, D))


def test_v_head_dim_must_be_whole_tiles() -> None:
    with pytest.raises(ValueError, match=r"argument 'v': expected a head dim Dv .*multiple of 32, got shape \[2, 2, 64, 40\]"):
        run(v=torch.randn(B, NKV, S, 40))


def test_kv_formats_must_agree() -> None:
    from ttdecode.core.formats import DataType
    from ttdecode.core.tensor import from_torch

    with pytest.raises(TypeError, match=r"argument 'v': expected the format of k \(bfloat16; one KV format per program\), got bfloat8_b"):
        run(v=from_torch(torch.randn(B, NKV, S, D), DataType.bfloat8_b))


def test_mla_needs_head_dim_v_up_to_d() -> None:
    assert run(v=None, head_dim_v=32).head_dim_v == 32
    assert run(v=None, head_dim_v=64).head_dim_v == 64  # V = K (ttnn: head_dim_v <= D)
    with pytest.raises(ValueError, match=r"argument 'head_dim_v': expected an integer when v is None .*got None"):
        run(v=None)
    with pytest.raises(ValueError, match=r"argument 'head_dim_v': expected a positive multiple of 32 up to D=64 when v is None \(MLA\), got 96"):
        run(v=None, head_dim_v=96)


def test_head_dim_v_with_v_must_match_it() -> None:
    assert run(head_dim_v=D).head_dim_v == D
    with pytest.raises(ValueError, match=r"argument 'head_dim_v': expected None or v's last dim 64, got 32"):
        run(head_dim_v=32)


def test_causal_needs_positions() -> None:
    with pytest.raises(ValueError, match=r"argument 'cur_pos': expected the B positions in causal mode \(or cur_pos_tensor\), got None"):
        run(cur_pos=None)
    with pytest.raises(ValueError, match="argument 'cur_pos': expected the B positions"):
        run(cur_pos=[])  # ttnn's default [] counts as not given


def test_causal_takes_only_one_position_source() -> None:
    with pytest.raises(ValueError, match=r"argument 'cur_pos_tensor': expected None when cur_pos is given \(exactly one of the two\)"):
        run(cur_pos_tensor=torch.tensor([1, 2], dtype=torch.int32))


def test_non_causal_takes_no_positions() -> None:
    assert run(is_causal=False, cur_pos=None).positions is None
    with pytest.raises(ValueError, match=r"argument 'cur_pos': expected None in non-causal mode .*got positions"):
        run(is_causal=False)


def test_cur_pos_length_must_be_batch() -> None:
    with pytest.raises(ValueError, match=r"argument 'cur_pos': expected one position per user \(length B=2\), got length 3"):
        run(cur_pos=[1, 2, 3])


@pytest.mark.parametrize("bad", [-2, S])
def test_cur_pos_values_must_be_minus_1_to_s_minus_1(bad: int) -> None:
    with pytest.raises(ValueError, match=rf"argument 'cur_pos\[1\]': expected a position in -1..63 \(S=64; -1 skips the user\), got {bad}"):
        run(cur_pos=[0, bad])
    assert run(cur_pos=[-1, 0]).positions == (-1, 0)


def test_cur_pos_entries_must_be_ints() -> None:
    with pytest.raises(TypeError, match=r"argument 'cur_pos\[0\]': expected an integer, got 1.5"):
        run(cur_pos=[1.5, 2])
    with pytest.raises(TypeError, match=r"argument 'cur_pos': expected a list of ints or a 1-D integer tensor, got dtype torch.float32"):
        run(cur_pos=torch.tensor([1.0, 2.0]))


def test_cur_pos_tensor_must_be_int32_of_shape_b() -> None:
    r = run(cur_pos=None, cur_pos_tensor=torch.tensor([7, -1], dtype=torch.int32))
    assert r.positions == (7, -1) and r.cur_pos is None and r.cur_pos_tensor is not None
    with pytest.raises(TypeError, match=r"argument 'cur_pos_tensor': expected an int32 torch or ttnn tensor, got torch tensor of dtype torch.int64"):
        run(cur_pos=None, cur_pos_tensor=torch.tensor([7, 1]))
    with pytest.raises(ValueError, match=r"argument 'cur_pos_tensor': expected shape \[B=2\], got shape \[1, 2\]"):
        run(cur_pos=None, cur_pos_tensor=torch.tensor([[7, 1]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"argument 'cur_pos_tensor\[0\]': expected a position in -1..63 .*got 64"):
        run(cur_pos=None, cur_pos_tensor=torch.tensor([64, 1], dtype=torch.int32))


def test_attn_mask_only_in_non_causal_mode() -> None:
    with pytest.raises(ValueError, match=r"argument 'attn_mask': expected None in causal mode .*got a tensor"):
        run(attn_mask=torch.zeros(B, 1, NH, S))


@pytest.mark.parametrize("mb", [1, B])
def test_attn_mask_shape_b_or_1_1_nh_s(mb: int) -> None:
    assert run(is_causal=False, cur_pos=None, attn_mask=torch.zeros(mb, 1, NH, S)).attn_mask is not None
    with pytest.raises(ValueError, match=r"argument 'attn_mask': expected shape \[B=2 or 1, 1, NH=8, S=64\], got shape \[2, 8, 64\]"):
        run(is_causal=False, cur_pos=None, attn_mask=torch.zeros(B, NH, S))


def test_attention_sink_shape_nh_or_nh_32() -> None:
    assert run(attention_sink=torch.zeros(NH)).attention_sink is not None
    assert run(attention_sink=torch.zeros(NH, 32)).attention_sink is not None
    with pytest.raises(ValueError, match=r"argument 'attention_sink': expected shape \[NH=8\] or \[NH=8, 32\], got shape \[8, 16\]"):
        run(attention_sink=torch.zeros(NH, 16))


def test_sliding_window_must_be_positive_and_causal() -> None:
    assert run(sliding_window_size=16).sliding_window_size == 16
    with pytest.raises(ValueError, match="argument 'sliding_window_size': expected a positive integer or None, got 0"):
        run(sliding_window_size=0)
    with pytest.raises(ValueError, match="argument 'sliding_window_size': expected None in non-causal mode .*got 16"):
        run(is_causal=False, cur_pos=None, sliding_window_size=16)


@pytest.mark.parametrize("bad", [0.0, -0.0, 0, float("inf"), float("-inf")])
def test_zero_and_infinite_scales_are_refused_by_name(bad: object) -> None:
    with pytest.raises(ValueError, match=f"argument 'scale': expected a finite non-zero number, got {bad}"):
        run(scale=bad)


@pytest.mark.parametrize("bad", [1e-50, -1e39])
def test_scales_outside_float32_are_refused_by_name(bad: float) -> None:
    with pytest.raises(ValueError, match="argument 'scale': expected a finite non-zero number in float32 range"):
        run(scale=bad)


def test_scale_must_be_a_finite_number() -> None:
    assert run(scale=0.5).scale == 0.5
    with pytest.raises(ValueError, match="argument 'scale': expected a finite non-zero number, got nan"):
        run(scale=float("nan"))
    with pytest.raises(TypeError, match="argument 'scale': expected a real number or None, got '1'"):
        run(scale="1")


def test_flags_must_be_bools() -> None:
    with pytest.raises(TypeError, match="argument 'is_causal': expected a bool, got 1"):
        run(is_causal=1)
    with pytest.raises(TypeError, match="argument 'return_lse': expected a bool, got None"):
        run(return_lse=None)


def test_fixed_k_chunk_size_must_divide_s() -> None:
    assert run(program_config=SDPAProgramConfig(k_chunk_size=64)).program_config.k_chunk_size == 64
    t = tensors(s=96)
    with pytest.raises(ValueError, match=r"argument 'program_config.k_chunk_size': expected a divisor of S=96 \(or 0 = dynamic\), got 64"):
        run(k=t["k"], v=t["v"], program_config=SDPAProgramConfig(k_chunk_size=64))


def test_program_and_compute_configs_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(TypeError, match="argument 'program_config': expected None, .*got 'dict'"):
        run(program_config={"k_chunk_size": 64})
    with pytest.raises(TypeError, match="argument 'compute_kernel_config': expected None, .*got 'str'"):
        run(compute_kernel_config="HiFi4")


def test_memory_config_must_be_a_ttnn_memory_config() -> None:
    with pytest.raises(TypeError, match="argument 'memory_config': expected None or a ttnn.MemoryConfig, got str"):
        run(memory_config="DRAM")


def test_paged_cache_gives_s_from_the_page_table() -> None:
    r = paged()
    assert (r.paged, r.block_size, r.seq_len) == (True, 32, 64)
    assert r.page_table_values.tolist() == [[0, 1], [2, 3]]


def test_paged_block_size_must_be_whole_tiles_or_16() -> None:
    with pytest.raises(ValueError, match=r"argument 'k': expected a paged cache .*block_size 16 or a positive multiple "
                                         r"of 32 \(a K/V tile holds 32 positions\), got shape \[6, 2, 48, 64\]"):
        paged(k=torch.randn(6, NKV, 48, D), v=torch.randn(6, NKV, 48, D))
    with pytest.raises(ValueError, match=r"block_size 16 or a positive multiple of 32 .*got shape \[6, 2, 8, 64\]"):
        paged(k=torch.randn(6, NKV, 8, D), v=torch.randn(6, NKV, 8, D))


def test_block_size_16_wants_an_even_table_in_either_page_layout() -> None:
    k16 = dict(k=torch.randn(6, NKV, 16, D), v=torch.randn(6, NKV, 16, D), cur_pos=[5, 31])
    r = paged(**k16)
    assert (r.block_size, r.seq_len) == (16, 32)
    with pytest.raises(ValueError, match=r"argument 'page_table': expected an even number of entries per user with "
                                         r"block_size 16 \(S = max_blocks x 16 a multiple of 32\), got 3 entries"):
        paged(**k16, page_table=torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32))
    assert paged(**k16, program_config=SDPAProgramConfig(kv_pages="key_row")).block_size == 16


def test_page_table_must_be_int32_b_by_blocks() -> None:
    with pytest.raises(TypeError, match="argument 'page_table': expected an int32 torch or ttnn tensor, got torch tensor of dtype torch.int64"):
        paged(page_table=torch.tensor([[0, 1], [2, 3]]))
    with pytest.raises(ValueError, match=r"argument 'page_table': expected shape \[B=2, max_blocks>=1\], got shape \[4\]"):
        paged(page_table=torch.tensor([0, 1, 2, 3], dtype=torch.int32))
    with pytest.raises(TypeError, match=r"argument 'page_table': expected an int32 tensor \[B=2, max_blocks\], got None"):
        paged(page_table=None)


def test_page_table_block_ids_must_be_in_range() -> None:
    with pytest.raises(ValueError, match=r"argument 'page_table\[1, 0\]': expected a block id in 0..5 \(user 1 at "
                                         r"position \d+ reads entries 0..\d; the entries beyond may hold anything\), got 6"):
        paged(page_table=torch.tensor([[0, 1], [6, 3]], dtype=torch.int32))


def test_share_cache_with_paged_cache_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"argument 'share_cache': expected False with a paged cache .*got True"):
        paged(share_cache=True)


def test_describe_reads_ttnn_and_tile_tensors(ttnn) -> None:
    from ttdecode.core.formats import DataType
    from ttdecode.core.tensor import from_torch

    t = describe("k", from_torch(torch.randn(2, 1, 40, 64), DataType.bfloat4_b))
    assert (t.kind, t.shape, t.dtype, t.storage_dtype) == ("tile", (2, 1, 40, 64), "bfloat4_b", "bfloat4_b")
    x = ttnn.from_torch(torch.randn(2, 1, 40, 64), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT)
    t = describe("k", x)
    assert (t.kind, t.shape, t.dtype) == ("ttnn", (2, 1, 40, 64), "bfloat8_b")
    assert describe("q", torch.randn(3, dtype=torch.bfloat16)).storage_dtype == "bfloat16"
    assert describe("q", torch.randn(3)).storage_dtype == "bfloat16"  # torch float32 is stored as bf16


def test_tile_q_may_be_block_float_but_not_float32() -> None:
    from ttdecode.core.formats import DataType
    from ttdecode.core.tensor import from_torch

    for dt in (DataType.bfloat8_b, DataType.bfloat4_b):  # ttnn's op takes them (converted exactly to bf16 here)
        assert run(q=from_torch(torch.randn(1, B, NH, D), dt)).q.dtype == dt.value
    with pytest.raises(TypeError, match="argument 'q': expected a tile tensor in bfloat16 / bfloat8_b / bfloat4_b, got dtype float32"):
        run(q=from_torch(torch.randn(1, B, NH, D), DataType.float32))


def test_memory_config_interleaved_or_height_sharded_l1_is_taken_and_the_rest_refused(ttnn) -> None:
    run(memory_config=ttnn.DRAM_MEMORY_CONFIG)  # what the writer produces
    run(memory_config=ttnn.L1_MEMORY_CONFIG)  # moved there by ttnn.to_memory_config on the device
    grid = ttnn.CoreRangeSet([ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(B - 1, 0))])
    sharded = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1,
                                ttnn.ShardSpec(grid, [32, D], ttnn.ShardOrientation.ROW_MAJOR))
    run(memory_config=sharded)  # tt_transformers' output placement: [32 padded heads, Dv] per user
    with pytest.raises(ValueError, match="argument 'memory_config': expected a height-sharded L1 ttnn.MemoryConfig "
                                         "with a shard_spec.*got one without a shard_spec"):
        run(memory_config=ttnn.L1_HEIGHT_SHARDED_MEMORY_CONFIG)
    with pytest.raises(ValueError, match="argument 'memory_config': expected an interleaved DRAM or L1 "
                                         ".*got buffer_type L1, memory_layout WIDTH_SHARDED"):
        run(memory_config=ttnn.L1_WIDTH_SHARDED_MEMORY_CONFIG)
    with pytest.raises(ValueError, match="argument 'memory_config': .*got buffer_type DRAM, memory_layout HEIGHT_SHARDED"):
        run(memory_config=ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.DRAM))


