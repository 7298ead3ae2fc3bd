"""Llama decode on the host backend: wall time per step, and the modelled Wormhole attention time.

Random weights (no download), 1 layer by default (``--layers 2``), the FlashDecode kernels on the
host runtime (backend ``host``), bfloat8_b KV caches of 8K positions filled with random values
(every user at position 8191 after the fill; blocks of 64 positions). Cases:

  8b-n150   Llama-3.1-8B shape on one N150: 32 q / 8 kv heads, D 128, hidden 4096, MLP 14336,
            vocab 128256; B = 1 and 32.
  70b-t3k   Llama-3.1-70B on a T3K, ONE chip's shard: 8 q / 1 kv heads, D 128, hidden 8192, MLP
            28672 / 8, vocab 128256 / 8; B = 1 and 32. The shard runs as a devices=1 decoder, so the
            two all-reduces and the all-gather of the 8-way step are not in its time.
  tiny-b4   the 2-layer test model (8 q / 2 kv, D 64, hidden 256) at B = 4, S 64.
  op-call   one op call of the smallest shape (B 1, 1 q / 1 kv head, D 32, S 32) on the host backend,
            compile cache warm: the fixed cost a decode step pays once per layer.
  attn-8b   one Llama-3.1-8B-shaped attention call alone (B 1, 8K, N150 8x8 grid).

For every case that calls the op, the model estimate of the attention on a Wormhole
(``ttdecode.perf_model``: ``evaluate(*work_from_counters(plan, counters))`` of the counters of the
same kernel runs) is printed as "per
layer" (one call serves all B users), "per step" (= per layer x the full model's layers, 32 for
8B and 80 for 70B: the attention share of one full-depth decode step, which yields one token per
user) and "per token" (per step / B). These are MODEL ESTIMATES, not device measurements. Host wall times are of this
machine (2 shared cores).

    PYTHONPATH=. python perf/bench_llama.py            # all cases (a few minutes), plot in --out
    PYTHONPATH=. python perf/bench_llama.py --quick    # tiny-b4, op-call, attn-8b and the B=1 cases
    PYTHONPATH=. python perf/bench_llama.py --update-committed   # all cases, plot into tech_report/figures/

The plot goes to ``--out`` (default ``build/perf/``, untracked); only ``--update-committed`` (a full
run) rewrites the committed ``tech_report/figures/llama_decode_bench.png``.

``--device-mock``: the device backend (``LlamaDecoder(backend="device", device=...)``) on the mock Wormhole
(``ttdecode.testing.mock``: ttnn 0.81.1's real host side, no chip, nothing computed). HOST-SIDE TIMES ONLY,
real measurements of ttnn's host side on this machine; no kernel/device time is measured. Each case runs in its
own process (the mock can segfault), B = 32, random weights, ``--layers`` layers of the real per-layer shape,
the vocabulary cut to ``--mock-vocab`` (the full 128256-row LM head and embedding cost GBs of host conversion and
say nothing about a layer; the per-step figures therefore carry a small LM head):

  8b-n150   Llama-3.1-8B on a mock N150: 32 q / 8 kv heads, D 128, hidden 4096, MLP 14336.
  70b-t3k   Llama-3.1-70B tensor parallel on a mock T3K 1x8 (FABRIC_1D): 64 q / 8 kv heads, D 128, hidden 8192,
            MLP 28672, so each chip holds the 8 q / 1 kv / MLP 3584 shard; two all_reduce per layer.
  tiny-n150 a small model (8 q / 2 kv, D 64, hidden 256, MLP 512) for the quick test.

Per case: the eager host time per decode step (``next_tokens``, median of ``--mock-timed`` steps) and per
layer (between the first ttnn call of consecutive layers, timestamped by a wrapper of ``ttnn.rms_norm``), the
ttnn calls per step (the decoder's count) and the device ops of one step as ttnn's graph capture records them
(cache misses), the program-cache entries after steps 2 and ``--mock-steps`` (logits every third step,
argmax ids otherwise), the host<->device moves per step (ttnn's transfer functions wrapped; expected: the
one input row in, ids or logits out). The reference: the same layer issued as tt-metal's own ops on the same
device in the same process, each timed as the median of ``--mock-calls`` cached calls and summed: rms_norm,
the QKV linear, ``nlp_create_qkv_heads_decode``, ``rotary_embedding_llama`` on q and k and
``paged_update_cache`` of k and v (in place of our fused rotary append), tt-metal's
``transformer.paged_scaled_dot_product_attention_decode`` (in place of our FlashDecode), the heads' reshape,
O linear, (all_reduce), add, rms_norm, gate (SiLU) / up linears, mul, down linear, (all_reduce), add.
Goal: our eager host time per layer <= 2x that sum (PASS/FAIL). Also printed: our layer broken down (each
call the decoder issues for layer 0, recorded in a step and replayed cached; the layer's time minus their sum
is the frees of intermediates and the Python between the calls).

    PYTHONPATH=. python perf/bench_llama.py --device-mock [--layers 1|2] [--mock-cases 8b-n150,70b-t3k]
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BUILD_OUT = REPO / "build" / "perf"  # default output directory (gitignored)
COMMITTED = REPO / "tech_report" / "figures"  # the committed plot, rewritten by --update-committed only

import ttdecode  # noqa: E402
import ttdecode.ops.flash_decode.program_factory as factory  # noqa: E402
from ttdecode.models import LlamaDecoder, LlamaSpec  # noqa: E402
from ttdecode.perf_model.counters import work_from_counters  # noqa: E402
from ttdecode.perf_model.evaluator import evaluate  # noqa: E402

SHAPES = {
    # name: (heads, kv_heads, head_dim, hidden, intermediate, vocab, full-model layers)
    "8b-n150": (32, 8, 128, 4096, 14336, 128256, 32),
    "70b-t3k": (8, 1, 128, 8192, 28672 // 8, 128256 // 8, 80),
    "tiny-b4": (8, 2, 64, 256, 512, 512, 2),
}
LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}


class AttentionCounters:
    """Records (plan, counters) of every host kernel run while active (wraps run_flash_decode)."""

    def __init__(self) -> None:
        self.runs: list[tuple[Any, Any]] = []
        self._orig = factory.run_flash_decode

    def __enter__(self) -> "AttentionCounters":
        def wrapped(plan: Any, **kw: Any) -> Any:
            out = self._orig(plan, **kw)
            self.runs.append((plan, out[2].counters))
            return out

        factory.run_flash_decode = wrapped
        return self

    def __exit__(self, *exc: Any) -> None:
        factory.run_flash_decode = self._orig

    def model_us(self) -> list[float]:
        """The cost model's step time (µs, a MODEL ESTIMATE) of every recorded run."""
        return [evaluate(*work_from_counters(plan, counters)).total_us for plan, counters in self.runs]


