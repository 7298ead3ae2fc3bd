"""The cost model's calibration against tt-metal's measurements, and its sensitivity (perf/README.md,
"Calibration"). tt-metal's decode structure as data (ttdecode.perf_model.ttmetal_structure) goes through the
cost model (ttdecode.perf_model.costmodel) at the points tt-metal published; each row prints the measured figure,
the model's and the error. Then the Galaxy point again with each assumed or measured constant halved
and doubled. All model figures are MODEL ESTIMATES. Seconds, no kernel runs.

    PYTHONPATH=. python perf/calibrate_model.py
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttdecode.perf_model.costmodel import COST, CostConstants, evaluate  # noqa: E402
from ttdecode.perf_model.ttmetal_structure import TTMetalShape, ttmetal_work  # noqa: E402

#: tt-metal's measured device times of the Galaxy Llama-70B decode op (REFERENCE.md section 4), us.
TG_MEASURED_US = {"PR #37004 (tree reduction)": 7.4, "perf unit test 6U": 8.18,
                  "decoder perf target 6U": 9.18, "decoder perf target 4U": 10.2}
#: The FlashDecode tech report's best K/V read rate (REFERENCE.md section 3), GB/s.
TECH_REPORT_GBPS = 180.0
#: Constants whose halving / doubling the sensitivity table shows.
SENSITIVE = ("launch_cycles", "init_cycles", "tile_call_cycles", "core_read_plateau_bytes_per_cycle",
             "dram_latency_cycles", "unpack_bytes_per_cycle", "packer_bytes_per_cycle", "cb_handshake_cycles")

TG = TTMetalShape(8, 8, 1, 128, 127, 128, grid=(8, 4), max_cores_per_head_batch=4)


def tg_us(c: CostConstants = COST) -> float:
    """tt-metal's structure at the Galaxy point under constants `c`, us."""
    works, red, _ = ttmetal_work(TG)
    return evaluate(works, red, "HiFi2", c).total_us


def main() -> int:
    base = tg_us()
    print("| point | measured | model (tt-metal structure) | error |")
    print("|---|---|---|---|")
    for name, us in TG_MEASURED_US.items():
        print(f"| Galaxy Llama-70B per chip, B 8, 8q/1kv, D 128, cur_pos 127, 8x4, HiFi2 | {us} us ({name}) | "
              f"{base:.1f} us | {100 * (base - us) / us:+.0f}% |")
    rates = []
    for b in (8, 16, 32):
        for d in (64, 128, 256):
            shape = TTMetalShape(b, 8, 1, d, 131071, 131072, grid=(8, 8), k_chunk_size=512, reduction="linear")
            works, red, _ = ttmetal_work(shape)
            rates.append(evaluate(works, red, "HiFi2").achieved_gbps)
    print(f"| tech report B 8/16/32, 128K, D 64/128/256, 8q/1kv, linear reduction | <= {TECH_REPORT_GBPS:.0f} GB/s | "
          f"{min(rates):.0f}-{max(rates):.0f} GB/s | {100 * (min(rates) / TECH_REPORT_GBPS - 1):+.1f} to "
          f"{100 * (max(rates) / TECH_REPORT_GBPS - 1):+.1f}% (not independent: the interleaved efficiency is "
          f"fitted there) |")
    t3k = {}
    for cores in (8, 16, 32, 64):
        shape = TTMetalShape(1, 4, 1, 128, 32767, 32768, grid=(8, 8), max_cores_per_head_batch=cores,
                             reduction="linear")
        works, red, _ = ttmetal_work(shape)
        t3k[cores] = evaluate(works, red, "HiFi2").total_us
    print(f"| tech report T3K 4q/1kv 32K: 16 cores per head beat 64 | qualitative | linear reduction: "
          + ", ".join(f"{k} cores {v:.0f} us" for k, v in t3k.items()) + " | "
          + ("reproduced" if t3k[16] < t3k[64] else "NOT reproduced") + " |")
    print()
    print(f"Sensitivity at the Galaxy point (base {base:.1f} us): each constant x0.5 / x2, us")
    for name in SENSITIVE:
        v = getattr(COST, name)
        lo, hi = (tg_us(dataclasses.replace(COST, **{name: v * f})) for f in (0.5, 2.0))
        print(f"  {name:36s} {lo:5.1f} / {hi:5.1f}")
    sf = dict(COST.sfpu_instructions_per_step)
    lo, hi = (tg_us(dataclasses.replace(COST, sfpu_instructions_per_step={k: v * f for k, v in sf.items()}))
              for f in (0.5, 2.0))
    print(f"  {'sfpu_instructions_per_step':36s} {lo:5.1f} / {hi:5.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
