"""ttdecode.patch_ttnn: ttnn.transformer's two decode-attention ops and ttnn.experimental's two paged
cache ops routed to ttdecode and back.

The signatures are pinned against the installed ttnn's own (its nanobind signature strings), so a
keyword ttnn accepts that the patch neither passes through nor refuses by name fails here.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest
import torch

import ttdecode
from ttdecode import api
from ttdecode import patch as P

B, NH, NKV, D, BLOCK, MAX_BLOCKS = 2, 8, 2, 64, 32, 4
S = BLOCK * MAX_BLOCKS


@pytest.fixture
def tr(ttnn):
    """ttnn.transformer with ttnn's own ops in place before and after the test (the test's patches
    are all released, whatever it did)."""
    mod = ttnn.transformer
    targets = [(mod, n) for n in P.ROUTED] + [(ttnn.experimental, n) for n in P.ROUTED_CACHE]
    originals = {(m, n): getattr(m, n) for m, n in targets}
    assert all(type(op).__name__ == "FastOperation" for op in originals.values()), originals
    yield mod
    P.unpatch_ttnn()
    for (m, n), op in originals.items():
        if getattr(m, n) is not op:  # a test left a foreign replacement: put ttnn's op back, then fail
            setattr(m, n, op)
            pytest.fail(f"{m.__name__}.{n} was not restored")


def ttnn_parameters(op: Any) -> list[tuple[str, str, Any]]:
    """(name, kind, default) of ttnn's op from its nanobind signature; kind "positional" (before ``*``)
    or "keyword"; default ``inspect.Parameter.empty`` when required."""
    sig, _, defaults = type(op.function).__call__.__nb_signature__[0]
    inner = re.fullmatch(r"def __call__\((.*)\) -> .*", sig, re.S).group(1)
    parts, depth, cur = [], 0, ""
    for ch in inner:  # split at commas outside brackets
        depth += ch in "[(" 
        depth -= ch in "])"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    out, kind = [], "positional"
    for p in parts[1:]:  # parts[0] is self
        if p == "*":
            kind = "keyword"
            continue
        m = re.fullmatch(r"(\w+): .*?(?: = \\(\d+))?", p, re.S)
        default = defaults[int(m.group(2))] if m.group(2) else inspect.Parameter.empty
        out.append((m.group(1), kind, default))
    return out


def our_parameters(fn: Any) -> list[tuple[str, str, Any]]:
    kinds = {inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional", inspect.Parameter.KEYWORD_ONLY: "keyword"}
    return [(p.name, kinds[p.kind], p.default) for p in inspect.signature(fn).parameters.values()]


def ttnn_op(ttnn: Any, name: str) -> Any:
    """ttnn's own op of a routed name (not patched at the time)."""
    return getattr(ttnn.transformer if name in P.ROUTED else ttnn.experimental, name)


@pytest.mark.parametrize("name", P.ROUTED + P.ROUTED_CACHE)
def test_the_routed_signature_is_ttnns(tr, ttnn, name: str) -> None:
    """Same names, order, positional/keyword kinds and defaults as ttnn 0.81.1's op (ttnn's ``cur_pos=[]``
    and ``update_idxs=[]`` are our ``()``: both mean no list)."""
    theirs = ttnn_parameters(ttnn_op(ttnn, name))
    ours = our_parameters(getattr(P, name))
    assert [(n, k) for n, k, _ in ours] == [(n, k) for n, k, _ in theirs]
    for (n, _, mine), (_, _, want) in zip(ours, theirs):
        if isinstance(want, list):
            assert list(mine) == want, n
        else:
            assert mine == want or (mine is want), (n, mine, want)
    # the nanobind string names the refused keywords too (a ttnn upgrade renaming them fails here)
    assert set(P.REFUSED.get(name, {})) <= {n for n, _, _ in theirs}


# ttnn keyword -> (a value to send, what the public API must receive under the same name)
_SENT = {
    "is_causal": (False, False), "attn_mask": ("mask", "mask"), "cur_pos": ((3, 4), [3, 4]),
    "cur_pos_tensor": ("pos", "pos"), "attention_sink": ("sink", "sink"), "scale": (0.25, 0.25),
    "sliding_window_size": (64, 64), "memory_config": ("mc", "mc"), "program_config": ("pc", "pc"),
    "compute_kernel_config": ("cc", "cc"), "share_cache": (True, True),
}