def spec_of(name: str, layers: int) -> LlamaSpec:
    h, kv, d, hidden, inter, vocab, _ = SHAPES[name]
    return LlamaSpec(vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=h, num_kv_heads=kv,
                     head_dim=d, intermediate_size=inter, rms_norm_eps=1e-5, rope_theta=500000.0,
                     rope_scaling=LLAMA31_ROPE, attention_bias=False, mlp_bias=False)


def random_state(spec: LlamaSpec, seed: int = 0) -> dict[str, torch.Tensor]:
    """Hugging Face state-dict names, random bfloat16 weights (std 0.02; norms 1)."""
    g = torch.Generator().manual_seed(seed)
    w = lambda *shape: (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)  # noqa: E731
    q, kv = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    hs, inter = spec.hidden_size, spec.intermediate_size
    state = {"model.embed_tokens.weight": w(spec.vocab_size, hs), "lm_head.weight": w(spec.vocab_size, hs),
             "model.norm.weight": torch.ones(hs)}
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        state.update({
            p + "input_layernorm.weight": torch.ones(hs), p + "post_attention_layernorm.weight": torch.ones(hs),
            p + "self_attn.q_proj.weight": w(q, hs), p + "self_attn.k_proj.weight": w(kv, hs),
            p + "self_attn.v_proj.weight": w(kv, hs), p + "self_attn.o_proj.weight": w(hs, q),
            p + "mlp.gate_proj.weight": w(inter, hs), p + "mlp.up_proj.weight": w(inter, hs),
            p + "mlp.down_proj.weight": w(hs, inter),
        })
    return state


def fill_caches(dec: LlamaDecoder, length: int, seed: int = 0) -> None:
    """Give every user ``length`` cached positions of random K/V (one random block repeated)."""
    alloc = dec.allocator
    per_user = math.ceil((length + 1) / alloc.block_size)
    for kc, vc in dec._shard.caches:
        for c in (kc, vc):
            block = torch.randn(1, *c.shape[1:], generator=torch.Generator().manual_seed(seed))
            tile = ttdecode.from_torch(block, c.dtype).data
            c.image[:] = tile * c.shape[0]
    for b in range(alloc.batch):
        alloc.blocks[b] = list(range(b * per_user, (b + 1) * per_user))
        alloc.lengths[b] = length
    used = {blk for blocks in alloc.blocks for blk in blocks}
    alloc._free = [blk for blk in range(alloc.num_blocks - 1, -1, -1) if blk not in used]


