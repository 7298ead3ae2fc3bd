"""Greedy generation over a decoder's steps (``LlamaDecoder.generate``): the prompts in multi-token
steps, then one token per user a step, with a progress bar on stderr. Each step reads the argmax ids
alone (``next_tokens``; on the device backend the argmax runs there), or the logits when they are
asked for (``return_logits``)."""

from __future__ import annotations

import sys
import time
from typing import Any, Optional, Protocol

import torch

from ttdecode.models.llama_spec import MAX_TOKENS, LlamaSpec, fail

__all__ = ["StepModel", "Progress", "PROGRESS_MIN_TOKENS", "check_prompts", "generate"]

#: ``generate(progress=None)`` shows a progress bar for prompts and generations longer than this (per user).
PROGRESS_MIN_TOKENS = 64


class StepModel(Protocol):
    """What generation needs of a decoder: its slots, cache sizes, spec and one decode step
    (``LlamaDecoder.step``: tokens int64 ``[batch]`` or ``[batch, T]``, positions int64 ``[batch]``,
    -1 idle -> float32 logits ``[batch, vocab]`` or ``[batch, T, vocab]``; ``LlamaDecoder.next_tokens``:
    the same step's argmax ids int64 ``[batch]`` or ``[batch, T]``, -1 idle)."""

    batch: int
    max_seq_len: int
    block_size: int
    spec: LlamaSpec

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor: ...

    def next_tokens(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor: ...


def check_prompts(input_ids: object) -> tuple[list[torch.Tensor], bool]:
    """``input_ids`` as one int64 tensor per user, and whether they came as a list (ragged)."""
    what = "an int64 tensor [B, P] or a list of B 1-D int sequences (prompts of different lengths)"
    if isinstance(input_ids, torch.Tensor):
        if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dim() != 2:
            raise fail("input_ids", "an int64 tensor [B, P]",
                        f"{type(input_ids).__name__} {input_ids.dtype} {list(input_ids.shape)}", TypeError)
        ids = input_ids.detach().to("cpu", torch.int64)
        return list(ids), False
    if not isinstance(input_ids, (list, tuple)):
        raise fail("input_ids", what, type(input_ids).__name__, TypeError)
    prompts = []
    for b, p in enumerate(input_ids):
        x = (p if isinstance(p, torch.Tensor) else None if not isinstance(p, (list, tuple))
             else torch.as_tensor(p) if len(p) else torch.zeros(0, dtype=torch.int64))
        if x is None or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool or x.dim() != 1:
            got = (f"{type(p).__name__} {x.dtype} {list(x.shape)}" if x is not None else type(p).__name__)
            raise fail(f"input_ids[{b}]", "a 1-D int tensor or list of token ids", got, TypeError)
        prompts.append(x.detach().to("cpu", torch.int64))
    return prompts, True


def _check_generate(model: StepModel, input_ids: object, max_new_tokens: object, prompt_chunk: object,
                    progress: object) -> tuple[list[torch.Tensor], bool]:
    """Every argument of `generate` checked, in this order; returns the prompts (int64, one per user)
    and whether they came as a list (ragged)."""
    prompts, ragged = check_prompts(input_ids)
    nb = len(prompts)
    if not 1 <= nb <= model.batch:
        raise fail("input_ids", f"1..{model.batch} sequences (batch={model.batch})", nb)
    lens = [len(p) for p in prompts]
    for b, n in enumerate(lens):
        if n < 1:
            raise fail(f"input_ids[{b}]" if ragged else "input_ids", "a prompt of at least 1 token", n)
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
        raise fail("max_new_tokens", "an int >= 0", repr(max_new_tokens))
    for b, n in enumerate(lens):
        if n + max_new_tokens > model.max_seq_len:
            which = f" of input_ids[{b}]" if ragged else ""
            raise fail("max_new_tokens", f"P + N <= max_seq_len={model.max_seq_len} (P={n}{which})",
                       max_new_tokens)
    for b, p in enumerate(prompts):
        bad = (p < 0) | (p >= model.spec.vocab_size)
        if bad.any():
            t = int(bad.nonzero()[0])
            raise fail(f"input_ids[{b}, {t}]", f"a token id in 0..{model.spec.vocab_size - 1}", int(p[t]))
    if not isinstance(prompt_chunk, int) or isinstance(prompt_chunk, bool) or not 1 <= prompt_chunk <= MAX_TOKENS:
        raise fail("prompt_chunk", f"an int in 1..{MAX_TOKENS}", repr(prompt_chunk))
    if progress is not None and not isinstance(progress, bool):
        raise fail("progress", "None (auto), True or False", repr(progress), TypeError)
    return prompts, ragged


def _feed_prompts(model: StepModel, prompts: list[torch.Tensor], chunk: int, n_new: int, bar: "Progress",
                  logits: bool) -> tuple[list[torch.Tensor], int]:
    """The prompts through steps of up to ``chunk`` tokens per user (slots 0..len(prompts)-1; a shorter
    chunk is padded with the user's last token, a user whose prompt is in idles). Returns per user
    what its last prompt token gave -- its logits ``[vocab]`` (``logits``) or its greedy next id (a
    0-d int64: `StepModel.next_tokens`, the ids alone are read) -- and the number of steps."""
    nb, lens = len(prompts), [len(p) for p in prompts]
    # a padded chunk stays below the end of the last cache block the user will hold anyway
    bs = model.block_size
    ends = [min(model.max_seq_len, -(-max(n + n_new - 1, n) // bs) * bs) for n in lens]
    fed = [0] * nb  # prompt tokens in the cache
    last: list[Optional[torch.Tensor]] = [None] * nb  # what each user's last prompt token gave
    steps = 0
    while True:
        left = [lens[b] - fed[b] for b in range(nb)]
        users = [b for b in range(nb) if left[b] > 0]
        if not users:
            break
        t = min(chunk, max(left[b] for b in users))
        for b in users:
            if left[b] < t:
                t = min(t, ends[b] - fed[b])  # >= left[b]
        tokens = torch.zeros(model.batch, t, dtype=torch.int64)
        positions = torch.full((model.batch,), -1, dtype=torch.int64)
        for b in users:
            n, p = min(t, left[b]), fed[b]
            tokens[b, :n] = prompts[b][p:p + n]
            tokens[b, n:] = prompts[b][p + n - 1]  # padding (rewound by the user's next step)
            positions[b] = p
        out = (model.step if logits else model.next_tokens)(tokens, positions)  # [batch, t(, vocab)]
        steps += 1
        for b in users:
            n = min(t, left[b])
            fed[b] += n
            if fed[b] == lens[b]:
                last[b] = out[b, n - 1]
        bar.update(sum(min(t, left[b]) for b in users))
    return [x for x in last if x is not None], steps


def _decode(model: StepModel, last: list[torch.Tensor], lens: list[int], n_new: int,
            eos_token_id: Optional[int], bar: "Progress",
            logits: bool) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
    """Up to ``n_new`` greedy tokens per user from what each user's last prompt token gave (``last``:
    logits, or ids without ``logits``): the new tokens ``[B', 1]`` a step, the logits ``[B', vocab]``
    each was chosen from (none without ``logits``: then every step reads the ids alone), and the
    decode steps."""
    nb = len(lens)
    out: list[torch.Tensor] = []
    done = torch.zeros(nb, dtype=torch.bool)
    tokens1 = torch.zeros(model.batch, dtype=torch.int64)
    positions1 = torch.full((model.batch,), -1, dtype=torch.int64)
    start = torch.tensor(lens, dtype=torch.int64)
    got = torch.stack(last)  # [nb, vocab] logits or [nb] ids
    chosen_from = []
    steps = 0
    for n in range(n_new):
        if logits:
            chosen_from.append(got)
        nxt = got.argmax(-1) if logits else got
        if eos_token_id is not None:
            nxt = torch.where(done, torch.tensor(eos_token_id), nxt)
            done |= nxt == eos_token_id
        out.append(nxt[:, None])
        bar.update(1)
        if bool(done.all()) or n == n_new - 1:
            break
        tokens1[:nb] = nxt
        positions1[:nb] = torch.where(done, -1, start + n)
        got = (model.step if logits else model.next_tokens)(tokens1, positions1)[:nb]
        steps += 1
    return out, chosen_from, steps


def generate(model: StepModel, input_ids: Any, max_new_tokens: int, eos_token_id: Optional[int] = None,
             return_logits: bool = False, *, prompt_chunk: int = MAX_TOKENS,
             progress: Optional[bool] = None) -> tuple[Any, tuple[int, int]]:
    """``LlamaDecoder.generate`` over ``model`` (see there). Returns (what ``generate`` returns, (prompt
    steps, decode steps))."""
    prompts, ragged = _check_generate(model, input_ids, max_new_tokens, prompt_chunk, progress)
    show = (lambda n: n > PROGRESS_MIN_TOKENS) if progress is None else (lambda n: progress)
    lens = [len(p) for p in prompts]
    bar = Progress(sum(lens), "prompt", show(max(lens)))
    try:
        last, prompt_steps = _feed_prompts(model, prompts, prompt_chunk, max_new_tokens, bar,
                                           return_logits)
    finally:
        bar.close()
    bar = Progress(max_new_tokens, "generate", show(max_new_tokens))
    try:
        out, chosen_from, decode_steps = _decode(model, last, lens, max_new_tokens, eos_token_id, bar,
                                                 return_logits)
    finally:
        bar.close()
    nb = len(prompts)
    new = torch.cat(out, dim=1) if out else torch.zeros(nb, 0, dtype=torch.int64)
    ids_out: Any = ([torch.cat([p, new[b]]) for b, p in enumerate(prompts)] if ragged
                    else torch.cat([torch.stack(prompts), new], dim=1))
    if return_logits:
        shape = (nb, 0, model.spec.vocab_size)
        return (ids_out, torch.stack(chosen_from, dim=1) if chosen_from else torch.zeros(shape)), \
            (prompt_steps, decode_steps)
    return ids_out, (prompt_steps, decode_steps)


class Progress:
    """A progress bar of ``total`` tokens on stderr: tqdm when installed, else a one-line counter;
    nothing when not ``enabled``."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.total, self.desc, self.n = total, desc, 0
        self._bar: Any = None
        self._plain = False
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            self._plain = True
            self._t0 = self._shown = time.perf_counter()
            self._draw()
            return
        self._bar = tqdm(total=total, desc=desc, unit="tok", file=sys.stderr, dynamic_ncols=True)

    def _draw(self) -> None:
        seconds = time.perf_counter() - self._t0
        rate = f", {self.n / seconds:.1f} tok/s" if seconds > 0 and self.n else ""
        sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total} tok [{seconds:.1f} s{rate}]")
        sys.stderr.flush()

    def update(self, n: int) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._plain and time.perf_counter() - self._shown >= 0.2:
            self._shown = time.perf_counter()
            self._draw()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._plain:
            self._draw()
            sys.stderr.write("\n")
        self._bar, self._plain = None, False