@pytest.mark.parametrize("name", P.ROUTED)
def test_every_ttnn_keyword_is_passed_through_or_refused_by_name(tr, monkeypatch, name: str) -> None:
    seen: dict[str, Any] = {}

    def spy(q: Any, k: Any, v: Any, options: Any) -> str:
        seen.update(args=(q, k, v), options=options)
        return "ran"

    monkeypatch.setattr(api, "decode", spy)
    params = ttnn_parameters(getattr(tr, name))
    positional = [n for n, k, _ in params if k == "positional"]
    keywords = [n for n, k, _ in params if k == "keyword"]
    refused = P.REFUSED.get(name, {})
    assert set(keywords) <= set(_SENT) | set(refused), sorted(set(keywords) - set(_SENT) - set(refused))
    sent = {n: _SENT[n][0] for n in keywords if n not in refused}
    assert getattr(P, name)(*positional, **sent) == "ran"
    assert seen["args"] == tuple(positional[:3])  # q, k, v in ttnn's order
    options = seen["options"]
    if name.startswith("paged"):  # the page table, ttnn's fourth positional
        assert options.paged is True and options.page_table == positional[3]
    else:
        assert options.paged is False and options.page_table is None
    for n in sent:
        assert getattr(options, n) == _SENT[n][1], n
    assert options.backend == "auto"  # strings are not device tensors
    for n, default in refused.items():
        with pytest.raises(ValueError, match=rf"argument '{n}'.*does not implement {n}"):
            getattr(P, name)(*positional, **{n: 7})
        assert getattr(P, name)(*positional, **{n: default}) == "ran"  # ttnn's default is accepted