def bench_model(name: str, batch: int, seq: int, layers: int, repeat: int) -> dict[str, Any]:
    spec = spec_of(name, layers)
    block = 64 if seq > 64 else 32
    t0 = time.perf_counter()
    dec = LlamaDecoder(spec, random_state(spec), batch=batch, max_seq_len=seq, kv_dtype=ttdecode.bfloat8_b,
                       backend="host", block_size=block)
    fill_caches(dec, seq - 1 - repeat)
    build = time.perf_counter() - t0
    tokens = torch.randint(0, spec.vocab_size, (batch,), generator=torch.Generator().manual_seed(1))
    times = []
    with AttentionCounters() as rec:
        for r in range(repeat + 1):  # the first step compiles the kernels: not timed
            pos = torch.full((batch,), seq - 1 - repeat + r, dtype=torch.int64)
            t = time.perf_counter()
            dec.step(tokens, pos)
            if r:
                times.append(time.perf_counter() - t)
    model = rec.model_us()[-layers:]  # the last step's calls, one per layer
    full_layers = SHAPES[name][6]
    return dict(case=f"{name} B={batch}", layers=layers, seq=seq, host_s=statistics.median(times),
                build_s=build, attn_model_us_layer=statistics.mean(model),
                attn_model_us_token=statistics.mean(model) * full_layers, full_layers=full_layers)


def bench_op(batch: int, heads: int, kv_heads: int, d: int, seq: int, repeat: int, label: str) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, batch, heads, d, generator=g)
    k = ttdecode.from_torch(torch.randn(batch, kv_heads, seq, d, generator=g), ttdecode.bfloat8_b)
    v = ttdecode.from_torch(torch.randn(batch, kv_heads, seq, d, generator=g), ttdecode.bfloat8_b)
    pos = [seq - 1] * batch
    times = []
    with AttentionCounters() as rec:
        for r in range(repeat + 1):
            t = time.perf_counter()
            ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos=pos, backend="host")
            if r:
                times.append(time.perf_counter() - t)
    return dict(case=label, layers=1, seq=seq, host_s=statistics.median(times), build_s=0.0,
                attn_model_us_layer=rec.model_us()[-1], attn_model_us_token=float("nan"), full_layers=1)


