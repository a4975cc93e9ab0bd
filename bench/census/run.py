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
    accuracy_on_common_sites     {K: accuracy on the first N sites, N = second-smallest K}
    accuracy_drop_at_max_k       that accuracy at K = N minus at the largest K

Accuracy comes from classifying every run's stored traces with one model at the end (the
current one; `--rescore` repeats only that step on the kept traces), so it compares the runs'
measurements, not models.
    host                         cores, load before/after

usage: python bench/census/run.py --out bench/results/census.json [--k 1,8,16,32]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from ccscope.lab import ccas as zoo
from ccscope.lab.lab import Lab, LabParams
from ccscope.store.core import Store
from ccscope.trace import Trace
from ccscope.workers.census import VantageSpec, import_list_file, lab_truth, run_census, write_list

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


def measure_phase(args: argparse.Namespace, ks: list[int], work: Path) -> dict[str, Any]:
    kmax = max(ks)
    sites = [(f"s{i:02d}.lab.test", MIX[i % len(MIX)]) for i in range(kmax)]
    ccas = tuple(dict.fromkeys(c for _, c in sites))
    loaded = zoo.ensure_loaded([c for c in ccas if c not in zoo.kernel_available()])
    log(f"zoo CCAs: {', '.join(loaded)}")
    os.environ["CCSCOPE_LAB"] = "1"
    os.environ["CCSCOPE_LAB_DIR"] = args.state_dir
    load_before = os.getloadavg()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    lab = Lab(args.state_dir)
    lab.up(LabParams(ccas=ccas, delay_ms=10.0, sites=tuple(sites), large_bytes=420_000, instance=INSTANCE))
    runs: list[dict[str, Any]] = []
    try:
        store = Store(f"sqlite:///{work}/census.db", f"{work}/traces")
        store.migrate()
        truth = lab_truth(args.state_dir)
        lst = write_list(work / f"bench_{dt.date.today().isoformat()}.csv", [h for h, _ in sites])
        name, _ = import_list_file(store, lst)
        for k in ks:
            log(f"K={k}: census of {k} sites, profiles A+B ...")
            rep = run_census(
                store, name, k, [VantageSpec("bench")], lab=True, concurrency=k, truth=truth,
                campaign_name=f"bench-k{k}", worker_overrides={"min_gap_seconds": 0.0},
            )  # fmt: skip
            late = [x for x in (lateness_p99_ms(store, r.measurement_id) for r in rep.results) if x]
            runs.append({
                "concurrency": k,
                "measurements": len(rep.results),
                "seconds": round(rep.seconds, 1),
                "sites_per_hour_per_worker": round(len(rep.results) * 3600 / rep.seconds, 1),
                "failed": sum(r.state != "classified" for r in rep.results),
                "emulator_lateness_p99_ms_median": round(statistics.median(late), 3) if late else None,
                "emulator_lateness_p99_ms_max": round(max(late), 3) if late else None,
                "measurement_ids": {r.domain: r.measurement_id for r in rep.results},
            })  # fmt: skip
            log(json.dumps({k2: v for k2, v in runs[-1].items() if k2 != "measurement_ids"}))
        # What the crawler picked per site (the figures depend on the object size).
        picked = {h: store.cached_object(h) for h, _ in sites}
        sizes = sorted(c.size for c in picked.values() if c is not None and c.size)
        store.close()
    finally:
        lab.down()
    meta = {
        "object_bytes": sizes[len(sizes) // 2] if sizes else None,
        "object_bytes_range": [sizes[0], sizes[-1]] if sizes else None,
        "sites": sites,
        "ccas": list(ccas),
        "runs": runs,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    (work / "runs.json").write_text(json.dumps(meta, indent=1))
    return meta


def score_phase(meta: dict[str, Any], work: Path) -> list[dict[str, Any]]:
    """Every run's stored traces classified by one model (the current one), so runs measured
    while the model changed are still compared like for like."""
    from ccscope.classifier import classify
    from ccscope.classifier.dataset import label_of
    from ccscope.classifier.model import Model

    model = Model.load()
    store = Store(f"sqlite:///{work}/census.db", f"{work}/traces")
    truth = {h: label_of(c) for h, c in meta["sites"]}
    rows = []
    for run in meta["runs"]:
        n = dict.fromkeys(("correct", "wrong", "unknown", "failed"), 0)
        verdicts = {}
        for domain, mid in run["measurement_ids"].items():
            m = store.get_measurement(mid)
            if not m.traces:
                n["failed"] += 1
                verdicts[domain] = {"truth": truth[domain], "verdict": "-", "outcome": "failed"}
                continue
            traces = [Trace.from_dict(json.loads(store.read_trace(t.sha256))) for t in m.traces]
            v = classify(traces, model=model)
            outcome = "unknown" if v.kind != "cca" else "correct" if v.label == truth[domain] else "wrong"
            n[outcome] += 1
            verdicts[domain] = {"truth": truth[domain], "verdict": v.display, "outcome": outcome}
        scored = n["correct"] + n["wrong"] + n["unknown"]
        rows.append({
            **{k: v for k, v in run.items() if k != "measurement_ids"},
            "accuracy": round(n["correct"] / scored, 4) if scored else None,
            **n,
            "classifier_version": model.version,
            "verdicts": verdicts,
        })  # fmt: skip
    store.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/census.json")
    ap.add_argument("--k", default="1,8,16,32", help="concurrency levels")
    ap.add_argument("--state-dir", default="/run/ccscope/lab-bench-census")
    ap.add_argument("--work-dir", default="/var/tmp/ccscope-bench-census", help="store + traces kept here")
    ap.add_argument("--rescore", action="store_true", help="no measuring: classify the kept traces again")
    args = ap.parse_args()
    if os.geteuid() != 0:
        log("bench/census needs root (lab namespaces)")
        return 2
    work = Path(args.work_dir)
    if args.rescore:
        meta = json.loads((work / "runs.json").read_text())
    else:
        meta = measure_phase(args, sorted({int(k) for k in args.k.split(",") if k.strip()}), work)
    ks = [r["concurrency"] for r in meta["runs"]]
    sites, ccas = meta["sites"], meta["ccas"]
    rows = score_phase(meta, work)
    acc = {str(r["concurrency"]): r["accuracy"] for r in rows}
    # Accuracy per K is over different site sets (the first K). The like-for-like check: the
    # first N sites (N = the second-smallest K) in every run that measured them all.
    common_n = ks[1] if len(ks) > 1 else ks[0]
    common = [h for h, _ in sites[:common_n]]
    same_sites = {
        str(r["concurrency"]): round(sum(_right(r, h) for h in common) / len(common), 4)
        for r in rows
        if r["concurrency"] >= common_n
    }
    result = {
        "concurrency": ks,
        "sites_per_hour_per_worker": {str(r["concurrency"]): r["sites_per_hour_per_worker"] for r in rows},
        "accuracy": acc,
        # On the common sites: accuracy at the smallest K that measured them all minus at max K.
        "accuracy_drop_at_max_k": (
            round(same_sites[str(common_n)] - same_sites[str(ks[-1])], 4)
            if str(common_n) in same_sites and str(ks[-1]) in same_sites
            else None
        ),
        "common_sites": common,
        "accuracy_on_common_sites": same_sites,
        "per_k": rows,
        "object_bytes": meta.get("object_bytes"),
        "object_bytes_range": meta.get("object_bytes_range"),
        "profiles": ["A", "B"],
        "ccas": list(ccas),
        "date": meta["date"],
        "host": {
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "kernel": platform.release(),
            "load_before": meta["load_before"],
            "load_after": meta["load_after"],
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    log(json.dumps({k: result[k] for k in ("concurrency", "sites_per_hour_per_worker", "accuracy")}))
    return 0


def _right(row: dict[str, Any], domain: str) -> bool:
    return bool(row["verdicts"][domain]["outcome"] == "correct")


if __name__ == "__main__":
    raise SystemExit(main())
