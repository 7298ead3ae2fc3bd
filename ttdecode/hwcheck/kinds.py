"""The programs the hardware check runs: one table (`KINDS`), one line a program kind, and the timing
points (`TIMING_POINTS`, named as ``perf/calibrate_model.py``'s calibration points).

A FlashDecode kind is a `Decode` (shape, cache format and pages, the call's options); the combine a
`Combine`; the rotary append a `Rotary`; context parallelism over a mesh of chips a `Mesh` (run after the
single-chip kinds, on a mesh the worker opens then). A new kind is one more line of `KINDS`: the runner of its
family (``ttdecode.hwcheck.programs``) builds its inputs, the float64 reference and ttnn's own op from it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Union

__all__ = ["CALLS", "Decode", "Combine", "Rotary", "Mesh", "Kind", "KINDS", "TimingPoint", "TIMING_POINTS", "PAGED_SHAPES",
           "PAGED_BLOCKS", "MAX_TIMED_KV_ELEMENTS", "paged_timing_points", "select"]

#: Calls of our program per kind (the third is compared with the first: the cached paths).
CALLS = 3


@dataclass(frozen=True)
class Decode:
    """One FlashDecode call: Q ``[t, b, nh, d]``; K/V ``[b, nkv, s, d]`` (or a pool of ``b * s / block``
    blocks of ``block`` positions with ``paged``) in ``kv_dtype``; ``dv`` set: MLA (V = K[..., :dv]).
    ``pages``: "tile" or "key_row" (bank-local pages). ``pos``: one position per user (-1 skips it);
    ``mask``: non-causal with a random ``[b, 1, nh, s]`` mask; ``window``, ``sink``, ``lse``: the options;
    ``fidelity`` / ``fp32_dest`` / ``exp_approx``: the compute settings (None: the package default);
    ``k_chunk``: keys per chunk (0: dynamic); ``grid``: the compute grid (columns, rows)."""

    b: int = 2
    nh: int = 8
    nkv: int = 2
    s: int = 1024
    d: int = 64
    dv: Optional[int] = None
    t: int = 1
    pos: tuple[int, ...] = (700, 1023)
    kv_dtype: str = "bfloat8_b"
    paged: bool = False
    block: int = 64
    pages: str = "tile"
    mask: bool = False
    window: Optional[int] = None
    sink: bool = False
    lse: bool = False
    fidelity: Optional[str] = None
    fp32_dest: Optional[bool] = None
    exp_approx: Optional[bool] = None
    k_chunk: int = 0
    max_cores: Optional[int] = None
    grid: tuple[int, int] = (8, 8)

    @property
    def family(self) -> str:
        return "flash_decode"


@dataclass(frozen=True)
class Combine:
    """The LSE combine of ``n`` partials ``[n, g, h, dv]`` in ``in_dtype`` into ``out_dtype``; ``empty``:
    one partial with no key (LSE -inf) for every row."""

    n: int = 3
    g: int = 2
    h: int = 32
    dv: int = 64
    in_dtype: str = "bfloat16"
    out_dtype: str = "bfloat16"
    empty: bool = False

    @property
    def family(self) -> str:
        return "combine"


@dataclass(frozen=True)
class Rotary:
    """The fused RoPE + cache append: ``b`` users, ``nh`` / ``nkv`` heads of ``d``, caches of ``s``
    positions (``paged``: a pool of ``b * s / 32`` blocks of 32) in ``kv_dtype``; ``interleaved``
    pairs; ``rotary_dim`` (None: d); ``packed``: one QKV tensor; ``with_q``: Q rotated too."""

    b: int = 2
    nh: int = 8
    nkv: int = 2
    d: int = 64
    s: int = 256
    pos: tuple[int, ...] = (100, 255)
    kv_dtype: str = "bfloat8_b"
    paged: bool = False
    interleaved: bool = False
    rotary_dim: Optional[int] = None
    packed: bool = False
    with_q: bool = True

    @property
    def family(self) -> str:
        return "rotary_append"


@dataclass(frozen=True)
class Mesh:
    """Context-parallel decode on a mesh of ``devices`` chips (``mesh`` rows x columns): the KV cache ``[b, nkv, s,
    d]`` split along the sequence, FlashDecode on every shard, the partials merged by ``combine`` (ttnn's
    all_gather and our combine program): ``ttdecode.context_parallel_decode(..., backend="device")``. Refused
    by name on a system with fewer chips."""

    devices: int = 8
    mesh: tuple[int, int] = (1, 8)
    b: int = 2
    nh: int = 8
    nkv: int = 1
    s: int = 4096
    d: int = 128
    pos: tuple[int, ...] = (4095, 1500)
    kv_dtype: str = "bfloat8_b"
    combine: str = "all_gather"

    @property
    def family(self) -> str:
        return "context_parallel"


Params = Union[Decode, Combine, Rotary, Mesh]


@dataclass(frozen=True)
class Kind:
    """A program kind: its name (the report's key), its parameters, and whether ``--quick`` runs it."""

    name: str
    params: Params
    quick: bool = False

    @property
    def family(self) -> str:
        return self.params.family

    def config(self) -> dict[str, Any]:
        """The parameters as JSON values (tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self.params).items()}


_MASKED = dict(mask=True, s=512, k_chunk=128)

#: Every program kind the package builds, one line each (name, parameters, in --quick).
KINDS: tuple[Kind, ...] = (
    Kind("gqa_d64", Decode(), quick=True),
    Kind("mqa_d128", Decode(nkv=1, d=128, pos=(5, 900))),
    Kind("mha_d128", Decode(nh=4, nkv=4, d=128, pos=(300, 1000))),
    Kind("gqa_d256", Decode(nkv=1, d=256, s=512, pos=(100, 511))),
    Kind("q32_rows", Decode(b=1, nh=32, nkv=1, pos=(1000,))),
    Kind("skip_user", Decode(pos=(-1, 1023))),
    Kind("kv_bf16", Decode(kv_dtype="bfloat16")),
    Kind("kv_bfp4", Decode(kv_dtype="bfloat4_b")),
    Kind("paged", Decode(paged=True, pos=(640, 1000)), quick=True),
    Kind("paged_bfp4_block128", Decode(paged=True, kv_dtype="bfloat4_b", block=128, pos=(640, 1000))),
    Kind("paged_block32", Decode(b=8, nkv=1, d=128, s=4096, paged=True, block=32, pos=(127,) * 8)),
    Kind("key_row", Decode(b=1, s=1536, pos=(1500,), pages="key_row"), quick=True),
    Kind("key_row_mask", Decode(b=1, s=1536, pages="key_row", mask=True, k_chunk=128)),
    Kind("bank_local_paged", Decode(paged=True, block=64, pos=(640, 1000), pages="key_row"), quick=True),
    Kind("mla_d576", Decode(b=1, nh=16, nkv=1, d=576, dv=512, s=512, pos=(500,))),
    Kind("mla_d192_paged_bf16", Decode(nh=16, nkv=1, d=192, dv=128, paged=True, kv_dtype="bfloat16", pos=(511, 900))),
    Kind("mask", Decode(**_MASKED)),
    Kind("multi_token", Decode(t=3, pos=(400, 1020))),
    Kind("window", Decode(window=200)),
    Kind("sink", Decode(sink=True)),
    Kind("multi_token_window_sink", Decode(t=8, pos=(400, 1020), window=100, sink=True)),
    Kind("lse", Decode(lse=True), quick=True),
    Kind("bf16_dst_exp_approx", Decode(fp32_dest=False, exp_approx=True)),
    Kind("tt_transformers_numerics", Decode(fidelity="HiFi2", fp32_dest=False)),
    Kind("combine_bf16", Combine(), quick=True),
    Kind("combine_fp32_empty", Combine(in_dtype="float32", out_dtype="float32", empty=True)),
    Kind("rotary_half", Rotary(), quick=True),
    Kind("rotary_interleaved_partial", Rotary(interleaved=True, rotary_dim=32)),
    Kind("rotary_packed_qkv", Rotary(packed=True)),
    Kind("rotary_paged_kv_only", Rotary(paged=True, with_q=False)),
    Kind("context_parallel_t3k", Mesh()),
)


@dataclass(frozen=True)
class TimingPoint:
    """A device-time point: the FlashDecode call timed (ours at the package default numerics, ttnn's op at
    ``ttnn_numerics``: fidelity, fp32 DST) and the calibration point it stands for."""

    name: str
    label: str
    call: Decode
    ttnn_numerics: tuple[str, bool] = ("HiFi2", False)
    quick: bool = False
    calibration: tuple[str, ...] = field(default_factory=tuple)


#: The calibration points of ``perf/calibrate_model.py`` as device calls (tt-metal's configurations), then
#: the paged sweep's points (paged_timing_points).
TIMING_POINTS: tuple[TimingPoint, ...] = (
    TimingPoint("tg", "Galaxy Llama-70B decode SDPA per chip: B 8, 8q/1kv, D 128, S 4096, cur_pos 127, paged "
                "block 32, bfloat8_b, 8x4 cores", Decode(b=8, nh=8, nkv=1, d=128, s=4096, pos=(127,) * 8,
                                                        paged=True, block=32, grid=(8, 4), max_cores=4),
                quick=True, calibration=("isolated-op-6u", "in-model-6u")),
    TimingPoint("mla", "DeepSeek-V3 MLA decode: B 4, 128 q heads, D 576 / Dv 512, bf16 paged block 32, S 1024, "
                "k_chunk 128", Decode(b=4, nh=128, nkv=1, d=576, dv=512, s=1024, pos=(0, 170, 341, 512),
                                     paged=True, block=32, kv_dtype="bfloat16", k_chunk=128),
                ttnn_numerics=("HiFi4", False), calibration=("mla-deepseek-v3",)),
    TimingPoint("techreport", "FlashDecode tech report: B 8, 8q/1kv, D 128, 128K, bfloat8_b, chunk 512",
                Decode(b=8, nh=8, nkv=1, d=128, s=131072, pos=(131071,) * 8, k_chunk=512),
                calibration=("techreport-180gbps",)),
)


#: The paged sweep's shapes (perf/sweep_paged.py paged_points, its full list): (point, batch, q heads, KV heads,
#: S, grid, max_cores_per_head_batch, cur_pos or None for S - 1); D 128.
PAGED_SHAPES: tuple[tuple[str, int, int, int, int, tuple[int, int], int, Optional[int]], ...] = tuple(
    [("llama8b-n150", b, 32, 8, s, (8, 8), 16, None) for b in (1, 8, 32) for s in (4096, 8192, 32768, 131072)]
    + [("llama70b-t3k", b, 8, 1, 32768, (8, 8), 16, None) for b in (1, 32)]
    + [("galaxy-llama70b", 8, 8, 1, 128, (8, 4), 4, 127)])
#: The paged sweep's block sizes.
PAGED_BLOCKS = (32, 64)
#: The most K elements a timed point builds (its K and V are made on the host in float32, then on the device
#: in bfloat8_b): Llama-8B at B 32 and 128K (2^32 per tensor) is left to the model.
MAX_TIMED_KV_ELEMENTS = 1 << 30


def _seq_name(s: int) -> str:
    return f"{s // 1024}k" if s >= 1024 else str(s)


def paged_timing_points() -> tuple[TimingPoint, ...]:
    """The paged sweep's points (PAGED_SHAPES x PAGED_BLOCKS, those within MAX_TIMED_KV_ELEMENTS) as timing
    points: ours on a bank-local pool (kv_pages "key_row"), ttnn's op on its standard pool of tile pages, both at
    tt_transformers' decode numerics (HiFi2, fp32 DST) and at the same softmax exp: approximate where ttnn's
    kernel approximates it whatever exp_approx_mode says (half Q tiles: at most 16 q heads; perf/sweep_paged.py
    ttmetal_exp_approx), else accurate, as tt_transformers asks; random page tables."""
    out = []
    for point, b, nh, nkv, s, grid, cores, pos in PAGED_SHAPES:
        if b * nkv * s * 128 > MAX_TIMED_KV_ELEMENTS:
            continue
        for block in PAGED_BLOCKS:
            call = Decode(b=b, nh=nh, nkv=nkv, s=s, d=128, pos=(s - 1 if pos is None else pos,) * b, paged=True,
                          block=block, pages="key_row", grid=grid, max_cores=cores, fidelity="HiFi2",
                          fp32_dest=True, exp_approx=nh <= 16)
            out.append(TimingPoint(f"paged-{point}-b{b}-s{_seq_name(s)}-block{block}",
                                   f"paged sweep {point}: B {b}, {nh}q/{nkv}kv, D 128, S {s}, block {block}, "
                                   f"bfloat8_b, {grid[0]}x{grid[1]} cores; ours bank-local, ttnn's op on tile pages",
                                   call, ttnn_numerics=("HiFi2", True)))
    return tuple(out)


TIMING_POINTS += paged_timing_points()


def select(quick: bool, only: Optional[list[str]] = None) -> list[Kind]:
    """The kinds to run: all, the ``quick`` ones, or those named in ``only`` (ValueError naming an unknown one)."""
    if only:
        names = {k.name for k in KINDS}
        unknown = [n for n in only if n not in names]
        if unknown:
            raise ValueError(f"hwcheck: argument '--only': unknown program kinds {unknown}; known: {sorted(names)}")
        return [k for k in KINDS if k.name in only]
    return [k for k in KINDS if k.quick or not quick]
