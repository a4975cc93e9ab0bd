#!/usr/bin/env python3
"""Census throughput: lab sites measured per hour by one worker with K concurrent measurements,
and whether classification accuracy holds as K grows.

One lab (instance 10, its own state directory) serves K_max sites, assigned round-robin to a mix
of CCAs. For each K, a fresh census campaign over the first K sites runs through the service
exactly as `ccscope census` does (store, crawler, one embedded worker pool of K, classifier),
profiles A+B. Every site has its own 200 kbit/s bottleneck (its own shell), so concurrency is
the lever; what could break is the host keeping up (emulator timing, capture, CPU), which shows
as emulator lateness and as accuracy.

Figures (one JSON object):
    concurrency                  the K values run
    sites_per_hour_per_worker    {K: measurements finished per hour (classified or failed)}
    accuracy                     {K: share of sites whose verdict names the CCA they run}
    per_k                        rows with seconds, failures, unknowns, emulator lateness p99 ...
    accuracy_drop_at_max_k       accuracy(K=1 or smallest) - accuracy(max K)
    host                         cores, load before/after

usage: python bench/census/run.py --out bench/results/census.json [--k 1,4,8,16,24]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from ccscope.lab import ccas as zoo
from ccscope.lab.lab import Lab, LabParams
from ccscope.store.core import Store
from ccscope.trace import Trace
from ccscope.workers.census import VantageSpec, import_list_file, lab_truth, run_census

INSTANCE = 10
MIX = ("cubic", "bbr", "reno", "bic", "htcp", "vegas", "westwood", "illinois", "scalable", "highspeed",
       "hybla", "veno")  # fmt: skip


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def lateness_p99_ms(store: Store, measurement_id: int) -> float | None:
    """The worst per-direction lateness p99 the emulator reported for this measurement's shells."""
    worst = None
    for t in store.get_measurement(measurement_id).traces:
        tr = Trace.from_dict(json.loads(store.read_trace(t.sha256)))
        stats = tr.extra.get("link_stats") or {}
        for d in ("up", "down"):
            p99 = ((stats.get(d) or {}).get("lateness_us") or {}).get("p99")
            if p99 is not None:
                worst = max(worst or 0.0, float(p99) / 1000)
    return worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/census.json")
    ap.add_argument("--k", default="1,4,8,16,24", help="concurrency levels")
    ap.add_argument("--state-dir", default="/run/ccscope/lab-bench-census")
    args = ap.parse_args()
    if os.geteuid() != 0:
        log("bench/census needs root (lab namespaces)")
        return 2
    ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
    kmax = max(ks)
    sites = tuple((f"s{i:02d}.lab.test", MIX[i % len(MIX)]) for i in range(kmax))
    ccas = tuple(dict.fromkeys(c for _, c in sites))
    loaded = zoo.ensure_loaded([c for c in ccas if c not in zoo.kernel_available()])
    log(f"zoo CCAs: {', '.join(loaded)}")
    os.environ["CCSCOPE_LAB"] = "1"
    os.environ["CCSCOPE_LAB_DIR"] = args.state_dir
    load_before = os.getloadavg()
    lab = Lab(args.state_dir)
    lab.up(LabParams(ccas=ccas, delay_ms=10.0, sites=sites, large_bytes=420_000, instance=INSTANCE))
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="ccscope-bench-census-") as tmp:
            store = Store(f"sqlite:///{tmp}/census.db", f"{tmp}/traces")
            store.migrate()
            truth = lab_truth(args.state_dir)
            lst = Path(tmp) / f"bench_{dt.date.today().isoformat()}.csv"
            lst.write_text("".join(f"{i},{h}\n" for i, (h, _) in enumerate(sites, start=1)))
            name, _ = import_list_file(store, lst)
            for k in ks:
                log(f"K={k}: census of {k} sites, profiles A+B ...")
                rep = run_census(
                    store, name, k, [VantageSpec("bench")], lab=True, concurrency=k, truth=truth,
                    campaign_name=f"bench-k{k}",
                    worker_overrides={"min_gap_seconds": 0.0},
                )  # fmt: skip
                s = rep.scores()
                late = [x for x in (lateness_p99_ms(store, r.measurement_id) for r in rep.results) if x]
                row = {
                    "concurrency": k,
                    "measurements": len(rep.results),
                    "seconds": round(rep.seconds, 1),
                    "sites_per_hour_per_worker": round(len(rep.results) * 3600 / rep.seconds, 1),
                    "accuracy": s["accuracy"],
                    "precision": s["precision"],
                    "correct": s["correct"],
                    "wrong": s["wrong"],
                    "unknown": s["unknown"] + s["insufficient"],
                    "failed": s["failed"],
                    "emulator_lateness_p99_ms_median": round(statistics.median(late), 3) if late else None,
                    "emulator_lateness_p99_ms_max": round(max(late), 3) if late else None,
                    "verdicts": {
                        r.domain: {"truth": r.truth, "verdict": r.display, "outcome": r.outcome}
                        for r in rep.results
                    },
                }
                log(json.dumps({k2: v for k2, v in row.items() if k2 != "verdicts"}))
                rows.append(row)
            store.close()
    finally:
        lab.down()
    acc = {str(r["concurrency"]): r["accuracy"] for r in rows}
    # Accuracy per K is over different site sets (the first K); the like-for-like check is the
    # sites every K measured: the first min(K) sites, compared across K.
    common = [h for h, _ in sites[: ks[0]]]
    same_sites = {
        str(r["concurrency"]): sum(r["verdicts"][h]["outcome"] == "correct" for h in common) for r in rows
    }
    result = {
        "concurrency": ks,
        "sites_per_hour_per_worker": {str(r["concurrency"]): r["sites_per_hour_per_worker"] for r in rows},
        "accuracy": acc,
        "accuracy_drop_at_max_k": (
            round(rows[0]["accuracy"] - rows[-1]["accuracy"], 4)
            if rows and rows[0]["accuracy"] is not None and rows[-1]["accuracy"] is not None
            else None
        ),
        "common_sites": common,
        "common_sites_correct": same_sites,
        "per_k": rows,
        "object_bytes": 420_000,
        "profiles": ["A", "B"],
        "ccas": list(ccas),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": {
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "kernel": platform.release(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    log(json.dumps({k: result[k] for k in ("concurrency", "sites_per_hour_per_worker", "accuracy")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
