"""Program and compute configuration of the decode operator, and model presets.

`SDPAProgramConfig` mirrors ``ttnn.SDPAProgramConfig`` (same field names and meaning for the
fields decode uses); `ComputeKernelConfig` mirrors ``ttnn.WormholeComputeKernelConfig``. Both
validate every field on construction and convert to and from the ttnn objects
(``to_ttnn()`` / ``from_ttnn(obj)``; ttnn is imported lazily and only there).

Grid (decided from the reference sheet, section 2, and ttnn's own op): ``compute_with_storage_grid_size``
None (the default) means "the device's grid", as in tt-metal's decode op without a program config
(``device.compute_with_storage_grid_size()``; 8x8 on an N150 with fast dispatch, 8x9 with slow
dispatch; 8x10 on a Galaxy's unharvested chips). On a device a grid (or sub-core rectangle) beyond the
device's grid is refused when the call is planned; on the host runtime the default grid is
``WORMHOLE_GRID`` (8x8, an N150's) and the limit the worker grid of one chip of the board it models
(`host_grid_limit`: ``BOARD_GRIDS``, the board named by the ``TTDECODE_BOARD`` environment variable,
default N150: 8x9, ``WORMHOLE_MAX_GRID``, as an N150 / N300 / T3K chip enables at most 72 of its 80 Tensix
cores; a Galaxy's chips are not harvested: 8x10). Use `SDPAProgramConfig.resolve_grid` for the grid in force.

``max_cores_per_head_batch`` None (the default) means "not set": ttnn's default 16 pieces per (user,
KV head), or, when that plan does not fit a core's L1 (e.g. DeepSeek-V3's absorbed MLA, 128 q heads
of D 576 over one latent head), the most pieces among 8, 4, 2, 1 whose plan fits
(``ttdecode.ops.flash_decode.plan.make_plan``). A value set by the user (or read from a ttnn config,
which always carries one) is used as given and an overflowing plan is refused by name.

Defaults differ from ttnn on purpose where accuracy is at stake: ttnn's decode defaults to
HiFi2, approximate exp and no fp32 accumulation; here the defaults are HiFi4, exact exp
(``math_approx_mode=False``; ``exp_approx_mode=None`` follows it) and fp32 accumulation in
DST (``fp32_dest_acc_en=True``), the configuration that fixed long-context accuracy upstream.
Pass a config explicitly to trade accuracy for speed.
"""

from __future__ import annotations

import dataclasses
import operator
import os
from dataclasses import dataclass
from typing import Any, Optional

from ttdecode.ttnn_env import require_ttnn

__all__ = [
    "WORMHOLE_GRID",
    "WORMHOLE_MAX_GRID",
    "BOARD_GRIDS",
    "BOARD_ENV",
    "host_board",
    "host_grid_limit",
    "MATH_FIDELITIES",
    "SDPAProgramConfig",
    "ComputeKernelConfig",
    "ModelPreset",
    "PRESETS",
    "get_preset",
]

#: The host runtime's default compute grid (columns, rows): ttnn's Wormhole N150 grid (fast dispatch).
WORMHOLE_GRID: tuple[int, int] = (8, 8)
#: The largest grid (columns, rows) of a harvested Wormhole chip (N150, N300, T3K): at most 72 of the 80
#: Tensix cores (8 columns x 9 rows; tt-metal tech_reports/GEMM_FLOPS; a mock N150 with slow dispatch reports 8x9).
WORMHOLE_MAX_GRID: tuple[int, int] = (8, 9)
#: The worker grid (columns, rows) of one chip of each board the host runtime models: harvested chips on
#: N150, N300 and T3K boards; a Galaxy's chips unharvested, every Tensix core of the 8 x 10 (tt-metal's
#: Galaxy Llama passes ``sub_core_grids`` over rows 0-9, e.g. ``((1, 0), (3, 9))``).
BOARD_GRIDS: dict[str, tuple[int, int]] = {"n150": WORMHOLE_MAX_GRID, "n300": WORMHOLE_MAX_GRID,
                                           "t3k": WORMHOLE_MAX_GRID, "galaxy": (8, 10)}
