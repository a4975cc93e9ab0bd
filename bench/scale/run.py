#!/usr/bin/env python3
"""Scale: profiles at the same time, measurements per worker, and what one costs in CPU.

The parts, one module each beside this file (their docstrings say how each measures), each write
their own keys of bench/results/scale.json (the other keys are kept, so the compose test and the
adaptive-stopping study can add theirs):

* `profiles` (profiles.py): do profiles A and B disturb each other when measured at the same time?
* `sweep` (sweep.py): one worker runs K measurements at once, profiles concurrent, for each K;
  each K is one census in a child process (census.py), its CPU from wait4.
* `steady`: the same with a census of several times K sites, K at a time (a worker over a long
  list); `all` runs it at --steady-k with the lab keeping no ground-truth samples, as the
  Internet's servers keep none for us (sites_per_hour_measured is the best row of either).
* `projection` (sweep.py): sites per hour for a 2-core host that only measures, derived from the
  sweep's CPU seconds per measurement (the derivation is written into the JSON).
* `cpu` (cpu.py): the measuring side's CPU per measurement, by stage (cpuprobe.py).
* `split` (split.py): the same cost read from a CPU of its own, the lab on the other, with the
  kernel's per-packet work steered to the side that causes it (what rusage cannot split).
* `ttv` (ttv.py): time to verdict, live, one lab site per zoo CCA, p50 and p90.
* `stopping` (stopping.py): recall with adaptive stopping beside full length, on the reference
  set's unseen draws replayed.

This file is the CLI (`make bench NAME=scale` runs it) and the census child's entry point
(--census-child). Its siblings import as top-level modules: Python puts this script's directory
first on sys.path.

usage: python bench/scale/run.py --out bench/results/scale.json \
    [--part profiles|sweep|steady|cpu|split|ttv|stopping|all]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from census import _census_child
from common import host, log
from cpu import part_cpu
from profiles import part_profiles
from split import part_split
from stopping import part_stopping
from sweep import PG_FROM_K, part_sweep, projection, unstarved
from ttv import part_ttv

LEAD_KEYS = ("time_to_verdict_s_p50", "time_to_verdict_s_p90", "recall_adaptive", "recall_full")


def _write(out: Path, doc: dict[str, Any]) -> None:
    """scale.json, saying which headline figures are still to be measured (null) and how."""
    todo = [
        k
        for k in (*LEAD_KEYS, "sites_per_hour_measured", "max_concurrency_p99_under_1ms")
        if doc.get(k) is None
    ]
    doc.pop("pending_note", None)
    if todo:
        doc["pending_note"] = (
            f"null until measured: {', '.join(todo)} (time_to_verdict: --part ttv; recall_*: "
            "--part stopping; sites_per_hour and concurrency: --part sweep)"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")


def _reproject(doc: dict[str, Any], sweep: list[dict[str, Any]]) -> None:
    """The headline figures again from `sweep` with the steady and split rows the document has,
    keeping the `unstarved` figure the derivation already carries."""
    unst = (doc.get("projection_derivation") or {}).get("unstarved")
    doc.update(projection(sweep, **_other_rows(doc)))
    doc["projection_derivation"]["unstarved"] = unst


def _other_rows(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {k: doc.get(k) or [] for k in ("steady", "split", "repeats")}


def _part_steady(args: argparse.Namespace, doc: dict[str, Any], out: Path) -> None:
    """A census of sites_per_k x K lab sites per K, K at a time, into doc["steady"], and the
    headline figures recomputed with it."""
    load0 = [round(x, 2) for x in os.getloadavg()]
    args.sweep_label = "steady"
    doc.update(part_sweep(args))
    doc["steady_host"] = {**host(), "load_before": load0, "note": args.host_note}
    doc["steady_date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    doc["steady_note"] = (
        f"a census of {args.sites_per_k} x K lab sites per K, K at a time (a worker over a long "
        f"list), profiles side by side, adaptive stopping, the lab's TCP_INFO sampling every "
        f"{args.lab_sample_ms:g} ms (0: none, as the Internet's servers keep none for us)"
    )
    _reproject(doc, doc.get("sweep") or doc["steady"])
    _write(out, doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/scale.json")
    parts = ["profiles", "sweep", "steady", "ttv", "stopping", "cpu", "split", "all"]
    ap.add_argument("--part", choices=parts, default="all")
    ap.add_argument("--rounds", type=int, default=2, help="profiles: rounds of each order")
    ap.add_argument("--size", type=int, default=200_000, help="profiles: object bytes")
    ap.add_argument("--k", default="16,32,64,128", help="sweep, steady: concurrency levels")
    ap.add_argument("--steady-k", default="16,32", help="all: the steady census's concurrency levels")
    ap.add_argument(
        "--steady-lab-sample-ms",
        type=float,
        default=0.0,
        help="all: the lab servers' TCP_INFO sampling period during the steady census (0: none)",
    )
    ap.add_argument("--sites-per-k", type=int, default=3,
                    help="steady: sites per census, as a multiple of K (sweep: 1)")  # fmt: skip
    ap.add_argument("--work-dir", default="/var/tmp/ccscope-bench-scale")
    ap.add_argument("--ttv-bytes", type=int, default=420_000, help="ttv: object bytes (the crawler's least)")
    ap.add_argument("--ttv-cap", type=float, default=60.0, help="ttv: seconds per download (the workers')")
    ap.add_argument("--ttv-parallel", type=int, default=4, help="ttv: measurements at a time")
    ap.add_argument("--ttv-rounds", type=int, default=1)
    ap.add_argument("--ttv-ccas", help="ttv: only these CCAs (comma-separated)")
    ap.add_argument("--model", help="classifier model file (default: the shipped one)")
    ap.add_argument(
        "--rule", help="ttv, stopping: overrides of the default StoppingRule, e.g. 'stable=4,min_p=0'"
    )
    ap.add_argument("--root", default="/var/tmp/ccscope-draws", help="stopping: the reference set")
    ap.add_argument(
        "--lab-sample-ms",
        type=float,
        default=1.0,
        help="sweep, cpu: the lab servers' TCP_INFO sampling period (ground truth the census does not keep)",
    )
    ap.add_argument("--host-note", help="sweep: what else ran on the host (kept in sweep_host)")
    ap.add_argument("--pg-from", type=int, default=PG_FROM_K, help="sweep: PostgreSQL from this K on")
    ap.add_argument("--split-k", default="8,16",
                    help="split: concurrency levels of the census on a CPU of its own")  # fmt: skip
    ap.add_argument("--split-clients", default="compiled,python",
                    help="split: TCP download clients, each K run with each (the first's rows are `split`, "
                    "the others' `split_<client>_client`)")  # fmt: skip
    ap.add_argument("--cpu-k", type=int, default=8, help="cpu: sites measured at once")
    ap.add_argument("--cpu-label", default="cpu_breakdown", help="cpu: the key the breakdown goes under")
    ap.add_argument(
        "--check-slots", type=int, help="sweep, steady: adaptive stopping's checks at once (default: cores)"
    )
    ap.add_argument("--census-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store-url", help=argparse.SUPPRESS)
    ap.add_argument(
        "--repeat",
        action="store_true",
        help="sweep: add the K runs to `repeats` beside the sweep of record, not in its place",
    )
    ap.add_argument("--census-sites", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.census_child:
        return _census_child(args)
    if args.part == "stopping":  # a replay of recorded traces: no lab, no root
        doc = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
        doc.update(part_stopping(args))
        _write(Path(args.out), doc)
        log(json.dumps({k: doc.get(k) for k in ("recall_full", "recall_adaptive")}))
        return 0
    if os.geteuid() != 0:
        log("bench/scale needs root (lab namespaces)")
        return 2
    out = Path(args.out)
    doc: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    for k in LEAD_KEYS:
        doc.setdefault(k, None)
    if args.part in ("profiles", "all"):
        doc.update(part_profiles(args))
        _write(out, doc)
    if args.part in ("ttv", "all"):
        doc.update(part_ttv(args))
        _write(out, doc)
    if args.part == "cpu":
        doc[args.cpu_label] = part_cpu(args)
        _write(out, doc)
        log(json.dumps({k: doc[args.cpu_label][k] for k in ("cpu_s_per_measurement", "parts_cpu_s")}))
        return 0
    if args.part == "steady":
        _part_steady(args, doc, out)
    elif args.part == "all":  # the steady census first: the sweep's projection then reads both
        steady = {**vars(args), "k": args.steady_k, "lab_sample_ms": args.steady_lab_sample_ms}
        _part_steady(argparse.Namespace(**steady), doc, out)
    if args.part in ("split", "all"):
        doc.update(part_split(argparse.Namespace(**{**vars(args), "sites_per_k": 3})))
        if doc.get("sweep"):
            _reproject(doc, doc["sweep"])
        _write(out, doc)
    if args.part == "sweep" and args.repeat:
        # Further one-batch runs of some K, kept beside the sweep of record: the concurrency
        # bound then reads every run of a K, not one run at the edge.
        args.sweep_label, args.sites_per_k = "repeats", 1
        rows = part_sweep(args)["repeats"]
        for r in rows:
            r["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        doc["repeats"] = [*(doc.get("repeats") or []), *rows]
        if doc.get("sweep"):
            _reproject(doc, doc["sweep"])
    elif args.part in ("sweep", "all"):
        load0 = [round(x, 2) for x in os.getloadavg()]
        args.sweep_label, args.sites_per_k = "sweep", 1
        doc.update(part_sweep(args))
        doc.update(projection(doc["sweep"], **_other_rows(doc)))
        doc["projection_derivation"]["unstarved"] = unstarved(doc)
        doc["sweep_host"] = {**host(), "load_before": load0, "note": args.host_note}
        doc["sweep_date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        # Notes written by hand about an earlier sweep no longer apply: say what this one was.
        for stale in ("sweep_note", "max_concurrency_note"):
            doc.pop(stale, None)
        ks = [r["concurrency"] for r in doc["sweep"]]
        doc["sweep_note"] = (
            f"K = {', '.join(map(str, ks))}, one batch each (every site at once), profiles side by "
            "side, adaptive stopping with the default rule, PostgreSQL from "
            f"K = {args.pg_from} (SQLite below), the lab's TCP_INFO sampling every "
            f"{args.lab_sample_ms:g} ms; each row's cpu_breakdown says where its CPU went"
        )
        if doc.get("max_concurrency_p99_under_1ms") == max(ks):
            doc["max_concurrency_note"] = (
                f"a lower bound: every K run held lateness p99 < 1 ms; none above {max(ks)} was run"
            )
    _write(out, doc)
    log(
        json.dumps(
            {
                k: doc.get(k)
                for k in (
                    "max_concurrency_p99_under_1ms",
                    "sites_per_hour_measured",
                    "sites_per_hour_projected",
                )
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
