"""Llama decode over this package's FlashDecode op, tensor parallel over ``devices`` workers.

``LlamaDecoder.from_hf(model, batch=B, max_seq_len=S, ...)`` takes a Hugging Face
``LlamaForCausalLM`` and builds the decode model; ``step(tokens [B], positions [B]) -> logits
[B, vocab]`` runs one decode step for every user slot (position -1: an idle slot, untouched);
``generate(input_ids [B', P], max_new_tokens)`` is greedy decoding that feeds the prompts through
multi-token decode steps of up to 32 tokens per user (prompts of different lengths as a list);
``step(tokens [B, T], positions [B]) -> logits [B, T, vocab]`` runs T <= 32 new tokens per user
at positions ``positions[b] .. positions[b] + T - 1`` in one multi-token decode step (the
verification of T speculative draft tokens: token t's logits predict token t + 1; one read of the
cache serves all T, causal among them); a rejected draft is dropped by rewinding: the next step
starts at the first position to redo. Per layer: RMSNorm -> Q/K/V projections -> RoPE at each user's
position and the cache update (one row per user into its block) in one program,
``ttdecode.rotary_kv_append`` (see ``kv_cache.append_rows``; on the host backends one call per token
index with T > 1, since the op refuses two rows of one cache tile in a call; on the device backend one
call of the T B rows, see ``llama_device.chunk_grid``) -> FlashDecode (one call for the T tokens) through
``ttdecode.paged_scaled_dot_product_attention_decode`` on the chosen backend -> O projection ->
residual -> RMSNorm -> SwiGLU MLP -> residual; then the final norm and the LM head. The paged K/V
pools are bank-local by default (``kv_pages``, see `LlamaDecoder`).

Backends: ``"host"`` (the attention is the Metalium kernels on the host runtime), ``"reference"``
(the op's float64 reference), both with projections, norms and MLP in float32 torch;
``"device"``: every layer through ttnn's ops and ours on one Wormhole (``device=`` an open ttnn
device, else device 0 is opened) or tensor parallel over a mesh of ``devices`` chips (``device=`` the
open mesh, 1 x N or R x C; the split above, ``ttnn.all_reduce`` after O and down, ``ttnn.all_gather`` of
the vocabulary slices; with ``context_parallel``: over the whole mesh, or along one axis of a 2-D
mesh with tensor parallelism along the other, `llama_device.DeviceDecoder`), the paged KV caches on the device(s) for the decoder's lifetime, one
host->device write (token ids, positions, page table) and one read (logits, or the on-device
argmax with `next_tokens`) per step (``ttdecode.models.llama_device.DeviceDecoder``); checked on
the mock Wormhole and, for numbers, on a torch twin of its ttnn calls; not on a chip. ``"auto"`` is ``"device"`` when a device is given or
available, else ``"host"``.

The parts: the model's shape from its Hugging Face config (``ttdecode.models.llama_spec``), the split
over devices (``ttdecode.models.tensor_parallel``, whose doc describes the tensor and context
parallel layouts), one device's float32 torch layers and the worker functions
(``ttdecode.models.llama_host``), greedy generation and its progress bar (``ttdecode.models.generation``),
the device backend (``ttdecode.models.llama_device``).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Optional

import torch

from ttdecode.core.formats import DataType, as_data_type
from ttdecode.models import generation
from ttdecode.config import KV_PAGES
from ttdecode.core.program_description import WORMHOLE_DRAM_BANKS
from ttdecode.kv_pool import HALF_TILE_BLOCK, page_table_blocks, pages_program_config, tile_rows_per_block
from ttdecode.models.kv_cache import KV_DTYPES, BlockAllocator, ContextParallelAllocator, check_positions, policy_for
from ttdecode.models.llama_host import LlamaShard, StepInputs, worker_build, worker_step
from ttdecode.models.llama_spec import MAX_TOKENS, LlamaSpec, fail
from ttdecode.models.tensor_parallel import shard_weights
from ttdecode.distributed import WorkerPool
from ttdecode.core import formats
from ttdecode.ttnn_backend.tensors import dram_banks
from ttdecode.ttnn_env import require_ttnn

__all__ = ["LlamaDecoder", "BACKENDS"]

log = logging.getLogger("ttdecode")

#: Decoder backends (the op's, see ``ttdecode.api``).
BACKENDS = ("auto", "host", "reference", "device")


def _resolve_backend(backend: object, device: Any = None) -> str:
    """``backend`` checked, ``"auto"`` resolved: ``"device"`` when ``device`` is given or one is
    available, else ``"host"``."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise fail("backend", f"one of {list(BACKENDS)}", repr(backend))
    if device is not None and backend not in ("auto", "device"):
        raise fail("device", f"None with backend={backend!r} (a ttnn device is for backend 'device')", "a device")
    from ttdecode.ttnn_env import has_tenstorrent_device

    if backend == "auto":
        return "device" if device is not None or has_tenstorrent_device() else "host"
    if backend == "device" and device is None and not has_tenstorrent_device():
        raise RuntimeError(
            "backend: 'device' needs a Tenstorrent Wormhole (ttnn.open_device), and none is available here; "
            "pass device= an open ttnn device (ttdecode.testing.mock.open_mock_device() for a dry run on the "
            "mock Wormhole); backend='host' runs the kernels on the host runtime"
        )
    return backend


