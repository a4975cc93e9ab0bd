"""bench/bif_accuracy: BiF measured at the bottleneck vs the server's own TCP_INFO.

For every built-in CCA, both standard profiles and a sweep of Internet-path delays, one lab
download is measured and compared with the ground truth the lab server sampled at 1 ms.
Two figures per row, side by side in one run:
  capture: BiF as seen at the bottleneck (the published method);
  sender:  the same capture shifted by the invisible Internet-path RTT (ccscope's method).
The headline `bif_mae_pct_bdp` is ccscope's method; `bif_mae_pct_bdp_capture` the published one.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ccscope.capture.measure import measure
from ccscope.lab.lab import Lab, LabParams

CCAS = ("reno", "cubic", "bbr")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/bif_accuracy.json")
    ap.add_argument("--delays", default="5,20,40,80", help="one-way Internet-path delays, ms")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--object-bytes", type=int, default=200_000)
    ap.add_argument("--workdir", default="runs/bench-bif")
    args = ap.parse_args()
    delays = [float(x) for x in args.delays.split(",")]
    rows: list[dict[str, Any]] = []
    lab = Lab()
    t0 = time.time()
    try:
        for d in delays:
            lab.up(LabParams(ccas=CCAS, delay_ms=d))
            for rep in range(args.repeats):
                with ThreadPoolExecutor(len(CCAS)) as pool:
                    futs = {
                        c: pool.submit(
                            measure,
                            f"https://{c}.lab.test/obj/{args.object_bytes}",
                            ("A", "B"),
                            Path(args.workdir) / f"d{d:g}" / f"{c}-{rep}",
                            lab=True,
                        )
                        for c in CCAS
                    }
                    for cca, f in futs.items():
                        m = f.result()
                        for r in m.runs:
                            g = r.groundtruth or {}
                            row = {
                                "cca": cca,
                                "profile": r.profile,
                                "internet_delay_ms": d,
                                "repeat": rep,
                                "ok": r.ok,
                                "error": r.error,
                                "measured_internet_rtt_ms": r.internet_rtt_ms,
                                "points": r.points,
                                "retransmits": r.retransmits,
                            }
                            for k in ("capture", "sender"):
                                c = g.get(k) or {}
                                row[f"mae_pct_bdp_{k}"] = c.get("mae_pct_bdp")
                                row[f"mae_bytes_{k}"] = c.get("mae_bytes")
                            row["bdp_bytes"] = (g.get("sender") or {}).get("bdp_bytes")
                            rows.append(row)
                            print(json.dumps(row), flush=True)
    finally:
        lab.down()

    def mean(key: str, sel: list[dict[str, Any]]) -> float | None:
        v = [r[key] for r in sel if r.get(key) is not None]
        return round(statistics.fmean(v), 3) if v else None

    groups: dict[str, dict[str, Any]] = {}
    for cca in CCAS:
        for prof in ("A", "B"):
            sel = [r for r in rows if r["cca"] == cca and r["profile"] == prof]
            groups[f"{cca}/{prof}"] = {
                "bif_mae_pct_bdp": mean("mae_pct_bdp_sender", sel),
                "bif_mae_pct_bdp_capture": mean("mae_pct_bdp_capture", sel),
                "runs": len(sel),
            }
    by_delay = {
        f"{d:g}ms": {
            "bif_mae_pct_bdp": mean("mae_pct_bdp_sender", [r for r in rows if r["internet_delay_ms"] == d]),
            "bif_mae_pct_bdp_capture": mean(
                "mae_pct_bdp_capture", [r for r in rows if r["internet_delay_ms"] == d]
            ),
        }
        for d in delays
    }
    result = {
        "bench": "bif_accuracy",
        "bif_mae_pct_bdp": mean("mae_pct_bdp_sender", rows),
        "bif_mae_pct_bdp_capture": mean("mae_pct_bdp_capture", rows),
        "target_bif_mae_pct_bdp": 3.0,
        "runs": len(rows),
        "runs_failed": sum(1 for r in rows if not r["ok"] or r["mae_pct_bdp_sender"] is None),
        "per_cca_profile": groups,
        "per_internet_delay": by_delay,
        "rows": rows,
        "config": {
            "ccas": list(CCAS),
            "profiles": ["A", "B"],
            "internet_delays_ms": delays,
            "repeats": args.repeats,
            "object_bytes": args.object_bytes,
            "groundtruth": "server TCP_INFO every 1 ms: (bytes_sent - bytes_retrans) - bytes_acked",
            "metric": "mean |BiF_measured(t) - BiF_truth(t)| over the download, % of path BDP "
            "(200 kbit/s x (profile RTT + Internet RTT))",
        },
        "machine": {"cpus": 2, "kernel": platform.release(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"),
        "wall_s": round(time.time() - t0, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("bif_mae_pct_bdp", "bif_mae_pct_bdp_capture", "runs")}))
    return 0 if result["runs_failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
