"""An arbiter for the bf16-DST question (tech_report/flashdecode.md 9.1), independent of ttdecode's runtime.

A numpy model of the roundings two decode-attention algorithms make when the Wormhole DST is 16-bit
(`fp32_dest_acc_en=False`), at the points where Tenstorrent's ISA documentation
(tenstorrent/tt-isa-documentation, WormholeB0/TensixTile/TensixCoprocessor/) says a value is rounded:

* SrcA / SrcB hold bf16 exactly (bf16 and bfp8/bfp4 unpack to BF16 losslessly: SrcASrcB.md "Data types");
  the multipliers see one slice of each operand per fidelity phase (SrcASrcB.md "Fidelity phases",
  ELWMUL.md `SrcAFidelityBits` / `SrcBFidelityBits`): SrcA phase bit 0 = implicit 1 + top 4 mantissa bits,
  else the next bits; SrcB phase bit 1 = implicit 1 + top 6 mantissa bits, else the rest. HiFi4 runs the
  phases 0, 1, 2, 3, each one a separate instruction.
* MVMUL / GAPOOL (MVMUL.md, GAPOOL.md functional model): per instruction, the 16 products of the slices are
  summed in fp32, added to DST in fp32 and written back with `RoundToBF16` when DST is 16-bit. ELWMUL /
  ELWADD (ELWMUL.md, ELWADD.md): the same write-back, one rounding per instruction (per fidelity phase for
  ELWMUL). The docs do not define `RoundToBF16`'s mode: the arbiter runs both readings, round to nearest
  even (`rne`) and truncation toward zero (`rtz`).
* SFPSTORE into a 16-bit DST (SFPSTORE.md `ToBF16`): denormals flushed, then *truncated* toward zero. An
  SFPU result is therefore truncated unless the LLK function rounds it first (facts read from the ttnn
  0.81.1 wheel's LLK, not copied: the bf16 templates of the binary mul and addcmul round to bf16 before
  the store, binary add/sub only with DstRoundingMode::NearestEven, the scalar multiply never).
* SFPU arithmetic is fp32 (SFPMAD.md: one RNE rounding); SFPSWAP max is exact.
* The packer from a 16-bit DST to a bf16 CB moves the bits unchanged (nothing left to round); the
  unpackers bring a bf16 CB into SrcA/SrcB exactly.

Modelled approximately (the same way for both algorithms, so they do not decide the comparison): the bf16
exp and reciprocal are exact functions rounded to bf16 (the LLK's exp_21f / one-Newton-step reciprocal
are a few bf16 ulps at most); a 16-term fp32 sum is computed exactly and rounded once to fp32 (a
sequential fp32 sum differs by ~2^-24 relative, far below the bf16 roundings studied here).

The two algorithms, counts and order only:

* ``ours`` = kernels/flash_decode/compute.cpp with a 16-bit DST as the factory builds it
  (ttdecode/ops/flash_decode/program_factory.py: every intermediate CB bf16), one piece per (user, KV head), chunks
  of 16 key tiles from the first key. The defaults are the kernel before its bf16-DST fix: per chunk,
  S = Q.K^T (MVMULs into DST), S *= scale (SFPU, truncating store), masked keys -inf, m = max(m_old,
  rowmax S), alpha = exp(trunc(m_old - m)), P = exp(trunc(S - m)) (bf16), then in one DST block
  l = rne(l_old * alpha) and O = rne(O_old * alpha) (SFPU mul, bf16 template) onto which the MVMULs of
  P x ones and P . V of every key tile of the chunk accumulate (``accumulate="running"``). At the end
  out = rne(O * rne(1/l)).
  ``OURS_NOW`` is the kernel since: P . V and P x ones of the chunk accumulate in fresh DST tiles (from
  0), then O = O_c + O_old * alpha and l likewise in one SFPU multiply-add rounded once to bf16 (addcmul's
  bf16 template); the scores are scaled as s + ((scale - 1) * s) * 1 (addcmul: rounded, not truncated) and
  S - m is rounded to nearest even before the store.
* ``ttmetal`` = sdpa_flash_decode.cpp of the ttnn 0.81.1 wheel (compute_common.hpp helpers): per chunk,
  S = Q.K^T into a fresh DST, packed bf16; m = max(rowmax S, m_prev); P = exp(trunc(rne(S - m) * scale))
  (FPU subtract with a column broadcast, SFPU scale and exp); l_c = the SUM row reduce of P (MVMULs of P
  in SrcB by a 1.0 column scaler in SrcA, fresh DST); O_c = P . V (fresh DST); from the second chunk
  e = exp(rne(m_prev - m) * scale), l = rne(l_c + ELWMUL(l_prev, e)), O = rne(O_c + ELWMUL(O_acc, e))
  (ELWMUL per fidelity phase, then ELWADD); at the end out = ELWMUL(O, rne(1/l)). (With 16x32 q tiles the
  shipped kernel takes the approximate exp whatever exp_approx_mode says; modelled here with the exact
  exp like ours, so that the comparison is about the DST arithmetic.)

Run (builds the inputs with perf/bf16_dst_case.py, which uses ttdecode only to quantize K/V and for the
float64 reference; the model functions below import nothing from ttdecode):

    PYTHONPATH=. python tools/bf16_dst_arbiter.py --runtime        # llama3.1-c-paged_64, every KV head
    PYTHONPATH=. python tools/bf16_dst_arbiter.py --kv-heads 1 --q-heads 4 --grid 1 1 --seeds 8 --runtime

Findings (tech_report/flashdecode.md 9.1): the runtime agrees with the model of our kernel (before
the fix: rel L2 0.1746 both, one KV group, seed 0); our kernel was the weaker algorithm (0.62 vs tt-metal's
0.039 on the full case), because its chunk products accumulated onto the running O and l.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PHASES = {"LoFi": (0,), "HiFi2": (0, 1), "HiFi3": (0, 1, 2), "HiFi4": (0, 1, 2, 3)}


# ---- number formats ----------------------------------------------------------------------------

def _bits(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, np.float32)).view(np.uint32)


def _from_bits(u: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(u.astype(np.uint32)).view(np.float32).astype(np.float64)


def f32(x) -> np.ndarray:
    """fp32 rounding (RNE), as float64."""
    return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)


def _flush(u: np.ndarray) -> np.ndarray:
    """Denormals (exponent field 0) to signed zero."""
    return np.where((u & 0x7F800000) == 0, u & 0x80000000, u)


def bf16_rne(x) -> np.ndarray:
    """fp32 value -> bf16, round to nearest, ties to even; denormals flushed."""
    u = _flush(_bits(f32(x))).astype(np.uint64)
    finite = (u & 0x7F800000) != 0x7F800000
    r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return _from_bits(np.where(finite, r, u & 0xFFFF0000))


def bf16_rna(x) -> np.ndarray:
    """fp32 value -> bf16, round to nearest, ties away from zero (SFPSTOCHRND, the packer)."""
    u = _flush(_bits(f32(x))).astype(np.uint64)
    finite = (u & 0x7F800000) != 0x7F800000
    r = (u + 0x8000) & 0xFFFF0000
    return _from_bits(np.where(finite, r, u & 0xFFFF0000))


def bf16_rtz(x) -> np.ndarray:
    """fp32 value -> bf16 truncated toward zero, denormals flushed (SFPSTORE.md ToBF16)."""
    return _from_bits(_flush(_bits(f32(x))) & 0xFFFF0000)


ROUNDINGS = {"rne": bf16_rne, "rtz": bf16_rtz}


def srca_slice(x, phase: int) -> np.ndarray:
    """The part of SrcA operand x (bf16 values) a fidelity phase multiplies (ELWMUL.md SrcAFidelityBits)."""
    u = _bits(x)
    if phase & 1 == 0:
        return _from_bits(u & 0xFFF80000)
    return np.asarray(x, np.float64) - _from_bits(u & 0xFFF83FFF)


def srcb_slice(x, phase: int) -> np.ndarray:
    """The part of SrcB operand x a fidelity phase multiplies (ELWMUL.md SrcBFidelityBits)."""
    u = _bits(x)
    if phase & 2 == 0:
        return _from_bits(u & 0xFFFE0000)
    return np.asarray(x, np.float64) - _from_bits(u & 0xFFFE1FFF)


# ---- FPU instructions with a 16-bit DST ----------------------------------------------------------

@dataclass(frozen=True)
class Fpu:
    phases: tuple[int, ...]
    rnd: callable  # RoundToBF16 reading

    def write(self, dst, x):
        """DST = RoundToBF16(fp32(x) + DST) (MVMUL/ELWMUL/ELWADD write-back)."""
        return self.rnd(f32(f32(x) + dst))

    def matmul(self, dst, a_b, a_a):
        """DST[r, c] += SrcB @ SrcA over one 32-deep tile of k: a_b [R, 32] (in0, SrcB), a_a [32, C]
        (in1, SrcA). Phases outer, the two 16-deep MVMULs inner; one rounding per MVMUL."""
        for ph in self.phases:
            sb, sa = srcb_slice(a_b, ph), srca_slice(a_a, ph)
            for h in (0, 16):
                dst = self.write(dst, sb[:, h:h + 16] @ sa[h:h + 16, :])
        return dst

    def matmul_keys(self, dst, p, v):
        """dst [R, C] += p [R, 32 t] @ v [32 t, C], key tile by key tile (P . V, P x ones, the SUM reduce)."""
        for j in range(0, p.shape[1], 32):
            dst = self.matmul(dst, p[:, j:j + 32], v[j:j + 32])
        return dst

    def eltmul(self, a, b):
        """ELWMUL into a fresh DST: per phase DST = R(DST + SrcA slice * SrcB slice); a in SrcA (in0)."""
        dst = np.zeros(np.broadcast(a, b).shape)
        for ph in self.phases:
            dst = self.write(dst, srca_slice(a, ph) * srcb_slice(b, ph))
        return dst

    def add(self, a, b):
        """ELWADD / ELWSUB (LoFi only): one rounding."""
        return self.rnd(f32(f32(a) + f32(b)))


def scores(fpu: Fpu, q, k):
    """S [G, N] = Q [G, D] . K[N, D]^T into a fresh 16-bit DST: per 32-deep d tile, phases, halves."""
    g, d = q.shape
    s = np.zeros((g, k.shape[0]))
    for d0 in range(0, d, 32):
        s = fpu.matmul(s, q[:, d0:d0 + 32], k[:, d0:d0 + 32].T)
    return s


def bf16_exp(x):
    """The bf16 exp (approximated: exact, rounded to bf16 ties away as the LLK's final SFPSTOCHRND)."""
    with np.errstate(over="ignore"):
        return bf16_rna(np.exp(x))


def _tiles(n: int) -> int:
    return (n + 31) // 32


# ---- the two algorithms ----------------------------------------------------------------------------

def ours(q, k, v, *, scale, chunk_tiles=16, fidelity="HiFi4", rounding="rne", accumulate="running",
         scale_store="rtz", sub_store="rtz"):
    """Our compute kernel with a 16-bit DST for one (user, KV head) on one core: q [G, D] (bf16 values),
    k [N, D], v [N, Dv] (the attended keys). Returns out [G, Dv] (bf16 values). `scale_store` /
    `sub_store`: how the scaled scores and S - m reach the 16-bit DST: "rtz" = one SFPU multiply / subtract
    and a plain SFPSTORE (truncation; the kernel before its bf16-DST fix), "addcmul" = s + ((scale - 1) * s) * 1
    rounded to nearest (ties away) before the store, "rne" = the subtraction rounded to nearest even
    (DstRoundingMode::NearestEven) before the store (the kernel after that fix)."""
    fpu = Fpu(PHASES[fidelity], ROUNDINGS[rounding])
    sm1 = f32(f32(scale) - 1.0)
    st_scale = {"rtz": lambda x: bf16_rtz(x * f32(scale)),
                "addcmul": lambda x: bf16_rna(f32(x + f32(x * sm1)))}[scale_store]  # s + ((scale-1) s) 1
    st_sub = {"rtz": bf16_rtz, "rne": bf16_rne}[sub_store]
    n = k.shape[0]
    nt = _tiles(n)
    pad = nt * 32 - n
    kp = np.concatenate([k, np.zeros((pad, k.shape[1]))])
    vp = np.concatenate([v, np.zeros((pad, v.shape[1]))])
    m = l = o = None
    for c0 in range(0, nt, chunk_tiles):
        ks = slice(c0 * 32, min(nt, c0 + chunk_tiles) * 32)
        s = st_scale(scores(fpu, q, kp[ks]))               # SFPU scale, then the store
        valid = np.arange(ks.start, ks.stop) < n
        s = np.where(valid[None, :], s, -np.inf)          # mask tile: SFPU add of -inf / 0
        m_new = s.max(axis=1, keepdims=True)
        if m is not None:
            m_new = np.maximum(m_new, m)
        with np.errstate(invalid="ignore"):
            p = bf16_exp(st_sub(s - m_new))                 # SFPU sub, the store, exp -> bf16
        p = np.where(valid[None, :], p, 0.0)
        ones = np.ones((p.shape[1], 1))
        if m is None:
            l = fpu.matmul_keys(np.zeros((q.shape[0], 1)), p, ones)
            o = fpu.matmul_keys(np.zeros((q.shape[0], v.shape[1])), p, vp[ks])
        else:
            alpha = bf16_exp(st_sub(m - m_new))
            if accumulate == "running":
                l = fpu.matmul_keys(bf16_rne(l * alpha), p, ones)         # SFPU mul (rne), MVMULs onto it
                o = fpu.matmul_keys(bf16_rne(o * alpha), p, vp[ks])
            else:
                l_c = fpu.matmul_keys(np.zeros_like(l), p, ones)          # fresh DST
                o_c = fpu.matmul_keys(np.zeros_like(o), p, vp[ks])
                l = bf16_rna(f32(l * alpha + l_c))                          # addcmul: one SFPMAD, one rounding
                o = bf16_rna(f32(o * alpha + o_c))
        m = m_new
    inv = bf16_rne(1.0 / l)
    return bf16_rne(o * inv)


def ttmetal(q, k, v, *, scale, chunk_tiles=16, fidelity="HiFi4", rounding="rne"):
    """tt-metal's sdpa_flash_decode.cpp with a 16-bit DST for one (user, KV head) on one core (the
    same inputs as `ours`). Returns out [G, Dv] (bf16 values)."""
    fpu = Fpu(PHASES[fidelity], ROUNDINGS[rounding])
    n = k.shape[0]
    nt = _tiles(n)
    pad = nt * 32 - n
    kp = np.concatenate([k, np.zeros((pad, k.shape[1]))])
    vp = np.concatenate([v, np.zeros((pad, v.shape[1]))])
    scale32 = f32(scale)
    scale_bf16 = _from_bits(_bits(scale32) & 0xFFFF0000)  # sub_exp_block's exp takes the bf16 scale
    m = l = o = None
    for c0 in range(0, nt, chunk_tiles):
        ks = slice(c0 * 32, min(nt, c0 + chunk_tiles) * 32)
        s = scores(fpu, q, kp[ks])                                  # packed bf16 (nothing to round)
        valid = np.arange(ks.start, ks.stop) < n
        s = np.where(valid[None, :], s, -np.inf)                    # ELWADD of the causal mask
        m_new = s.max(axis=1, keepdims=True)
        if m is not None:
            m_new = np.maximum(m_new, m)
        with np.errstate(invalid="ignore"):
            x = fpu.add(s, -m_new)                                  # sub_tiles_bcast_cols (FPU)
        p = bf16_exp(bf16_rtz(x * scale32))                         # mul_unary_tile (SFPU), exp
        p = np.where(valid[None, :], p, 0.0)
        ones = np.ones((p.shape[1], 1))
        l_c = fpu.matmul_keys(np.zeros((q.shape[0], 1)), p, ones)  # reduce SUM: MVMULs, 1.0 column scaler
        o_c = fpu.matmul_keys(np.zeros((q.shape[0], v.shape[1])), p, vp[ks])
        if m is None:
            l, o = l_c, o_c
        else:
            e = bf16_exp(bf16_rtz(fpu.add(m, -m_new) * scale_bf16))
            l = fpu.add(l_c, fpu.eltmul(l, e))
            o = fpu.add(fpu.eltmul(o, e), o_c)
        m = m_new
    inv = bf16_rne(1.0 / l)
    return fpu.eltmul(o, inv)


# ---- driver ----------------------------------------------------------------------------------------

def rel_l2(a, r) -> float:
    return float(np.linalg.norm((a - r).ravel()) / np.linalg.norm(r.ravel()))


def pcc(a, r) -> float:
    a, r = a.ravel() - a.mean(), r.ravel() - r.mean()
    return float(a @ r / np.sqrt((a @ a) * (r @ r)))


#: Our kernel's bf16-DST path since its bf16-DST fix (the default of `ours` is the kernel before it).
OURS_NOW = dict(accumulate="fresh", scale_store="addcmul", sub_store="rne")


def arbitrate(q, k, v, ref, *, n_keys, scale, group, chunk_ours=16, chunk_tt=16, fidelity="HiFi4"):
    """Every model over every KV head: q [NH, D], k/v [NKV, S, D] (logical order), ref [NH, Dv].
    Returns {name: out [NH, Dv]}."""
    nkv = k.shape[0]
    def mk(fn, **kw):
        return lambda qq, kk, vv: fn(qq, kk, vv, scale=scale, fidelity=fidelity, **kw)

    models = {}
    for rnd in ("rne", "rtz"):
        models[f"ours before ({rnd})"] = mk(ours, chunk_tiles=chunk_ours, rounding=rnd)
        models[f"ours now ({rnd})"] = mk(ours, chunk_tiles=chunk_ours, rounding=rnd, **OURS_NOW)
        models[f"tt-metal ({rnd})"] = mk(ttmetal, chunk_tiles=chunk_tt, rounding=rnd)
    outs = {}
    for name, fn in models.items():
        out = np.zeros_like(ref)
        for h in range(nkv):
            rows = slice(h * group, (h + 1) * group)
            out[rows] = fn(q[rows], k[h, :n_keys], v[h, :n_keys])
        outs[name] = out
    return outs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=32768)
    ap.add_argument("--pos", type=int, default=31132)
    ap.add_argument("--grid", type=int, nargs=2, default=(8, 1), help="the runtime run's grid")
    ap.add_argument("--plain", action="store_true", help="unpaged cache")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=1, help="inputs drawn with seeds seed .. seed + seeds - 1")
    ap.add_argument("--chunk-tt", type=int, default=16, help="tt-metal's chunk in key tiles (16 = 512 keys)")
    ap.add_argument("--runtime", action="store_true", help="also run our kernels on the host runtime")
    a = ap.parse_args(argv)

    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    from perf.bf16_dst_case import logical_inputs, run

    g = a.q_heads // a.kv_heads
    stats: dict[str, list] = {}
    for seed in range(a.seed, a.seed + a.seeds):
        q, k, v, ref = logical_inputs(q_heads=a.q_heads, kv_heads=a.kv_heads, seq_len=a.seq_len, pos=a.pos,
                                      seed=seed, paged=not a.plain)
        scale = 1.0 / np.sqrt(q.shape[-1])
        outs = arbitrate(q, k, v, ref, n_keys=a.pos + 1, scale=scale, group=g, chunk_tt=a.chunk_tt)
        if a.runtime:
            for fp32 in (False, True):
                r = run(q_heads=a.q_heads, kv_heads=a.kv_heads, seq_len=a.seq_len, pos=a.pos, grid=tuple(a.grid),
                        paged=not a.plain, fp32_dest=fp32, seed=seed)
                outs[f"runtime, {'fp32' if fp32 else 'bf16'} DST"] = r["out"].double().numpy().reshape(ref.shape)
        for name, out in outs.items():
            heads = [rel_l2(out[h * g:(h + 1) * g], ref[h * g:(h + 1) * g]) for h in range(a.kv_heads)]
            stats.setdefault(name, []).append((rel_l2(out, ref), pcc(out, ref), max(heads)))
        if a.runtime:
            ours_now = outs["ours now (rne)"]
            rt = outs["runtime, bf16 DST"]
            stats.setdefault("runtime bf16 vs arbiter 'ours now (rne)'", []).append(
                (rel_l2(rt, ours_now), pcc(rt, ours_now), float(np.mean(rt != ours_now))))
    print(f"{a.q_heads}q/{a.kv_heads}kv, {a.pos + 1} keys per KV head on one core, HiFi4, 16-bit DST, "
          f"{'plain' if a.plain else 'paged'}, seeds {a.seed}..{a.seed + a.seeds - 1}, "
          f"tt-metal chunk {a.chunk_tt} tiles")
    print("| model | rel L2 (mean over seeds) | PCC (mean) | PCC (worst) | worst KV head rel L2 |")
    print("|---|---|---|---|---|")
    for name, rows in stats.items():
        e, c, w = (np.array(x) for x in zip(*rows))
        if name.startswith("runtime bf16 vs"):
            print(f"| {name} | {e.mean():.3e} | {c.mean():.6f} | {c.min():.6f} | (outputs differing: "
                  f"{100 * w.mean():.1f}%) |")
        else:
            print(f"| {name} | {e.mean():.3e} | {c.mean():.6f} | {c.min():.6f} | {w.max():.3e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