def _check_options(spec: LlamaSpec, batch: int, max_seq_len: int, devices: int, block_size: int,
                   context_parallel: int, kv_dtype: Any, kv_pages: Any) -> DataType:
    """The decoder's sizes and kv_pages checked against each other and the model (see `LlamaDecoder`);
    returns the KV cache's data type."""
    if not isinstance(kv_pages, str) or kv_pages not in KV_PAGES:
        raise fail("kv_pages", f"one of {list(KV_PAGES)}", repr(kv_pages))
    for name, value in (("batch", batch), ("max_seq_len", max_seq_len), ("devices", devices),
                        ("block_size", block_size), ("context_parallel", context_parallel)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise fail(name, "an int >= 1", repr(value))
    if block_size % 32 and block_size != HALF_TILE_BLOCK:
        raise fail("block_size", f"a multiple of 32 or {HALF_TILE_BLOCK} (the op's paged cache; {HALF_TILE_BLOCK}: "
                   "ttnn's padded tile per block)", block_size)
    kv = as_data_type(kv_dtype, "kv_dtype")
    if kv not in KV_DTYPES:
        raise fail("kv_dtype", f"one of {[d.value for d in KV_DTYPES]}", kv.value)
    if spec.head_dim % 32:
        raise fail("model", "head_dim a multiple of 32 (tiles)", spec.head_dim, NotImplementedError)
    if devices % context_parallel:
        raise fail("context_parallel", f"a divisor of devices={devices} (C-way context parallelism inside "
                    "N devices, tensor parallel N/C ways)", context_parallel)
    tp = devices // context_parallel
    what = "" if context_parallel == 1 else f"devices / context_parallel = {tp}, "
    if spec.num_kv_heads % tp:
        raise fail("devices", f"{what}a divisor of the model's {spec.num_kv_heads} KV heads (each device owns "
                    "whole KV head groups)", devices)
    if spec.intermediate_size % tp:
        raise fail("devices", f"{what}a divisor of the MLP intermediate size {spec.intermediate_size}", devices)
    if math.ceil(max_seq_len / block_size) < context_parallel:
        raise fail("context_parallel", f"at most the {math.ceil(max_seq_len / block_size)} cache blocks per user "
                    f"(max_seq_len {max_seq_len} / block_size {block_size})", context_parallel)
    return kv


class LlamaDecoder:
    """Batched greedy Llama decoding with a paged KV cache; see the module doc.

    Build with `from_hf` or `from_pretrained`. ``close()`` stops the device workers (devices > 1).

    ``kv_pages``: the paged K/V pools' DRAM pages (``ttdecode.kv_pool``), told to the append and to
    FlashDecode on every backend. "key_row" (the default): the bank-local pool, a key-tile row a page
    dealt round robin over the DRAM banks (the device's count on backend "device", a Wormhole's 12 on
    the host runtime), its blocks handed out by the "balanced" policy (`kv_cache.policy_for`) so each
    user's rows spread evenly over the banks. "tile": ttnn's interleaved tile pages, blocks
    "first_free" (the pages tt-transformers and ttnn's paged ops use). Refused by name: another value,
    and with "key_row" a ``program_config`` grid of fewer cores than the banks
    (`kv_pool.pages_program_config`; "tile" takes any grid). A ``program_config``'s own kv_pages is
    replaced by this option. The host images are the same bytes either way; the outputs differ only
    in FlashDecode's split (a bank-local piece reads the tiles of its banks, which the page table
    decides), within the accuracy thresholds.

    ``block_size``: positions per cache block, a multiple of 32, or 16 (ttnn's padded tile per block: a
    16-position block takes a whole tile row of DRAM, in "key_row" a page of its own; the page tables then
    have an even number of entries per user, `kv_pool.page_table_blocks`, and the "balanced" policy hands
    out blocks in pairs, so the default ``num_blocks`` is ``batch`` times that even count).
    """

    def __init__(self, spec: LlamaSpec, state: dict[str, torch.Tensor], *, batch: int, max_seq_len: int,
                 kv_dtype: Any = DataType.bfloat8_b, devices: int = 1, backend: str = "auto",
                 block_size: int = 64, num_blocks: Optional[int] = None, program_config: Any = None,
                 timeout: float = 600.0, context_parallel: int = 1, device: Any = None,
                 kv_pages: str = "key_row") -> None:
        kv = _check_options(spec, batch, max_seq_len, devices, block_size, context_parallel, kv_dtype, kv_pages)
        tp = devices // context_parallel
        self.spec = spec
        self._embed = state["model.embed_tokens.weight"].detach()  # [vocab, hidden], its own dtype
        self.batch, self.max_seq_len, self.devices = batch, max_seq_len, devices
        self.context_parallel = context_parallel
        self.kv_dtype, self.block_size = kv, block_size
        self.backend = _resolve_backend(backend, device)
        max_blocks = math.ceil(max_seq_len / block_size)
        local_blocks = math.ceil(max_blocks / context_parallel)  # blocks per user on one CP rank (at most)
        if num_blocks is None:  # a balanced pool of 16-position blocks hands out pairs (BlockAllocator.pairs)
            held = page_table_blocks(local_blocks, block_size) if policy_for(kv_pages) == "balanced" else local_blocks
            num_blocks = batch * held
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 1:
            raise fail("num_blocks", "an int >= 1", repr(num_blocks))
        self.num_blocks = num_blocks  # blocks in each device's pool
        self._own_device: Any = None  # a device the decoder opened (closed by close())
        if self.backend == "device":
            device = self._open_device(device)
        banks = WORMHOLE_DRAM_BANKS if self.backend != "device" else dram_banks(device)
        program_config = pages_program_config(program_config, kv_pages, banks)
        self.kv_pages = kv_pages
        alloc = dict(policy=policy_for(kv_pages), num_kv_heads=spec.num_kv_heads // tp, dram_banks=banks)
        self.allocator: Any
        if context_parallel == 1:
            self.allocator = BlockAllocator(batch, max_seq_len, block_size, num_blocks, **alloc)
        else:
            self.allocator = ContextParallelAllocator(batch, max_seq_len, block_size, num_blocks, context_parallel,
                                                      **alloc)
        options = dict(num_blocks=num_blocks, block_size=block_size, kv_dtype=kv, backend=self.backend,
                       program_config=program_config, kv_pages=kv_pages)
        self._pool = None
        self._shard: Optional[LlamaShard] = None
        self._device: Any = None  # llama_device.DeviceDecoder (backend 'device')
        if self.backend == "device":
            per_device = [self._build_device(spec, state, device, num_blocks, program_config)] * devices
        elif devices == 1:
            self._shard = LlamaShard(spec, shard_weights(state, spec, 0, 1), rank=0, world=1, **options)
            per_device = [self._shard.cache_bytes]
        else:
            self._pool = WorkerPool(devices, label="device", timeout=timeout)
            options["context_parallel"] = context_parallel
            shards = [(spec, shard_weights(state, spec, r % tp, tp), options) for r in range(devices)]
            per_device = self._pool.run(worker_build, shards)
        #: bytes of the K and V pools of one device (every device holds the same) and over all devices
        self.cache_bytes_per_device = max(per_device)
        self.cache_bytes = sum(per_device)
        cp_note = (f", pools of {local_blocks} per user on each of the {context_parallel} context-parallel ranks"
                   if context_parallel > 1 else "")
        log.info(
            "ttdecode llama: KV cache %.2f MiB per device = %d layers x K,V x %d blocks x %d KV heads x %d positions "
            "x head_dim %d in %s (%.2f MiB over %d device(s); batch %d, max_seq_len %d -> %d blocks per user%s); "
            "kv_pages %s; backend %s",
            self.cache_bytes_per_device / 2**20, spec.num_layers, num_blocks, spec.num_kv_heads // tp, block_size,
            spec.head_dim, kv.value, self.cache_bytes / 2**20, devices, batch, max_seq_len, max_blocks, cp_note,
            kv_pages, self.backend,
        )

    # ---- construction ----------------------------------------------------------------------

    @classmethod
    def from_hf(cls, model: Any, **options: Any) -> "LlamaDecoder":
        """From a ``transformers`` ``LlamaForCausalLM`` (weights as they are; see the class doc)."""
        try:
            from transformers import LlamaForCausalLM
        except ImportError as e:  # pragma: no cover - transformers is in the test extra
            raise ImportError("from_hf needs the 'transformers' package (pip install 'ttdecode[llama]')") from e
        if not isinstance(model, LlamaForCausalLM):
            raise fail("model", "a transformers LlamaForCausalLM", type(model).__name__, TypeError)
        spec = LlamaSpec.from_config(model.config)
        return cls(spec, model.state_dict(), **options)

    @classmethod
    def from_pretrained(cls, path: Any, **options: Any) -> "LlamaDecoder":
        """From a local Hugging Face checkpoint directory (config.json + safetensors); no network."""
        import json
        from pathlib import Path

        root = Path(path)
        cfg_file = root / "config.json"
        if not cfg_file.is_file():
            raise fail("path", "a checkpoint directory with config.json", str(root), FileNotFoundError)
        model_type = json.loads(cfg_file.read_text()).get("model_type")
        if model_type != "llama":
            raise fail("path", "a Llama checkpoint (config.json model_type 'llama')", repr(model_type), TypeError)
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM.from_pretrained(str(root), local_files_only=True)
        return cls.from_hf(model, **options)

    def _open_device(self, device: Any) -> Any:
        """The device of backend 'device', checked against ``devices`` (device 0 opened when None and one
        chip is asked for); ``context_parallel`` against its mesh's axes: `sharding.mesh_axes`, by the
        device decoder."""
        cp = self.context_parallel
        if device is None:
            if self.devices != 1:
                n = self.devices
                shape = f"1 x {n}" if cp == 1 else f"{n // cp} x {cp}" if cp < n else f"1 x {n} or a 2-D"
                raise fail("device", f"an open {shape} ttnn mesh (ttnn.open_mesh_device) for devices="
                            f"{self.devices} with backend 'device'", "None", TypeError)

            device = self._own_device = require_ttnn().open_device(device_id=0)
        n = int(device.get_num_devices()) if hasattr(device, "get_num_devices") else 1
        if n != self.devices:
            how = "tensor" if cp == 1 else "context" if cp == self.devices else "tensor x context"
            raise fail("devices", f"the device's {n} chip(s) ({how} parallel over the mesh)", self.devices)
        return device

    def _build_device(self, spec: LlamaSpec, state: dict[str, torch.Tensor], device: Any, num_blocks: int,
                      program_config: Any) -> int:
        """The decoder on a Wormhole (`ttdecode.models.llama_device.DeviceDecoder`); returns its cache bytes."""
        from ttdecode.models.llama_device import DeviceDecoder

        cp = self.context_parallel
        self._device = DeviceDecoder(spec, state, device=device, batch=self.batch, max_seq_len=self.max_seq_len,
                                     block_size=self.block_size, num_blocks=num_blocks, kv_dtype=self.kv_dtype,
                                     program_config=program_config, context_parallel=cp, kv_pages=self.kv_pages)
        tp = self.devices // cp
        tiles = num_blocks * (spec.num_kv_heads // tp) * tile_rows_per_block(self.block_size) * (spec.head_dim // 32)
        return 2 * spec.num_layers * tiles * formats.tile_size(self.kv_dtype)

    def close(self) -> None:
        """Stop the device workers (devices > 1); free the device tensors (backend 'device') and close a
        device the decoder opened itself. Idempotent."""
        if self._pool is not None:
            self._pool.close()
        if self._device is not None:
            self._device.close()
            self._device = None
        if self._own_device is not None:
            require_ttnn().close_device(self._own_device)
            self._own_device = None

    def __enter__(self) -> "LlamaDecoder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- decoding --------------------------------------------------------------------------

    def _check_step(self, tokens: object, positions: object) -> tuple[torch.Tensor, tuple[int, ...]]:
        """tokens int ``[B]`` or ``[B, T]`` (returned as ``[B, T]``), positions int ``[B]``."""
        def ints(name: str, x: object, shape: str) -> torch.Tensor:
            if not isinstance(x, torch.Tensor) or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
                raise fail(name, f"an int64 tensor {shape}",
                            f"{type(x).__name__}" + (f" {x.dtype}" if isinstance(x, torch.Tensor) else ""), TypeError)
            return x.detach().to("cpu", torch.int64)

        tok = ints("tokens", tokens, f"[{self.batch}] or [{self.batch}, T]")
        pos = ints("positions", positions, f"[{self.batch}]")
        if tok.dim() not in (1, 2) or tok.shape[0] != self.batch or (tok.dim() == 2 and not 1 <= tok.shape[1] <= MAX_TOKENS):
            raise fail("tokens", f"shape [{self.batch}] or [{self.batch}, T] with 1 <= T <= {MAX_TOKENS} (one "
                        f"entry per user slot, batch={self.batch})", list(tok.shape))
        if pos.dim() != 1 or pos.shape[0] != self.batch:
            raise fail("positions", f"shape [{self.batch}] (one entry per user slot, batch={self.batch})",
                        list(pos.shape))
        tok = tok.reshape(self.batch, -1)
        t = tok.shape[1]
        for b in range(self.batch):
            p = int(pos[b])
            if p < -1:
                raise fail(f"positions[{b}]", "-1 (idle) or a position >= 0", p)
            if p + t - 1 >= self.max_seq_len:
                what = "a position" if t == 1 else f"a first position (of {t} tokens) with position + {t - 1}"
                raise fail(f"positions[{b}]", f"{what} < max_seq_len={self.max_seq_len}", p)
            if p >= 0:
                bad = (tok[b] < 0) | (tok[b] >= self.spec.vocab_size)
                if bool(bad.any()):
                    j = int(bad.nonzero()[0])
                    name = f"tokens[{b}]" if t == 1 and tokens.dim() == 1 else f"tokens[{b}, {j}]"
                    raise fail(name, f"a token id in 0..{self.spec.vocab_size - 1}", int(tok[b, j]))
        return tok, tuple(int(p) for p in pos)

    def next_tokens(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """A greedy decode step (``tokens``, ``positions`` as in `step`: ``[batch]`` or ``[batch, T]``):
        the argmax of each row's logits, int64 ``[batch]`` or ``[batch, T]`` (-1 for idle slots). On
        the device backend the argmax runs on the device and only the ids are read back."""
        return self._step(tokens, positions, greedy=True)

    def _device_step(self, tok: torch.Tensor, pos: tuple[int, ...], table: Any, greedy: bool) -> torch.Tensor:
        """Tokens ``[B, T]`` at positions ``pos`` in one device step (T B rows, token-major): logits
        ``[B, T, vocab]`` (idle rows zero) or, greedy, the argmax ids ``[B, T]`` (-1 idle)."""
        active = torch.tensor(pos) >= 0
        ids = torch.where(active[:, None], tok, 0)
        out = self._device.step(ids, list(pos), table, greedy=greedy)
        return torch.where(active[:, None], out, -1) if greedy else torch.where(active[:, None, None], out, 0.0)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One decode step. ``tokens`` int64 ``[batch]`` (one token per user) or ``[batch, T]`` (T <= 32
        new tokens per user, e.g. the last accepted token and T - 1 draft tokens to verify);
        ``positions`` int64 ``[batch]``: the position of each user's (first) token, its T tokens at
        ``positions[b] .. positions[b] + T - 1``; -1 = idle slot (untouched, zero logits); a user at
        position 0 (re)starts its sequence in the slot, one below its cache length rewinds it.

        Returns float32 logits ``[batch, vocab]``, or ``[batch, T, vocab]`` for 2-D tokens (row t
        predicts the token after token t). Every check runs before any cache is written.

        On the device backend T tokens per user run as one device step of T B rows: one rotary append
        and one multi-token FlashDecode per layer."""
        return self._step(tokens, positions)

    def _step(self, tokens: torch.Tensor, positions: torch.Tensor, greedy: bool = False) -> torch.Tensor:
        tok, pos = self._check_step(tokens, positions)
        t = tok.shape[1]
        cp, bs = self.context_parallel, self.block_size
        if t == 1:
            plan = self.allocator.plan(pos)  # raises (exhausted pool) before any cache is written
        elif cp > 1:
            plan = self.allocator.plan(pos, tokens=t)
        else:
            check_positions(pos, self.allocator.lengths)
            plan = self.allocator.plan_blocks(
                [None if p < 0 else (p == 0, (p + t - 1) // bs + 1) for p in pos],
                [self.allocator.lengths[b] if p < 0 else p + t for b, p in enumerate(pos)])
        shape = (self.batch, self.spec.vocab_size) if tokens.dim() == 1 else (self.batch, t, self.spec.vocab_size)
        if greedy:
            shape = shape[:-1]
        if all(p < 0 for p in pos):
            return torch.full(shape, -1, dtype=torch.int64) if greedy else torch.zeros(shape)
        if self._device is not None:
            # context parallel: one page table per device (its pool's local blocks)
            table = self.allocator.page_table(plan) if cp == 1 else self.allocator.page_tables(plan)
            out = self._device_step(tok, pos, table, greedy)
            self.allocator.commit(plan)
            return out.reshape(shape)
        rows: tuple[tuple[int, ...], ...] = ()
        if cp == 1:
            tables: tuple[torch.Tensor, ...] = (self.allocator.page_table(plan),)
            local = (tuple(p + t - 1 if p >= 0 else -1 for p in pos),)  # each user's last token
            at = lambda c, p: p  # noqa: E731 - a position's place in the one cache
        else:
            tables = self.allocator.page_tables(plan)
            at = self.allocator.local_position  # a position's place on CP rank c
            local = tuple(tuple(at(c, p + t - 1) if p >= 0 else -1 for p in pos) for c in range(cp))
            if t > 1:  # every token row's own local position (row j * B + b), per rank
                rows = tuple(tuple(at(c, p + j) if p >= 0 else -1 for j in range(t) for p in pos) for c in range(cp))
        # cache rows written: token row b * T + j at position p + j (with CP: on the rank owning its block)
        writes = tuple(
            tuple((b * t + j, int(tables[c][b, at(c, p + j) // bs]), at(c, p + j) % bs)
                  for b, p in enumerate(pos) if p >= 0 for j in range(t) if ((p + j) // bs) % cp == c)
            for c in range(cp)
        )
        ids = torch.where(torch.tensor(pos)[:, None] >= 0, tok, 0).reshape(-1)
        hidden = self._embed[ids].to(torch.float32)
        s = StepInputs(hidden=hidden, positions=pos, local_positions=local, page_tables=tables, writes=writes,
                       num_tokens=t, row_positions=rows)
        if self._pool is None:
            logits = self._shard.step(s)
        else:
            logits = self._pool.run_all(worker_step, s)[0]
        self.allocator.commit(plan)
        if greedy:
            ids = torch.where(torch.tensor(pos)[:, None] >= 0, logits.reshape(self.batch, t, -1).argmax(-1), -1)
            return ids.reshape(shape)
        return logits.reshape(shape)

    def generate(self, input_ids: Any, max_new_tokens: int, eos_token_id: Optional[int] = None,
                 return_logits: bool = False, *, prompt_chunk: int = MAX_TOKENS,
                 progress: Optional[bool] = None) -> Any:
        """Greedy decoding of ``input_ids`` int ``[B', P]`` (B' <= batch) in slots 0..B'-1 (their
        caches restart; other slots are left as they are). Returns int64 ``[B', P + N]`` with
        N <= ``max_new_tokens``: a user that produced ``eos_token_id`` is padded with it, and
        decoding stops when every user did. ``return_logits``: also return the float32 logits
        ``[B', N, vocab]`` each new token was chosen from.

        Prompts of different lengths: ``input_ids`` a list of B' 1-D int sequences; then the result
        is a list of int64 ``[P_b + N]`` tensors (the logits stay ``[B', N, vocab]``).

        The prompts go in multi-token steps of up to ``prompt_chunk`` (<= 32) tokens per user (with
        context parallelism too), every user advancing by up to that many of its own
        tokens in each step: a 3000-token prompt takes 94 steps, not 3000. In a step whose chunk is
        longer than what a user has left, that user's chunk is padded with its last token (the
        padded rows stay within the cache blocks the user holds at the end anyway; its next step
        rewinds over them); a user whose prompt is done idles (position -1) until every prompt is
        in, then all decode one token per step at their own positions. ``self.generate_steps`` is
        then (prompt steps, decode steps) of the call. Each step reads the argmax ids alone
        (`next_tokens`; on the device backend the argmax runs there), the logits only with
        ``return_logits``.

        ``progress``: a progress bar on stderr (tqdm when installed) for the prompt and for the
        generation; None (default): only for those longer than 64 tokens (per user), True: always,
        False: never."""
        out, self.generate_steps = generation.generate(
            self, input_ids, max_new_tokens, eos_token_id, return_logits, prompt_chunk=prompt_chunk,
            progress=progress)
        return out
