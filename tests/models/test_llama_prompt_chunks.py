"""LlamaDecoder.generate feeds prompts in multi-token steps of up to 32 tokens per user:
step counts, Hugging Face's greedy tokens, prompts of different lengths in one batch, the
last prompt token's logits whether the prompt went in 1 or 32 tokens per step, the progress bar."""

from __future__ import annotations

import sys

import pytest
import torch

import ttdecode
from ttdecode.models import LlamaDecoder

from _llama_cases import hf_llama, rel_l2


def _count_steps(dec: LlamaDecoder) -> list[tuple[int, list[int]]]:
    """Wrap ``dec.step``: records (tokens per user T, positions) of every call."""
    calls: list[tuple[int, list[int]]] = []
    step = dec.step

    def counted(tokens, positions):
        calls.append((tokens.shape[1] if tokens.dim() == 2 else 1, positions.tolist()))
        return step(tokens, positions)

    dec.step = counted
    return calls


def _hf_greedy(hf, prompt: torch.Tensor, n: int) -> torch.Tensor:
    """Hugging Face's greedy generate of one prompt [P], checked to have a clear choice every step."""
    with torch.no_grad():
        ids = hf.generate(prompt[None], attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                          max_new_tokens=n, do_sample=False, pad_token_id=0)[0]
        top2 = hf(ids[None]).logits[0, len(prompt) - 1:-1].double().topk(2, dim=-1).values
    assert float((top2[:, 0] - top2[:, 1]).min()) > 1.0  # the comparison means something
    return ids


@pytest.fixture(scope="module")
def hf():
    return hf_llama(8, 2, 64, separated=True, seed=3)


@pytest.mark.slow
def test_a_100_token_prompt_goes_in_4_steps_and_greedy_tokens_equal_hf(hf, capsys):
    prompt = torch.randint(0, hf.config.vocab_size, (100,), generator=torch.Generator().manual_seed(5))
    expected = _hf_greedy(hf, prompt, 8)
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=128, kv_dtype=ttdecode.bfloat16, backend="host",
                               block_size=32)
    calls = _count_steps(dec)
    got, logits = dec.generate(prompt[None], max_new_tokens=8, return_logits=True, progress=False)
    assert got.shape == (1, 108) and torch.equal(got[0], expected)
    # ceil(100 / 32) = 4 prompt steps (slot 1 idle), then one token per step for the 7 tokens after the first
    assert calls[:4] == [(32, [0, -1]), (32, [32, -1]), (32, [64, -1]), (4, [96, -1])]
    assert calls[4:] == [(1, [100 + n, -1]) for n in range(7)]
    assert dec.generate_steps == (4, 7)
    with torch.no_grad():
        ref = hf(got).logits[0, 99:-1].double()
    assert max(rel_l2(logits[0, n], ref[n]) for n in range(8)) <= 5e-2
    assert capsys.readouterr().err == ""  # progress=False


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["host", "reference"])
def test_prompts_of_5_and_70_tokens_in_one_batch(hf, backend):
    g = torch.Generator().manual_seed(6)
    prompts = [torch.randint(0, hf.config.vocab_size, (n,), generator=g) for n in (5, 70)]
    expected = [_hf_greedy(hf, p, 6) for p in prompts]
    dec = LlamaDecoder.from_hf(hf, batch=3, max_seq_len=96, kv_dtype=ttdecode.bfloat8_b, backend=backend,
                               block_size=32)
    calls = _count_steps(dec)
    got, logits = dec.generate(prompts, max_new_tokens=6, return_logits=True)
    assert isinstance(got, list) and [len(x) for x in got] == [11, 76]
    for b in range(2):
        assert torch.equal(got[b], expected[b]), f"user {b}"
    # every user advances by up to 32 of its own tokens per step: user 0's 5 tokens (padded to 32)
    # go in the first step, then it idles while user 1's 70 go in 32 + 32 + 6; then both decode at
    # their own positions (the idle slot 2 untouched)
    assert calls[:3] == [(32, [0, 0, -1]), (32, [-1, 32, -1]), (6, [-1, 64, -1])]
    assert calls[3:] == [(1, [5 + n, 70 + n, -1]) for n in range(5)]
    assert dec.generate_steps == (3, 5)
    assert logits.shape == (2, 6, hf.config.vocab_size)
    with torch.no_grad():
        for b in range(2):
            ref = hf(got[b][None]).logits[0, len(prompts[b]) - 1:-1].double()
            assert max(rel_l2(logits[b, n], ref[n]) for n in range(6)) <= 5e-2


