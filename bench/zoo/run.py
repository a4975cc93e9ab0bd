#!/usr/bin/env python3
"""Benchmark of the lab's CCA zoo: every CCA's defining parameters measured from the lab's
TCP_INFO ground truth against its specification, and the BPF CUBIC against the kernel's.

Runs the full validation suite (lab/validate/: one lab, instance 3, torn down at the end;
zoo CCAs loaded for the run are unloaded again) and writes one JSON object:

    ccas_loaded           zoo CCAs (registered names) the run used
    per_cca               {cca: [{parameter, measured, expected, tolerance, pass, n, note}]}
    cubic_bpf_vs_kernel   {metric, value, p_value, n, pass, profiles: [...per profile...]}
    rows_total, rows_pass, errors, runtime_s, downloads, check_seconds, host

Needs root. usage: python bench/zoo/run.py --out bench/results/zoo.json [--jobs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from ccscope.lab import validate as v
from ccscope.lab.validate.cubic import CUBIC_METRIC, EQUIVALENCE_MARGIN_BDP


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/zoo.json")
    ap.add_argument("--jobs", type=int, default=3, help="checks run at once (the host is shared)")
    ap.add_argument("--cubic-n", type=int, default=5, help="downloads per CUBIC and profile")
    ap.add_argument("--instance", type=int, default=v.DEFAULT_INSTANCE)
    ap.add_argument("--state-dir", default="/run/ccscope/lab-bench-zoo")
    args = ap.parse_args()
    if os.geteuid() != 0:
        log("bench/zoo needs root (lab namespaces, struct_ops CCAs)")
        return 2

    load_before = os.getloadavg()
    t0 = time.time()
    rep = v.run_validation(
        cubic_n=args.cubic_n, jobs=args.jobs, instance=args.instance, state_dir=args.state_dir, log=log
    )
    log(v.format_report(rep))

    per_cca: dict[str, list[dict[str, object]]] = {}
    for r in rep.rows:
        d = r.to_dict()
        per_cca.setdefault(d.pop("cca"), []).append(d)
    profiles = rep.cubic_compare
    cubic = {
        "metric": CUBIC_METRIC,
        # The worst profile: the largest excess distance (BDPs) and the smallest p.
        "value": max((p["value"] for p in profiles), default=None),
        "p_value": min((p["p_value"] for p in profiles), default=None),
        "n": profiles[0]["n"] if profiles else 0,
        "pass": bool(profiles) and all(p["pass"] for p in profiles),
        "equivalence_margin_bdp": EQUIVALENCE_MARGIN_BDP,
        "profiles": profiles,
    }
    doc = {
        "bench": "zoo",
        "ccas_loaded": rep.ccas_loaded,
        "zoo": list(v.ZOO),
        "per_cca": per_cca,
        "cubic_bpf_vs_kernel": cubic,
        "rows_total": len(rep.rows),
        "rows_pass": sum(r.passed for r in rep.rows),
        "ok": rep.ok,
        "errors": rep.errors,
        "runtime_s": round(time.time() - t0, 1),
        "downloads": rep.downloads,
        "check_seconds": rep.check_seconds,
        "host": {
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "loadavg_start": [round(x, 2) for x in load_before],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