#: The environment variable naming the board the host runtime models (a key of BOARD_GRIDS; default n150).
BOARD_ENV = "TTDECODE_BOARD"
DEFAULT_BOARD = "n150"
#: max_cores_per_head_batch when the user sets none (ttnn.SDPAProgramConfig's default).
DEFAULT_MAX_CORES_PER_HEAD_BATCH = 16
#: Math fidelities of the matrix engine, fastest first.
MATH_FIDELITIES: tuple[str, ...] = ("LoFi", "HiFi2", "HiFi3", "HiFi4")
#: Most cores that may work on one (user, KV head): the reduction tree has at most 6 rounds.
MAX_CORES_PER_HEAD_BATCH_LIMIT = 64

Rect = tuple[tuple[int, int], tuple[int, int]]


def _fail(owner: str, arg: str, expected: str, got: object, exc: type = ValueError) -> Exception:
    """The uniform error: which argument, what was expected, what came."""
    return exc(f"{owner}: argument '{arg}': expected {expected}, got {got!r}")


def _int(owner: str, arg: str, value: object) -> int:
    """Return ``value`` as an int; bools and non-integers raise TypeError."""
    if isinstance(value, bool):
        raise _fail(owner, arg, "an integer", value, TypeError)
    try:
        return operator.index(value)
    except TypeError:
        raise _fail(owner, arg, "an integer", value, TypeError) from None