def plot(rows: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    names = [r["case"] for r in rows]
    a.barh(names, [r["host_s"] * 1e3 for r in rows], color="tab:gray")
    a.set_xscale("log")
    a.set_xlabel("host wall time per step / call (ms, this 2-core machine)")
    a.set_title("host backend (measured)")
    m = [r for r in rows if not math.isnan(r["attn_model_us_layer"])]
    b.barh([r["case"] for r in m], [r["attn_model_us_layer"] for r in m], color="tab:blue")
    b.set_xscale("log")
    b.set_xlabel("attention per layer, one Wormhole (us, model estimate)")
    b.set_title("ttdecode.perf_model estimate (not measured)")
    fig.tight_layout()
    path = out / "llama_decode_bench.png"
    fig.savefig(path, dpi=120)
    return path


# ---- --device-mock: the device backend on the mock Wormhole (host-side time only) ---------------

MOCK_LABEL = ("host-side time, real measurements of ttnn 0.81.1's host side on a mock Wormhole (no chip: the mock "
              "computes nothing, device/kernel time NOT measured)")
MOCK_MARK = "BENCH_LLAMA_MOCK:"
MOCK_BATCH = 32  # tt-metal's decode ops (nlp_create_qkv_heads_decode) are built around B = 32
GOAL_LAYER_RATIO = 2.0  # goal: eager host time per layer within 2x the sum of ttnn's own ops' cached calls


@dataclass(frozen=True)
class MockCase:
    """A model shape on a mock system: full-model heads/sizes (the mesh splits them), the mesh shape
    (None: one chip) and the full model's layer count."""

    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    system: str
    mesh: Optional[tuple[int, int]]
    full_layers: int

    @property
    def devices(self) -> int:
        return 1 if self.mesh is None else self.mesh[0] * self.mesh[1]


MOCK_CASES = {
    "8b-n150": MockCase(32, 8, 128, 4096, 14336, "n150", None, 32),
    "70b-t3k": MockCase(64, 8, 128, 8192, 28672, "t3k", (1, 8), 80),
    "tiny-n150": MockCase(8, 2, 64, 256, 512, "n150", None, 2),
}


def mock_spec(case: MockCase, layers: int, vocab: int) -> LlamaSpec:
    """The LlamaSpec of `case` with `layers` layers and a `vocab`-row vocabulary."""
    return LlamaSpec(vocab_size=vocab, hidden_size=case.hidden, num_layers=layers, num_heads=case.heads,
                     num_kv_heads=case.kv_heads, head_dim=case.head_dim, intermediate_size=case.intermediate,
                     rms_norm_eps=1e-5, rope_theta=500000.0, rope_scaling=LLAMA31_ROPE, attention_bias=False,
                     mlp_bias=False)


class LayerClock:
    """Timestamps the start of every layer of a device-decoder step: wraps ``ttnn.rms_norm`` and marks
    a call whose ``weight`` is layer i's input-norm weight (the layer's first ttnn call) or the final
    norm's (the end of the last layer). `layer_seconds()` gives each layer's host time (s) of the last
    step."""

    def __init__(self, ttnn: Any, weights: dict[str, Any], layers: int) -> None:
        self._keys = {id(weights[f"{i}.attention_norm"]): i for i in range(layers)}
        self._keys[id(weights["norm"])] = layers
        self.layers = layers
        self.marks: list[tuple[int, float]] = []
        orig = ttnn.rms_norm

        def timed(*args: Any, **kwargs: Any) -> Any:
            key = self._keys.get(id(kwargs.get("weight")))
            if key is not None:
                self.marks.append((key, time.perf_counter()))
            return orig(*args, **kwargs)

        ttnn.rms_norm = timed

    def layer_seconds(self) -> list[float]:
        """Per layer, the time (s) from its first ttnn call to the next layer's (the final norm's)."""
        marks, self.marks = self.marks, []
        if [k for k, _ in marks] != list(range(self.layers + 1)):
            raise RuntimeError(f"LayerClock: expected one mark per layer and the final norm, in order, got "
                               f"{[k for k, _ in marks]}")
        return [marks[i + 1][1] - marks[i][1] for i in range(self.layers)]


def _median_ms(fn: Any, calls: int) -> float:
    """Median host time (ms) of `calls` calls of ``fn()`` after 2 untimed ones (the program cache warm)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
        del out  # the output tensors are freed outside the timed call
    return statistics.median(times) * 1e3


def reference_layer(ttnn: Any, dec: Any, calls: int, position: int) -> list[dict[str, Any]]:
    """One layer as tt-metal's own ops on the decoder's device, weights (layer 0) and caches (in ttnn's tile
    pages, ``ttdecode.to_tile_pages`` of the decoder's bank-local pools: what tt-metal's paged ops read): each
    op's median cached-call host time (ms), in issue order (see the module doc's ``--device-mock``)."""
    dd = dec._device
    spec, w, device, b = dd.spec, dd.w, dd.device, dd.batch
    nh, nkv, d, hs, eps = dd.nh, dd.nkv, spec.head_dim, spec.hidden_size, spec.rms_norm_eps
    kc, vc = (ttdecode.to_tile_pages(c) for c in dd.caches[0])
    dram = ttnn.DRAM_MEMORY_CONFIG
    put = dict(device=device, mesh_mapper=dd._rep)
    x = ttnn.from_torch(torch.zeros(1, 1, b, hs), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, memory_config=dram,
                        **put)
    pos = ttnn.from_torch(torch.full((b,), position, dtype=torch.int32), dtype=ttnn.int32,
                          layout=ttnn.ROW_MAJOR_LAYOUT, memory_config=dram, **put)
    table = ttnn.from_torch(torch.arange(b * dd.max_blocks, dtype=torch.int32).reshape(b, dd.max_blocks),
                            dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, memory_config=dram, **put)
    # rotary_embedding_llama's decode mode: cos / sin [1, B, 32, D] and the transformation matrix
    # [1, 1, 32 B, 32], height sharded one user per core (as tt-metal's Llama models pass them)
    grid = device.compute_with_storage_grid_size()
    cores = ttnn.num_cores_to_corerangeset(b, grid, row_wise=True)
    sharded = lambda shape: ttnn.create_sharded_memory_config(  # noqa: E731
        shape=shape, core_grid=cores, strategy=ttnn.ShardStrategy.HEIGHT, use_height_and_width_as_shard_shape=True)
    cos, sin = (ttnn.from_torch(torch.zeros(1, b, 32, d), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                                memory_config=sharded((32, d)), **put) for _ in range(2))
    trans = ttnn.from_torch(torch.zeros(1, 1, 32 * b, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                            memory_config=sharded((32, 32)), **put)
    sdpa_cfg = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(int(grid.x), int(grid.y)), q_chunk_size=0,
                                      k_chunk_size=0, exp_approx_mode=False)
    tp = dd.tp
    ops: list[tuple[str, Any]] = []

    def issue(name: str, fn: Any) -> Any:
        ops.append((name, fn))
        return fn()

    h = issue("rms_norm", lambda: ttnn.rms_norm(x, weight=w["0.attention_norm"], epsilon=eps))
    qkv = issue("linear (QKV)", lambda: ttnn.linear(h, w["0.wqkv"]))
    q, k, v = issue("experimental.nlp_create_qkv_heads_decode", lambda: ttnn.experimental.nlp_create_qkv_heads_decode(
        qkv, num_heads=nh, num_kv_heads=nkv, memory_config=ttnn.L1_HEIGHT_SHARDED_MEMORY_CONFIG))
    q_rot = issue("experimental.rotary_embedding_llama (q)", lambda: ttnn.experimental.rotary_embedding_llama(
        q, cos, sin, trans, is_decode_mode=True))
    k_rot = issue("experimental.rotary_embedding_llama (k)", lambda: ttnn.experimental.rotary_embedding_llama(
        k, cos, sin, trans, is_decode_mode=True))
    issue("experimental.paged_update_cache (k)", lambda: ttnn.experimental.paged_update_cache(
        kc, k_rot, update_idxs_tensor=pos, page_table=table))
    issue("experimental.paged_update_cache (v)", lambda: ttnn.experimental.paged_update_cache(
        vc, v, update_idxs_tensor=pos, page_table=table))
    attn = issue("transformer.paged_scaled_dot_product_attention_decode",
                 lambda: ttnn.transformer.paged_scaled_dot_product_attention_decode(
                     q_rot, kc, vc, page_table_tensor=table, cur_pos_tensor=pos, scale=1 / math.sqrt(d),
                     program_config=sdpa_cfg, memory_config=dram))
    cat = issue("reshape (concat heads)", lambda: ttnn.reshape(attn, [1, 1, b, nh * d]))
    o = issue("linear (O)", lambda: ttnn.linear(cat, w["0.wo"]))
    o_sum = issue("all_reduce", lambda: ttnn.all_reduce(o)) if tp > 1 else o
    x2 = issue("add", lambda: ttnn.add(x, o_sum))
    h2 = issue("rms_norm", lambda: ttnn.rms_norm(x2, weight=w["0.ffn_norm"], epsilon=eps))
    gate = issue("linear (gate, SiLU)", lambda: ttnn.linear(h2, w["0.w_gate"], activation="silu"))
    up = issue("linear (up)", lambda: ttnn.linear(h2, w["0.w_up"]))
    m = issue("mul", lambda: ttnn.mul(gate, up))
    down = issue("linear (down)", lambda: ttnn.linear(m, w["0.w_down"]))
    down_sum = issue("all_reduce", lambda: ttnn.all_reduce(down)) if tp > 1 else down
    issue("add", lambda: ttnn.add(x2, down_sum))
    rows = [{"op": name, "ms": _median_ms(fn, calls)} for name, fn in ops]
    t_seq = []
    for _ in range(calls):  # the whole sequence back to back (outputs kept until the sequence ends)
        t = time.perf_counter()
        outs = [fn() for _, fn in ops]
        t_seq.append(time.perf_counter() - t)
        del outs
    rows.append({"op": "(whole sequence back to back)", "ms": statistics.median(t_seq) * 1e3})
    return rows


def our_layer_ops(dec: Any, step: Any, calls: int) -> list[dict[str, Any]]:
    """Our layer 0 broken down: the ttnn calls (and our two programs) the decoder issues for layer 0 in
    one step (``step()`` runs it), recorded with their arguments, then each replayed as the median of
    `calls` cached calls (ms), in issue order. Layer time minus their sum: the frees of the intermediates
    and the Python between the calls."""
    dd = dec._device
    first, nxt = dd.w["0.attention_norm"], dd.w["1.attention_norm" if dd.spec.num_layers > 1 else "norm"]
    record: list[tuple[str, Any, tuple, dict]] = []
    orig_op, orig_rot, orig_attn = dd._op, dd._rotary_append, dd._attention

    def recorder(name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            record.append((name, fn, args, kwargs))
            return fn(*args, **kwargs)
        return call

    dd._op = lambda name: recorder(name, orig_op(name))
    dd._rotary_append = recorder("ttdecode rotary_kv_append (generic_op)", orig_rot)
    dd._attention = recorder("ttdecode paged FlashDecode (generic_op)", orig_attn)
    try:
        step()
    finally:
        del dd._op, dd._rotary_append, dd._attention  # back to the class's methods
    starts = [i for i, (name, _, _, kw) in enumerate(record)
              if name == "rms_norm" and any(kw.get("weight") is t for t in (first, nxt))]
    layer = record[starts[0]:starts[1]]
    return [{"op": name, "ms": _median_ms(lambda: fn(*args, **kwargs), calls)} for name, fn, args, kwargs in layer]


def mock_child(name: str, layers: int, vocab: int, seq: int, steps: int, timed: int, calls: int) -> dict[str, Any]:
    """Runs one case on the mock (this process's environment set by the parent) and returns its figures."""
    import ttnn

    from ttdecode.testing.mock import open_mock_device, open_mock_mesh
    from ttdecode.testing.step_graph import capture_step
    from ttdecode.testing.transfers import count_transfers

    case = MOCK_CASES[name]
    spec = mock_spec(case, layers, vocab)
    t0 = time.perf_counter()
    device = open_mock_device() if case.mesh is None else open_mock_mesh(case.mesh, fabric=True)
    res: dict[str, Any] = {"case": name, "layers": layers, "full_layers": case.full_layers, "vocab": vocab,
                           "batch": MOCK_BATCH, "seq": seq, "devices": case.devices,
                           "open_s": time.perf_counter() - t0}
    state = random_state(spec)
    t0 = time.perf_counter()
    dec = LlamaDecoder(spec, state, batch=MOCK_BATCH, max_seq_len=seq, block_size=64, devices=case.devices,
                       backend="device", device=device)
    del state
    res["build_s"] = time.perf_counter() - t0
    counting = count_transfers(ttnn)  # ttnn's host<->device moves, for the child's lifetime (kept referenced)
    moves = counting.__enter__()
    clock = LayerClock(ttnn, dec._device.w, layers)
    tokens = torch.randint(0, vocab, (MOCK_BATCH,), generator=torch.Generator().manual_seed(1))
    pos = torch.zeros(MOCK_BATCH, dtype=torch.int64)

    def one(greedy: bool) -> tuple[float, list[float]]:
        nonlocal tokens, pos
        t = time.perf_counter()
        out = dec.next_tokens(tokens, pos) if greedy else dec.step(tokens, pos)
        seconds = time.perf_counter() - t
        ids = out if greedy else out.argmax(-1)
        tokens, pos = ids.clamp(min=0), pos + 1
        return seconds, clock.layer_seconds()

    first: list[float] = []
    per_step = []
    for s in range(steps):  # logits every third step, argmax ids otherwise (both programs by step 2)
        seconds, _ = one(greedy=s % 3 != 0)
        if s < 2:
            first.append(seconds)
        per_step.append({"moves": moves.take(), "ttnn_calls": sum(dec._device.ops.values()),
                         "entries": int(device.num_program_cache_entries()), "kind": "ids" if s % 3 else "logits"})
    calls_by_kind = {k: sorted({p["ttnn_calls"] for p in per_step if p["kind"] == k}) for k in ("logits", "ids")}
    res.update(first_steps_s=first, entries_2=per_step[1]["entries"], entries_last=per_step[-1]["entries"],
               steps=steps, moves_per_step=[p["moves"] for p in per_step], ttnn_calls_per_step=calls_by_kind,
               ops=dict(dec._device.ops))
    step_s, layer_s = [], []
    for _ in range(timed):
        seconds, layer = one(greedy=True)
        step_s.append(seconds)
        layer_s.append(layer)
    moves.take()
    res.update(timed=timed, step_ms=statistics.median(step_s) * 1e3,
               layer_ms=[statistics.median(col) * 1e3 for col in zip(*layer_s)],
               layer_ms_all=statistics.median([x for row in layer_s for x in row]) * 1e3)
    try:  # ttnn's own record of one step: device ops (program-cache hits), moves
        graph = capture_step(lambda: one(greedy=True))
        res["graph"] = {"device_ops": len(graph.device_ops), "misses": graph.misses(), "moves": graph.moves}
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        res["graph"] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
    clock.marks = []  # a failed capture may leave a partial step's marks
    res["ours"] = our_layer_ops(dec, lambda: one(greedy=True), calls)
    clock.marks = []
    res["ours_ms"] = sum(r["ms"] for r in res["ours"])
    res["entries_decoder"] = int(device.num_program_cache_entries())
    moves.take()
    res["reference"] = reference_layer(ttnn, dec, calls, int(pos[0]))
    res["reference_moves"] = moves.take()
    res["reference_ms"] = sum(r["ms"] for r in res["reference"] if not r["op"].startswith("("))
    dec.close()
    (ttnn.close_device if case.mesh is None else ttnn.close_mesh_device)(device)
    return res


def mock_goals(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(goal, value, pass) of one case's result."""
    ratio = r["layer_ms_all"] / r["reference_ms"]
    expected = {("copy_host_to_device_tensor", "to_torch")}
    kinds = {tuple(m) for m in r["moves_per_step"]}
    return [
        (f"host ms per layer <= {GOAL_LAYER_RATIO:g}x ttnn's own ops' cached calls",
         f"{r['layer_ms_all']:.3f} / {r['reference_ms']:.3f} = {ratio:.2f}x", ratio <= GOAL_LAYER_RATIO),
        (f"program-cache entries after step 2 == after step {r['steps']}", f"{r['entries_2']} / {r['entries_last']}",
         r["entries_2"] == r["entries_last"]),
        ("moves per step: the input row in, ids/logits out", "; ".join(sorted(",".join(k) for k in kinds)),
         kinds == expected),
    ]


def mock_report(results: list[dict[str, Any]]) -> tuple[str, bool]:
    """The printed tables (markdown) and whether every goal passed."""
    lines = [f"# {MOCK_LABEL}", "",
             "| case | layers run | vocab | B | host ms/step | host ms/layer | ttnn ops ref. ms/layer | ratio | "
             "ttnn calls/step (logits/ids) | device ops/step (misses) | cache entries step 2 / last | moves/step |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    ok = True
    for r in results:
        if "error" in r:
            lines.append(f"| {r['case']} | FAILED: {r['error']} |")
            ok = False
            continue
        g = r["graph"]
        dev_ops = g.get("error") or f"{g['device_ops']} ({len(g['misses'])})"
        kinds = sorted({"+".join(m) for m in r["moves_per_step"]})
        lines.append(f"| {r['case']} | {r['layers']} of {r['full_layers']} | {r['vocab']} | {r['batch']} | "
                     f"{r['step_ms']:.2f} | {r['layer_ms_all']:.3f} | {r['reference_ms']:.3f} | "
                     f"{r['layer_ms_all'] / r['reference_ms']:.2f}x | "
                     f"{'/'.join(','.join(map(str, v)) for v in r['ttnn_calls_per_step'].values())} | {dev_ops} | "
                     f"{r['entries_2']} / {r['entries_last']} | {' / '.join(kinds)} |")
    for r in results:
        if "error" in r:
            continue
        lines += ["", f"{r['case']}: build {r['build_s']:.1f} s, first two steps {r['first_steps_s'][0]:.2f} / "
                      f"{r['first_steps_s'][1]:.3f} s (JIT), per layer ms {[round(x, 3) for x in r['layer_ms']]}, "
                      f"full-depth estimate of the layers' host time {r['layer_ms_all'] * r['full_layers']:.1f} ms "
                      f"({r['full_layers']} x per layer); ttnn calls of a step by op: {r['ops']}",
                  "", "| reference op (tt-metal's own, cached) | host ms |", "|---|---:|"]
        lines += [f"| {x['op']} | {x['ms']:.4f} |" for x in r["reference"]]
        lines += [f"| sum | {r['reference_ms']:.4f} |", "",
                  "| our layer's calls (recorded in a step, replayed cached) | host ms |", "|---|---:|"]
        lines += [f"| {x['op']} | {x['ms']:.4f} |" for x in r["ours"]]
        lines += [f"| sum | {r['ours_ms']:.4f} |",
                  f"| the layer's measured time minus that sum (frees of intermediates, Python between calls) | "
                  f"{r['layer_ms_all'] - r['ours_ms']:.4f} |", "", "| goal | value | result |", "|---|---|---|"]
        for goal, value, passed in mock_goals(r):
            ok = ok and passed
            lines.append(f"| {goal} | {value} | {'PASS' if passed else 'FAIL'} |")
        g = r["graph"]
        lines.append(f"ttnn's graph capture of one greedy step: {g['error']}" if "error" in g else
                     f"ttnn's graph capture of one greedy step: {g['device_ops']} device ops, program-cache misses "
                     f"{g['misses'] or 'none'}, moves {g['moves']}")
        if r["reference_moves"]:
            lines.append(f"moves while the reference ran (its inputs' set-up): {r['reference_moves']}")
    return "\n".join(lines), ok


def run_device_mock(args: argparse.Namespace, out: Path) -> int:
    """The parent of --device-mock: one child process per case on its mock system; table, JSON, CSV."""
    import csv
    import json

    from ttdecode.testing.mock import run_script

    results = []
    for name in args.mock_cases:
        case = MOCK_CASES[name]
        argv = [str(Path(__file__).resolve()), "--mock-child", name, "--layers", str(args.layers), "--mock-vocab",
                str(args.mock_vocab), "--mock-seq", str(args.mock_seq), "--mock-steps", str(args.mock_steps),
                "--mock-timed", str(args.mock_timed), "--mock-calls", str(args.mock_calls)]
        t0 = time.perf_counter()
        try:
            proc = run_script(argv, system=case.system, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            results.append({"case": name, "error": f"timed out after {args.timeout:.0f} s"})
            continue
        got = [json.loads(line[len(MOCK_MARK):]) for line in proc.stdout.splitlines() if line.startswith(MOCK_MARK)]
        if proc.returncode != 0 or not got:
            tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
            print(f"{name}: child exited {proc.returncode}; stderr tail:\n{tail}", file=sys.stderr)
            results.append({"case": name, "error": f"child exited {proc.returncode}"})
            continue
        results.append(got[0])
        print(f"  done {name} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    text, ok = mock_report(results)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_llama_device_mock.json").write_text(json.dumps({"label": MOCK_LABEL, "results": results}, indent=1))
    with open(out / "bench_llama_device_mock.csv", "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["case", "layers", "vocab", "batch", "step_ms", "layer_ms", "reference_ms", "ratio",
                     "entries_2", "entries_last", "error"])
        for r in results:
            if "error" in r:
                wr.writerow([r["case"]] + [""] * 9 + [r["error"]])
            else:
                wr.writerow([r["case"], r["layers"], r["vocab"], r["batch"], r["step_ms"], r["layer_ms_all"],
                             r["reference_ms"], r["layer_ms_all"] / r["reference_ms"], r["entries_2"],
                             r["entries_last"], ""])
    print(f"\n(json, csv: {out}/bench_llama_device_mock.*)")
    return 0 if ok else 1


def _case_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in MOCK_CASES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {sorted(MOCK_CASES)}, got {text!r}")
    return names


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip the B=32 model cases")
    ap.add_argument("--layers", type=int, default=1, choices=(1, 2),
                    help="layers of the random model, host and --device-mock cases (default 1)")
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=2, help="timed steps per case (median)")
    ap.add_argument("--out", type=Path, default=None,
                    help="directory for the plot (default: build/perf/, untracked)")
    ap.add_argument("--update-committed", action="store_true",
                    help="write the plot into tech_report/figures/, replacing the committed one (full run only)")
    dm = ap.add_argument_group("--device-mock (host-side time of the device backend on the mock Wormhole)")
    dm.add_argument("--device-mock", action="store_true",
                    help="run the device backend on the mock (see above) instead of the host cases; --layers layers "
                         "(default 1); writes bench_llama_device_mock.json/.csv into --out")
    dm.add_argument("--mock-cases", type=_case_list, default=["8b-n150", "70b-t3k"],
                    help=f"comma-separated cases of {sorted(MOCK_CASES)} (default 8b-n150,70b-t3k)")
    dm.add_argument("--mock-vocab", type=_positive, default=8192,
                    help="vocabulary rows of the random model (default 8192; the real 128256 only grows the LM head "
                         "and embedding, not a layer)")
    dm.add_argument("--mock-seq", type=_positive, default=1024,
                    help="max_seq_len of the paged caches, blocks of 64 (default 1024)")
    dm.add_argument("--mock-steps", type=_positive, default=20,
                    help="steps counted for moves and cache entries, >= 2 (default 20)")
    dm.add_argument("--mock-timed", type=_positive, default=20, help="timed greedy steps, median (default 20)")
    dm.add_argument("--mock-calls", type=_positive, default=30,
                    help="cached calls per reference op, median (default 30)")
    dm.add_argument("--timeout", type=float, default=1800, help="each case's child process timeout, s (default 1800)")
    dm.add_argument("--mock-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mock_child is not None:
        res = mock_child(args.mock_child, args.layers, args.mock_vocab, args.mock_seq, args.mock_steps,
                         args.mock_timed, args.mock_calls)
        print(MOCK_MARK + __import__("json").dumps(res), flush=True)
        return 0
    if args.device_mock:
        if args.update_committed or args.quick:
            ap.error("--device-mock: --update-committed and --quick belong to the host cases")
        if args.mock_steps < 2:
            ap.error(f"--mock-steps: expected >= 2 (entries are compared after step 2), got {args.mock_steps}")
        # counted, timed, captured and broken-down steps, then the reference's cache update
        positions = args.mock_steps + args.mock_timed + 3
        if positions > args.mock_seq:
            ap.error(f"--mock-seq: expected >= the {positions} positions the run uses (--mock-steps + --mock-timed "
                     f"+ 3), got {args.mock_seq}")
        return run_device_mock(args, args.out or BUILD_OUT)
    if args.update_committed and (args.out is not None or args.quick):
        ap.error("--update-committed writes tech_report/figures/ from a full run: without --out and --quick")
    out = COMMITTED if args.update_committed else (args.out or BUILD_OUT)
    torch.set_num_threads(2)
    rows = [
        bench_op(1, 1, 1, 32, 32, 20, "op-call (smallest)"),
        bench_model("tiny-b4", 4, 64, 2, 5),
        bench_op(1, 32, 8, 128, args.seq, args.repeat, "attn-8b B=1 (op alone)"),
    ]
    cases = [("8b-n150", 1), ("70b-t3k", 1)] + ([] if args.quick else [("8b-n150", 32), ("70b-t3k", 32)])
    for name, batch in cases:
        rows.append(bench_model(name, batch, args.seq, args.layers, args.repeat))
        print(f"  done {rows[-1]['case']}", file=sys.stderr, flush=True)
    print(f"{'case':28s} {'layers':>6s} {'S':>6s} {'host ms/step':>13s} {'model us/layer':>15s} "
          f"{'model us/step':>18s} {'model us/token':>15s}")
    for r in rows:
        full = r["attn_model_us_token"]
        step = "" if math.isnan(full) else f"{full:.0f} ({r['full_layers']} L)"
        users = int(r["case"].split("B=")[1].split()[0]) if "B=" in r["case"] else 1
        tok = "" if math.isnan(full) else f"{full / users:.0f}"
        print(f"{r['case']:28s} {r['layers']:6d} {r['seq']:6d} {r['host_s'] * 1e3:13.1f} "
              f"{r['attn_model_us_layer']:15.1f} {step:>18s} {tok:>15s}")
    print("host ms: measured wall time on this machine; model us: ttdecode.perf_model ESTIMATES of the attention "
          "on one Wormhole chip (not device measurements); per step = per layer x the full model's layers (one "
          "full-depth decode step, one token per user); per token = per step / B")
    out.mkdir(parents=True, exist_ok=True)
    print(f"plot: {plot(rows, out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