@pytest.mark.slow
def test_last_prompt_logits_equal_with_1_or_32_tokens_per_step(hf):
    prompt = torch.randint(0, hf.config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        ref = hf(prompt).logits[0, -1].double()
    got = {}
    for chunk in (1, 32):
        dec = LlamaDecoder.from_hf(hf, batch=1, max_seq_len=64, kv_dtype=ttdecode.bfloat8_b, backend="host",
                                   block_size=32)
        ids, logits = dec.generate(prompt, max_new_tokens=1, return_logits=True, prompt_chunk=chunk)
        got[chunk] = logits[0, 0]
        assert dec.generate_steps == ((40, 0) if chunk == 1 else (2, 0))
        assert int(ids[0, -1]) == int(ref.argmax())
        assert rel_l2(got[chunk], ref) <= 5e-2
    assert rel_l2(got[32], got[1]) <= 5e-2


@pytest.mark.slow
def test_context_parallel_generate_feeds_prompt_chunks():
    hf = hf_llama(8, 2, 64, separated=True, seed=3, layers=1)
    prompts = [torch.arange(5), torch.arange(40) % 7]
    expected = [_hf_greedy(hf, p, 3) for p in prompts]
    with LlamaDecoder.from_hf(hf, batch=2, max_seq_len=64, backend="reference", block_size=32, devices=2,
                              context_parallel=2) as dec:
        got = dec.generate(prompts, max_new_tokens=3, progress=False)
        assert dec.generate_steps == (2, 2)  # the 40-token prompt in chunks of 32 and 8
    for b in range(2):
        assert torch.equal(got[b], expected[b])


def _small(hf):
    return LlamaDecoder.from_hf(hf, batch=1, max_seq_len=128, backend="reference", block_size=32)


def test_progress_bar_on_long_prompts_only_and_can_be_disabled(hf, capsys):
    dec = _small(hf)
    long_prompt = torch.zeros(1, 70, dtype=torch.int64)
    dec.generate(torch.zeros(1, 8, dtype=torch.int64), max_new_tokens=2)
    assert capsys.readouterr().err == ""  # short: quiet
    dec.generate(long_prompt, max_new_tokens=2)
    err = capsys.readouterr().err
    assert "prompt" in err and "70/70" in err and "generate" not in err  # 2 new tokens: no bar
    dec.generate(long_prompt, max_new_tokens=2, progress=False)
    assert capsys.readouterr().err == ""
    dec.generate(torch.zeros(1, 3, dtype=torch.int64), max_new_tokens=2, progress=True)
    err = capsys.readouterr().err
    assert "prompt" in err and "generate" in err and "2/2" in err


def test_progress_without_tqdm_is_a_counter_on_stderr(hf, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm -> ImportError
    dec = _small(hf)
    dec.generate(torch.zeros(1, 3, dtype=torch.int64), max_new_tokens=66)
    err = capsys.readouterr().err
    assert "prompt" not in err and "\rgenerate: 66/66 tok" in err and err.endswith("\n")


@pytest.mark.parametrize("kwargs, exc, pattern", [
    (dict(input_ids=torch.zeros(1, 3, dtype=torch.int64), prompt_chunk=33), ValueError,
     r"prompt_chunk: expected an int in 1..32, got 33"),
    (dict(input_ids=torch.zeros(1, 3, dtype=torch.int64), prompt_chunk=0), ValueError,
     r"prompt_chunk: expected an int in 1..32, got 0"),
    (dict(input_ids=torch.zeros(1, 3, dtype=torch.int64), progress="yes"), TypeError,
     r"progress: expected None \(auto\), True or False, got 'yes'"),
    (dict(input_ids=[torch.zeros(2, 3, dtype=torch.int64)]), TypeError,
     r"input_ids\[0\]: expected a 1-D int tensor or list of token ids, got Tensor torch.int64 \[2, 3\]"),
    (dict(input_ids=[[1, 2], []]), ValueError, r"input_ids\[1\]: expected a prompt of at least 1 token, got 0"),
    (dict(input_ids=[[1, 2], [3, 512]]), ValueError, r"input_ids\[1, 1\]: expected a token id in 0..511, got 512"),
    (dict(input_ids=[[1], list(range(60))], max_new_tokens=5), ValueError,
     r"max_new_tokens: expected P \+ N <= max_seq_len=64 \(P=60 of input_ids\[1\]\), got 5"),
    (dict(input_ids="1 2 3"), TypeError, r"input_ids: expected an int64 tensor \[B, P\] or a list of B 1-D int"),
])
def test_bad_generate_arguments_are_refused_naming_the_argument(hf, kwargs, exc, pattern):
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=64, backend="reference", block_size=32)
    kwargs.setdefault("max_new_tokens", 1)
    with pytest.raises(exc, match=pattern):
        dec.generate(**kwargs)


def test_cli_reports_the_prompt_steps_and_no_progress_keeps_stderr_quiet(capsys):
    from ttdecode.__main__ import main

    args = ["llama", "--backend", "reference", "--batch", "1", "--prompt-len", "70", "--new-tokens", "2",
            "--kv-dtype", "bfloat16"]
    assert main(args + ["--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "for 4 steps of 1 users (3 prompt steps of up to 32 tokens, 1 decode steps)" in out
    assert err == ""
    assert main(args) == 0
    assert "prompt" in capsys.readouterr().err  # 70 tokens: the bar