def _bool(owner: str, arg: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _fail(owner, arg, "a bool", value, TypeError)
    return value


def _pair(owner: str, arg: str, value: object) -> tuple[int, int]:
    """A pair of ints from a 2-sequence or any object with ``x``/``y`` (ttnn.CoreCoord)."""
    if hasattr(value, "x") and hasattr(value, "y"):
        return (_int(owner, f"{arg}.x", value.x), _int(owner, f"{arg}.y", value.y))
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:  # type: ignore[arg-type]
        raise _fail(owner, arg, "a pair (x, y) of ints", value, TypeError)
    a, b = value  # type: ignore[misc]
    return (_int(owner, f"{arg}[0]", a), _int(owner, f"{arg}[1]", b))


def host_board(board: Optional[str] = None) -> str:
    """The board the host runtime models: `board`, else the ``TTDECODE_BOARD`` environment variable, else
    n150. Raises ValueError naming where an unknown name came from."""
    where = "board" if board is not None else BOARD_ENV
    name = board if board is not None else os.environ.get(BOARD_ENV, "").strip().lower() or DEFAULT_BOARD
    if name not in BOARD_GRIDS:
        raise _fail("ttdecode", where, f"one of {sorted(BOARD_GRIDS)} (the board the host runtime models)", name)
    return name


def host_grid_limit(board: Optional[str] = None) -> tuple[tuple[int, int], str]:
    """The host runtime's grid limit (columns, rows) for the board it models (`host_board`) and the words
    naming it in a refusal (`SDPAProgramConfig.resolve_grid`'s `where`)."""
    name = host_board(board)
    return BOARD_GRIDS[name], (f"the largest Wormhole worker grid of a {name} chip, the board the host runtime "
                               f"models ({BOARD_ENV}: one of {', '.join(sorted(BOARD_GRIDS))})")


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


#: The K/V DRAM layouts the kernels read (SDPAProgramConfig.kv_pages).
KV_PAGES = ("tile", "key_row")


@dataclass(frozen=True)
class SDPAProgramConfig:
    """How the decode operator spreads its work over the cores (mirrors ``ttnn.SDPAProgramConfig``).

    Fields:
        compute_with_storage_grid_size: None = the device's grid (the host runtime: WORMHOLE_GRID), or
            (columns, rows) of the worker grid, at least 1 x 1; checked against the device's grid (the host
            runtime: the modelled board's, `host_grid_limit`) by `resolve_grid` when the call is planned.
        sub_core_grids: None, or a list of inclusive rectangles ``((x0, y0), (x1, y1))`` of
            worker cores to use instead of the full grid; rectangles lie inside
            ``compute_with_storage_grid_size`` (which must then be given) and do not overlap (stored as a
            tuple so the config stays hashable).
        q_chunk_size: any integer >= 0, as ttnn 0.81.1 accepts (its decode op validates nothing about it:
            1, 7, 16 and 48 all run tt-metal's sdpa_decode on a mock N150). Decode does not use it, like
            tt-metal's decode op (its program factory reads only k_chunk_size, the grid, the sub-core grids,
            max_cores_per_head_batch and exp_approx_mode of the program config); kept for ttnn round trips.
        k_chunk_size: positions of K/V per chunk; 0 = dynamic per user (from cur_pos), else a
            power of two that is a multiple of 32.
        exp_approx_mode: approximate exp in the softmax; None = follow the compute kernel
            config's ``math_approx_mode``.
        max_cores_per_head_batch: most cores (pieces) working on one (user, KV head), 1..64; None = not
            set: 16 (ttnn's default), or fewer when 16 does not fit L1 (module doc).
        kv_pages: what a K/V DRAM page holds. "tile" (ttnn's interleaved cache: one tile a page, pages
            round robin over the 12 banks); "key_row" (a ttdecode option, not in ttnn's config: one
            page per key-tile row of D / 32 tiles, round robin over the banks -- on a device a TILE
            tensor ND-sharded in DRAM with [1, 1, 32, D] shards, ``ttdecode.ttnn_backend.key_row_memory_config``).
            With "key_row" each (user, KV head) of a contiguous cache takes a multiple of 12 pieces (at
            most max_cores_per_head_batch, which must then be >= 12), piece i reading the key tiles
            t % p' == i, all from one bank; of a paged pool (bank-local) one piece per bank its key tiles
            can sit in, each reading the tiles of its own banks as the page table puts them.
        chunk_cap: the largest dynamic chunk in key tiles (a ttdecode option, not in ttnn's config):
            None = the cost model's choice for the shape (8, 16 or 32; ``ttdecode.ops.flash_decode.plan.make_plan``), or
            8, 16 or 32; with k_chunk_size 0 only. A plan that would not fit L1 with the model's cap
            names the cap that fits.
    """

    compute_with_storage_grid_size: Optional[tuple[int, int]] = None
    sub_core_grids: Optional[tuple[Rect, ...]] = None
    q_chunk_size: int = 0
    k_chunk_size: int = 0
    exp_approx_mode: Optional[bool] = None
    max_cores_per_head_batch: Optional[int] = None
    kv_pages: str = "tile"
    chunk_cap: Optional[int] = None

    def __post_init__(self) -> None:
        own = "SDPAProgramConfig"
        if self.kv_pages not in KV_PAGES:
            raise _fail(own, "kv_pages", f"one of {', '.join(repr(x) for x in KV_PAGES)}", self.kv_pages)
        if self.compute_with_storage_grid_size is not None:
            gx, gy = _pair(own, "compute_with_storage_grid_size", self.compute_with_storage_grid_size)
            if gx < 1 or gy < 1:
                raise _fail(own, "compute_with_storage_grid_size", "None (the device's grid) or (columns, rows) "
                            "of at least 1 x 1", (gx, gy))
            object.__setattr__(self, "compute_with_storage_grid_size", (gx, gy))
        if self.sub_core_grids is not None:
            if self.compute_with_storage_grid_size is None:
                raise _fail(own, "compute_with_storage_grid_size",
                            "the grid (columns, rows) the sub_core_grids lie in when sub_core_grids is given", None)
            object.__setattr__(self, "sub_core_grids",
                               self._check_rects(self.sub_core_grids, self.compute_with_storage_grid_size))
        q = _int(own, "q_chunk_size", self.q_chunk_size)
        if q < 0:
            raise _fail(own, "q_chunk_size", "an integer >= 0 (unused by decode, as in tt-metal's decode op)", q)
        k = _int(own, "k_chunk_size", self.k_chunk_size)
        if k != 0 and not (k % 32 == 0 and _is_pow2(k)):
            raise _fail(own, "k_chunk_size", "0 (dynamic) or a power of two that is a multiple of 32", k)
        if self.exp_approx_mode is not None:
            _bool(own, "exp_approx_mode", self.exp_approx_mode)
        m = self.max_cores_per_head_batch
        if m is not None:
            m = _int(own, "max_cores_per_head_batch", m)
            if not 1 <= m <= MAX_CORES_PER_HEAD_BATCH_LIMIT:
                raise _fail(own, "max_cores_per_head_batch",
                            f"None (not set) or an integer in 1..{MAX_CORES_PER_HEAD_BATCH_LIMIT}", m)
        if self.chunk_cap is not None:
            from ttdecode.core.split import CHUNK_CAPS  # here, not at the top: the CLI's --help imports no torch

            cap = _int(own, "chunk_cap", self.chunk_cap)
            if cap not in CHUNK_CAPS:
                raise _fail(own, "chunk_cap", f"None or one of {', '.join(map(str, sorted(CHUNK_CAPS)))} key tiles", cap)
            if k:
                raise _fail(own, "chunk_cap", "None with fixed chunks (k_chunk_size > 0)", cap)
        object.__setattr__(self, "q_chunk_size", q)
        object.__setattr__(self, "k_chunk_size", k)
        object.__setattr__(self, "max_cores_per_head_batch", m)

    @staticmethod
    def _check_rects(rects: object, grid: tuple[int, int]) -> tuple[Rect, ...]:
        own = "SDPAProgramConfig"
        if isinstance(rects, (str, bytes)) or not hasattr(rects, "__iter__"):
            raise _fail(own, "sub_core_grids", "None or a list of ((x0, y0), (x1, y1)) rectangles",
                        rects, TypeError)
        out: list[Rect] = []
        seen: dict[tuple[int, int], int] = {}
        for i, rect in enumerate(rects):  # type: ignore[attr-defined]
            arg = f"sub_core_grids[{i}]"
            if isinstance(rect, (str, bytes)) or not hasattr(rect, "__len__") or len(rect) != 2:
                raise _fail(own, arg, "a rectangle ((x0, y0), (x1, y1))", rect, TypeError)
            (x0, y0), (x1, y1) = _pair(own, arg, rect[0]), _pair(own, arg, rect[1])
            if not (0 <= x0 <= x1 < grid[0] and 0 <= y0 <= y1 < grid[1]):
                raise _fail(own, arg, f"an inclusive rectangle inside compute_with_storage_grid_size "
                            f"{grid}: 0 <= x0 <= x1 < {grid[0]} and 0 <= y0 <= y1 < {grid[1]}",
                            ((x0, y0), (x1, y1)))
            for y in range(y0, y1 + 1):
                for x in range(x0, x1 + 1):
                    if (x, y) in seen:
                        raise _fail(own, arg, f"no core shared with sub_core_grids[{seen[(x, y)]}]",
                                    f"core {(x, y)} in both")
                    seen[(x, y)] = i
            out.append(((x0, y0), (x1, y1)))
        if not out:
            raise _fail(own, "sub_core_grids", "None or at least one rectangle", [])
        return tuple(out)

    def resolve_grid(self, limit: tuple[int, int], default: tuple[int, int], where: str) -> "SDPAProgramConfig":
        """This config with its grid in force: `default` when the grid is None, else the grid given, which
        (and every sub-core rectangle) must lie within `limit` (columns, rows): the device's
        ``compute_with_storage_grid_size()`` on a device, `host_grid_limit` on the host runtime; `where`
        names the limit in the error (ValueError naming ``program_config.compute_with_storage_grid_size``)."""
        grid = self.compute_with_storage_grid_size
        if grid is None:
            return dataclasses.replace(self, compute_with_storage_grid_size=tuple(default))
        if grid[0] > limit[0] or grid[1] > limit[1]:
            raise _fail("ttdecode", "program_config.compute_with_storage_grid_size",
                        f"a grid within {where}: at most {limit[0]} columns x {limit[1]} rows", grid)
        return self

    def cores(self) -> list[tuple[int, int]]:
        """The worker cores ``(x, y)`` in use: sub-core rectangles in order (row-major inside
        each), else the whole grid row-major (a None grid counts as WORMHOLE_GRID, the host's default)."""
        if self.sub_core_grids is not None:
            return [(x, y) for (x0, y0), (x1, y1) in self.sub_core_grids
                    for y in range(y0, y1 + 1) for x in range(x0, x1 + 1)]
        gx, gy = self.compute_with_storage_grid_size or WORMHOLE_GRID
        return [(x, y) for y in range(gy) for x in range(gx)]

    @property
    def num_cores(self) -> int:
        """Number of worker cores in use."""
        return len(self.cores())

    def resolved_exp_approx_mode(self, compute: "ComputeKernelConfig") -> bool:
        """The exp mode in force: ``exp_approx_mode``, or the compute config's ``math_approx_mode``."""
        return compute.math_approx_mode if self.exp_approx_mode is None else self.exp_approx_mode

    def to_ttnn(self) -> Any:
        """Build the equivalent ``ttnn.SDPAProgramConfig`` (kv_pages "key_row" has none: ttnn's op reads
        interleaved caches only)."""
        if self.kv_pages != "tile":
            raise _fail("SDPAProgramConfig.to_ttnn", "kv_pages",
                        "'tile' (ttnn.SDPAProgramConfig has no K/V page option)", self.kv_pages)
        if self.chunk_cap is not None:
            raise _fail("SDPAProgramConfig.to_ttnn", "chunk_cap",
                        "None (ttnn.SDPAProgramConfig has no chunk cap option)", self.chunk_cap)
        if self.compute_with_storage_grid_size is None:
            raise _fail("SDPAProgramConfig.to_ttnn", "compute_with_storage_grid_size",
                        "a grid (columns, rows): ttnn.SDPAProgramConfig needs one (None means the device's grid: "
                        "pass device.compute_with_storage_grid_size())", None)
        ttnn = require_ttnn()
        m = self.max_cores_per_head_batch
        kwargs: dict[str, Any] = dict(
            compute_with_storage_grid_size=ttnn.CoreCoord(*self.compute_with_storage_grid_size),
            q_chunk_size=self.q_chunk_size,
            k_chunk_size=self.k_chunk_size,
            exp_approx_mode=self.exp_approx_mode,
            max_cores_per_head_batch=DEFAULT_MAX_CORES_PER_HEAD_BATCH if m is None else m,
        )
        if self.sub_core_grids is not None:
            kwargs["sub_core_grids"] = ttnn.CoreRangeSet(
                [ttnn.CoreRange(ttnn.CoreCoord(*a), ttnn.CoreCoord(*b)) for a, b in self.sub_core_grids])
        return ttnn.SDPAProgramConfig(**kwargs)

    @classmethod
    def from_ttnn(cls, obj: Any) -> "SDPAProgramConfig":
        """Read a ``ttnn.SDPAProgramConfig``. Options this operator does not implement
        (``max_k_splits != 1``, ``matmul_math_fidelity``, ``segmented_accumulation``) are refused."""
        own = "SDPAProgramConfig.from_ttnn"
        needed = ("compute_with_storage_grid_size", "sub_core_grids", "q_chunk_size", "k_chunk_size",
                  "exp_approx_mode", "max_cores_per_head_batch")
        if not all(hasattr(obj, a) for a in needed):
            raise _fail(own, "obj", "a ttnn.SDPAProgramConfig", type(obj).__name__, TypeError)
        if getattr(obj, "max_k_splits", 1) != 1:
            raise _fail(own, "obj.max_k_splits", "1 (K splits are not implemented)", obj.max_k_splits)
        if getattr(obj, "matmul_math_fidelity", None) is not None:
            raise _fail(own, "obj.matmul_math_fidelity",
                        "None (set math_fidelity in the compute kernel config)", obj.matmul_math_fidelity)
        if getattr(obj, "segmented_accumulation", False):
            raise _fail(own, "obj.segmented_accumulation", "False (not implemented)", True)
        rects = None
        if obj.sub_core_grids is not None:
            rects = [((r.start.x, r.start.y), (r.end.x, r.end.y)) for r in obj.sub_core_grids.ranges()]
        g = obj.compute_with_storage_grid_size
        return cls(compute_with_storage_grid_size=(g.x, g.y), sub_core_grids=rects,
                   q_chunk_size=obj.q_chunk_size, k_chunk_size=obj.k_chunk_size,
                   exp_approx_mode=obj.exp_approx_mode,
                   max_cores_per_head_batch=obj.max_cores_per_head_batch)

    @classmethod
    def coerce(cls, value: object, arg: str = "program_config") -> "SDPAProgramConfig":
        """None -> default config; ours -> itself; a ttnn config -> converted; else TypeError."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if type(value).__name__ == "SDPAProgramConfig":
            return cls.from_ttnn(value)
        raise _fail("ttdecode", arg, "None, ttdecode.config.SDPAProgramConfig or ttnn.SDPAProgramConfig",
                    type(value).__name__, TypeError)


@dataclass(frozen=True)
class ComputeKernelConfig:
    """Compute-kernel settings (mirrors ``ttnn.WormholeComputeKernelConfig``).

    Fields (defaults chosen for accuracy, see the module doc):
        math_fidelity: "LoFi" | "HiFi2" | "HiFi3" | "HiFi4" (default "HiFi4": full bf16 products).
        math_approx_mode: approximate SFPU functions (exp, reciprocal); default False.
        fp32_dest_acc_en: accumulate in fp32 in DST (halves DST to 8 tiles); default True.
        packer_l1_acc: accumulate in L1 in the packer; default False (decode does not use it).
    """

    math_fidelity: str = "HiFi4"
    math_approx_mode: bool = False
    fp32_dest_acc_en: bool = True
    packer_l1_acc: bool = False

    def __post_init__(self) -> None:
        own = "ComputeKernelConfig"
        if not isinstance(self.math_fidelity, str):
            raise _fail(own, "math_fidelity", f"one of {list(MATH_FIDELITIES)}", self.math_fidelity, TypeError)
        if self.math_fidelity not in MATH_FIDELITIES:
            raise _fail(own, "math_fidelity", f"one of {list(MATH_FIDELITIES)}", self.math_fidelity)
        for name in ("math_approx_mode", "fp32_dest_acc_en", "packer_l1_acc"):
            _bool(own, name, getattr(self, name))

    def to_ttnn(self) -> Any:
        """Build the equivalent ``ttnn.WormholeComputeKernelConfig``."""
        ttnn = require_ttnn()
        return ttnn.WormholeComputeKernelConfig(
            math_fidelity=getattr(ttnn.MathFidelity, self.math_fidelity),
            math_approx_mode=self.math_approx_mode,
            fp32_dest_acc_en=self.fp32_dest_acc_en,
            packer_l1_acc=self.packer_l1_acc,
        )

    @classmethod
    def from_ttnn(cls, obj: Any) -> "ComputeKernelConfig":
        """Read a ``ttnn.WormholeComputeKernelConfig``. Its default fidelity ``Invalid`` (meaning
        "the op's default") maps to this class's default, HiFi4; ``dst_full_sync_en`` is refused."""
        own = "ComputeKernelConfig.from_ttnn"
        needed = ("math_fidelity", "math_approx_mode", "fp32_dest_acc_en", "packer_l1_acc")
        if not all(hasattr(obj, a) for a in needed):
            raise _fail(own, "obj", "a ttnn.WormholeComputeKernelConfig", type(obj).__name__, TypeError)
        if getattr(obj, "dst_full_sync_en", False):
            raise _fail(own, "obj.dst_full_sync_en", "False (full-sync DST is not implemented)", True)
        name = getattr(obj.math_fidelity, "name", str(obj.math_fidelity))
        fidelity = cls.math_fidelity if name == "Invalid" else name
        return cls(math_fidelity=fidelity, math_approx_mode=obj.math_approx_mode,
                   fp32_dest_acc_en=obj.fp32_dest_acc_en, packer_l1_acc=obj.packer_l1_acc)

    @classmethod
    def coerce(cls, value: object, arg: str = "compute_kernel_config") -> "ComputeKernelConfig":
        """None -> default config; ours -> itself; a ttnn config -> converted; else TypeError."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if type(value).__name__ == "WormholeComputeKernelConfig":
            return cls.from_ttnn(value)
        raise _fail("ttdecode", arg,
                    "None, ttdecode.config.ComputeKernelConfig or ttnn.WormholeComputeKernelConfig",
                    type(value).__name__, TypeError)


@dataclass(frozen=True)
class ModelPreset:
    """Per-chip attention shape of a model deployment.

    Fields: ``num_heads`` (NH, query heads on one chip), ``num_kv_heads`` (NKV), ``head_dim`` (D),
    ``grid`` (compute grid per chip), ``kv_dtype`` (KV-cache format used in production),
    ``description``; ``head_dim_v`` (Dv) set means MLA: no V tensor, V = K[..., :Dv].
    """

    num_heads: int
    num_kv_heads: int
    head_dim: int
    grid: tuple[int, int]
    kv_dtype: str
    description: str
    head_dim_v: Optional[int] = None

    @property
    def mla(self) -> bool:
        """True for an MLA shape (V is the first head_dim_v columns of K)."""
        return self.head_dim_v is not None

    def program_config(self, **overrides: Any) -> SDPAProgramConfig:
        """A program config on this preset's grid (fields overridable)."""
        kwargs: dict[str, Any] = {"compute_with_storage_grid_size": self.grid}
        kwargs.update(overrides)
        return SDPAProgramConfig(**kwargs)


#: Presets for the CLI and demo. Llama-3.1 8B has 32 query and 8 KV heads, 70B 64 and 8, both D=128;
#: on T3K the heads are split over 8 chips (reference sheet, section 3), batch whole on every chip.
PRESETS: dict[str, ModelPreset] = {
    "llama-3.1-8b-n150": ModelPreset(32, 8, 128, (8, 8), "bfloat8_b",
                                     "Llama-3.1-8B on one N150 chip: 32 q heads, 8 KV heads"),
    "llama-3.1-8b-t3k": ModelPreset(4, 1, 128, (8, 8), "bfloat8_b",
                                    "Llama-3.1-8B on T3K, per chip (8 chips): 4 q heads, 1 KV head"),
    "llama-3.1-70b-t3k": ModelPreset(8, 1, 128, (8, 8), "bfloat8_b",
                                     "Llama-3.1-70B on T3K, per chip (8 chips): 8 q heads, 1 KV head"),
    # DeepSeek-V3 decode with absorbed MLA: 128 q heads over one latent KV head of D = 576 (512 latent +
    # 64 RoPE), V = the 512 latent columns. Two per-chip splits of the heads: 8 ways, and none.
    "deepseek-v3-mla-16q": ModelPreset(16, 1, 576, (8, 8), "bfloat8_b",
                                       "DeepSeek-V3 MLA, q heads split 8 ways: 16 q heads, 1 latent KV head, "
                                       "D=576, Dv=512", head_dim_v=512),
    "deepseek-v3-mla-128q": ModelPreset(128, 1, 576, (8, 8), "bfloat8_b",
                                        "DeepSeek-V3 MLA, all 128 q heads on one chip, 1 latent KV head, "
                                        "D=576, Dv=512", head_dim_v=512),
}


def get_preset(name: str) -> ModelPreset:
    """Look a preset up by name; unknown names raise ValueError listing the known ones."""
    if not isinstance(name, str) or name not in PRESETS:
        raise _fail("ttdecode", "preset", f"one of {sorted(PRESETS)}", name)
    return PRESETS[name]