def test_ttnn_defaults_mean_no_positions_list_and_no_shared_cache(monkeypatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(api, "decode", lambda q, k, v, options: seen.update(options=options))
    P.scaled_dot_product_attention_decode("q", "k", "v", cur_pos=[])
    assert seen["options"].cur_pos is None and seen["options"].share_cache is False


def test_unknown_keyword_is_a_type_error_as_in_ttnn() -> None:
    with pytest.raises(TypeError, match="return_lse"):
        P.scaled_dot_product_attention_decode("q", "k", "v", return_lse=True)


def test_context_manager_patches_and_restores(tr) -> None:
    original = {n: getattr(tr, n) for n in P.ROUTED}
    assert not P.is_patched()
    with ttdecode.patch_ttnn() as h:
        assert h.active and P.is_patched()
        for n in P.ROUTED:
            assert getattr(tr, n) is getattr(P, n)
    assert not h.active and not P.is_patched()
    for n in P.ROUTED:
        assert getattr(tr, n) is original[n]


def test_an_exception_inside_the_block_restores_and_propagates(tr) -> None:
    original = tr.paged_scaled_dot_product_attention_decode
    with pytest.raises(KeyError, match="boom"):
        with ttdecode.patch_ttnn():
            assert tr.paged_scaled_dot_product_attention_decode is P.paged_scaled_dot_product_attention_decode
            raise KeyError("boom")
    assert tr.paged_scaled_dot_product_attention_decode is original and not P.is_patched()


def test_function_form_until_restore_or_unpatch(tr) -> None:
    original = tr.scaled_dot_product_attention_decode
    h = ttdecode.patch_ttnn()
    assert tr.scaled_dot_product_attention_decode is P.scaled_dot_product_attention_decode
    h.restore()
    assert tr.scaled_dot_product_attention_decode is original
    h.restore()  # a second restore does nothing
    assert tr.scaled_dot_product_attention_decode is original
    h1, h2 = ttdecode.patch_ttnn(), ttdecode.patch_ttnn()
    ttdecode.unpatch_ttnn()  # restores at once and closes every handle
    assert tr.scaled_dot_product_attention_decode is original and not h1.active and not h2.active
    h1.restore()
    ttdecode.unpatch_ttnn()  # nothing patched: nothing to do
    assert tr.scaled_dot_product_attention_decode is original


def test_nesting_and_double_patching_count_handles(tr) -> None:
    original = tr.scaled_dot_product_attention_decode
    with ttdecode.patch_ttnn():
        with ttdecode.patch_ttnn():
            assert tr.scaled_dot_product_attention_decode is P.scaled_dot_product_attention_decode
        # the inner exit leaves the outer patch in place (the originals are not the patch itself)
        assert tr.scaled_dot_product_attention_decode is P.scaled_dot_product_attention_decode
    assert tr.scaled_dot_product_attention_decode is original
    # handles released out of order: ttnn's op comes back with the last one
    h1, h2 = ttdecode.patch_ttnn(), ttdecode.patch_ttnn()
    h1.restore()
    assert tr.scaled_dot_product_attention_decode is P.scaled_dot_product_attention_decode
    h2.restore()
    assert tr.scaled_dot_product_attention_decode is original


def test_a_foreign_replacement_while_patched_is_not_overwritten(tr) -> None:
    original = tr.scaled_dot_product_attention_decode
    h = ttdecode.patch_ttnn()

    def other(*a: Any, **kw: Any) -> None:
        return None

    tr.scaled_dot_product_attention_decode = other
    with pytest.raises(RuntimeError, match="scaled_dot_product_attention_decode: the attribute was replaced"):
        h.restore()
    assert h.active and P.is_patched() and tr.scaled_dot_product_attention_decode is other  # nothing changed
    tr.scaled_dot_product_attention_decode = P.scaled_dot_product_attention_decode
    h.restore()
    assert tr.scaled_dot_product_attention_decode is original


def _host_inputs(ttnn: Any) -> dict[str, Any]:
    """Host ttnn tensors (no device): Q bf16 [1, B, NH, D], paged K/V bfloat8_b, positions, page table."""
    g = torch.Generator().manual_seed(7)
    blocks = B * MAX_BLOCKS
    table = torch.randperm(blocks, generator=g).reshape(B, MAX_BLOCKS).to(torch.int32)
    tile = dict(layout=ttnn.TILE_LAYOUT)
    return {
        "q": ttnn.from_torch(torch.randn(1, B, NH, D, generator=g), dtype=ttnn.bfloat16, **tile),
        "k": ttnn.from_torch(torch.randn(blocks, NKV, BLOCK, D, generator=g), dtype=ttnn.bfloat8_b, **tile),
        "v": ttnn.from_torch(torch.randn(blocks, NKV, BLOCK, D, generator=g), dtype=ttnn.bfloat8_b, **tile),
        "table": ttnn.from_torch(table, dtype=ttnn.int32),
        "pos": ttnn.from_torch(torch.tensor([S - 1, 40], dtype=torch.int32), dtype=ttnn.int32),
    }


def test_a_call_through_the_patched_name_runs_ttdecodes_host_runtime_bit_for_bit(tr, ttnn) -> None:
    x = _host_inputs(ttnn)
    pc = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), q_chunk_size=0, k_chunk_size=0)
    cc = ttnn.WormholeComputeKernelConfig(math_fidelity=ttnn.MathFidelity.HiFi2, math_approx_mode=False,
                                          fp32_dest_acc_en=False, packer_l1_acc=False)
    kw = dict(cur_pos_tensor=x["pos"], scale=D ** -0.5, program_config=pc, compute_kernel_config=cc)
    with ttdecode.patch_ttnn():
        got = tr.paged_scaled_dot_product_attention_decode(x["q"], x["k"], x["v"], page_table_tensor=x["table"], **kw)
        assert ttdecode.last_backend() == "host"  # host inputs, backend "auto", no device: the host runtime
    want = ttdecode.paged_scaled_dot_product_attention_decode(x["q"], x["k"], x["v"], x["table"], backend="host", **kw)
    assert got.dtype == torch.bfloat16 and list(got.shape) == [1, B, NH, D]
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    # and it is the kernels' answer, not an echo: the reference agrees within bfloat16 rounding
    ref = ttdecode.paged_scaled_dot_product_attention_decode(x["q"], x["k"], x["v"], x["table"], backend="reference", **kw)
    assert torch.allclose(got.float(), ref.float(), atol=3e-2, rtol=3e-2)
    # unpatched, the name is ttnn's op again (not called here: with host tensors ttnn 0.81.1's op crashed the
    # test process with a segfault when this was tried)
    assert type(tr.paged_scaled_dot_product_attention_decode).__name__ == "FastOperation"


def test_the_contiguous_op_through_the_patched_name_with_a_positions_list(tr, ttnn) -> None:
    g = torch.Generator().manual_seed(3)
    tile = dict(layout=ttnn.TILE_LAYOUT)
    q = ttnn.from_torch(torch.randn(1, B, NH, D, generator=g), dtype=ttnn.bfloat16, **tile)
    k = ttnn.from_torch(torch.randn(1, NKV, S, D, generator=g), dtype=ttnn.bfloat8_b, **tile)
    v = ttnn.from_torch(torch.randn(1, NKV, S, D, generator=g), dtype=ttnn.bfloat8_b, **tile)
    with ttdecode.patch_ttnn():
        got = tr.scaled_dot_product_attention_decode(q, k, v, cur_pos=[S - 1, 70], share_cache=True)
        assert ttdecode.last_backend() == "host"
    want = ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos=[S - 1, 70], share_cache=True, backend="host")
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    # share_cache reached the kernels: without it a [1, ...] cache for B = 2 users is refused
    with ttdecode.patch_ttnn(), pytest.raises(ValueError, match="argument 'k': expected batch .dim 0. B=2 like q"):
        tr.scaled_dot_product_attention_decode(q, k, v, cur_pos=[S - 1, 70])


# ---- ttnn.experimental's paged cache ops ---------------------------------------------------------


_CACHE_POSITIONAL = {"paged_update_cache": ("cache", "rows"), "paged_fill_cache": ("cache", "rows", "table")}


@pytest.mark.parametrize("name", P.ROUTED_CACHE)
def test_a_cache_op_on_a_tile_page_cache_is_ttnns_own_call(tr, ttnn, monkeypatch, name: str) -> None:
    """Not bank-local: ttnn's op gets the call unchanged (every keyword, its values as sent)."""
    seen: dict[str, Any] = {}
    params = ttnn_parameters(ttnn_op(ttnn, name))
    keywords = {n: f"value-{n}" for n, k, _ in params if k == "keyword"}
    if "update_idxs" in keywords:
        keywords["update_idxs"] = [3, 4]
    with ttdecode.patch_ttnn():
        saved = P._originals[name]
        P._originals[name] = lambda *a, **kw: seen.update(args=a, kw=kw) or "ttnn"
        try:
            assert getattr(ttnn.experimental, name)(*_CACHE_POSITIONAL[name], **keywords) == "ttnn"
        finally:
            P._originals[name] = saved
    assert seen["args"] == _CACHE_POSITIONAL[name] and seen["kw"] == keywords


@pytest.mark.parametrize("name", P.ROUTED_CACHE)
def test_a_cache_op_on_a_bank_local_pool_runs_ttdecodes_op_and_refuses_by_name(tr, ttnn, monkeypatch,
                                                                               name: str) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(P, "bank_local", lambda t: t == "cache")
    monkeypatch.setattr(P, "update_cache", lambda *a, **kw: seen.update(args=a, kw=kw) or "ours")
    monkeypatch.setattr(P, "fill_cache", lambda *a, **kw: seen.update(args=a, kw=kw) or "ours")
    fn = getattr(P, name)
    positional = _CACHE_POSITIONAL[name]
    if name == "paged_update_cache":
        assert fn(*positional, update_idxs_tensor="pos", page_table="table", share_cache=False,
                  compute_kernel_config="cc") == "ours"
        assert seen["args"] == positional
        assert seen["kw"] == dict(update_idxs=None, update_idxs_tensor="pos", page_table="table", kv_pages="key_row",
                                  grid=P.CACHE_GRID, backend="device")
        assert fn(*positional, update_idxs=[5, 6]) == "ours" and seen["kw"]["update_idxs"] == [5, 6]
    else:
        assert fn(*positional, batch_idx=2, compute_kernel_config="cc") == "ours"
        assert seen["args"] == positional
        assert seen["kw"] == dict(batch_idx=2, kv_pages="key_row", grid=P.CACHE_GRID, backend="device")
    refused = P.REFUSED[name]
    assert set(refused) <= {n for n, _, _ in ttnn_parameters(ttnn_op(ttnn, name))}
    for n in refused:
        with pytest.raises(ValueError, match=rf"argument '{n}'.*does not implement {n}"):
            fn(*positional, **{n: 7})


def test_the_attention_ops_read_a_bank_local_k_with_key_row_pages(tr, monkeypatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(api, "decode", lambda q, k, v, options: seen.append(options.program_config))
    monkeypatch.setattr(P, "bank_local", lambda t: t == "pool")
    P.paged_scaled_dot_product_attention_decode("q", "pool", "pool", "table")
    P.scaled_dot_product_attention_decode("q", "k", "v", program_config="pc")
    pc = ttdecode.SDPAProgramConfig(compute_with_storage_grid_size=(4, 4))
    P.scaled_dot_product_attention_decode("q", "pool", "pool", program_config=pc)
    assert seen[0] == ttdecode.SDPAProgramConfig(kv_pages="key_row")
    assert seen[1] == "pc"  # an interleaved K: the config as given
    assert seen[2] == ttdecode.SDPAProgramConfig(compute_with_storage_grid_size=(4, 4), kv_pages="key_row")
