#!/usr/bin/env python3
"""Renders deploy/SCALE.md (the capacity plan for Tranco's top million from five vantage points,
weekly) from deploy/SCALE.md.in and the measured figures in bench/results/ (scale.json,
chaos.json). Every derived number is computed here, so the plan follows the benches:

    .venv/bin/python deploy/scale_plan.py            # rewrites deploy/SCALE.md

A figure not measured yet is written as "(pending: KEY)".
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

SITES, VANTAGES, WEEKS = 1_000_000, 5, 52
PER_VP_HOUR = SITES / (7 * 24)  # one vantage point's measurements per hour, around the clock
MEM_MIB = 60  # assumption: two shells (~5 MiB each) and two download clients (~25 MiB each)
HOST_MONTH, EGRESS_GB, S3_GB_MONTH, FIXED_MONTH = 25.0, 0.01, 0.02, 900.0  # assumed prices, $


def _load(name: str) -> dict[str, Any]:
    p = RESULTS / name
    return json.loads(p.read_text()) if p.exists() else {}


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    xs = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(xs) if xs else None


def figures() -> dict[str, Any]:
    scale, chaos = _load("scale.json"), _load("chaos.json")
    sweep = scale.get("sweep") or []
    deriv = scale.get("projection_derivation") or {}
    f: dict[str, Any] = {
        "SECONDS": deriv.get("seconds_per_measurement_measured"),
        "CPU": scale.get("cpu_s_per_measurement_measuring_side"),
        "KMAX": scale.get("max_concurrency_p99_under_1ms"),
        "SPH": scale.get("sites_per_hour_measured"),
        "PROJ": scale.get("sites_per_hour_projected"),
        "LOST": chaos.get("lost"),
        "DUP": chaos.get("duplicated"),
        "DUMP_MB": round(SITES * VANTAGES * 100 / 1e6),
        "MEM": MEM_MIB,
    }
    wire = _median(sweep, "wire_bytes_per_measurement_median")
    trace = _median(sweep, "trace_bytes_per_measurement_median")
    f["WIRE"] = round(wire / 1e6, 2) if wire else None
    f["TRACE"] = round(trace / 1e3, 1) if trace else None
    # an even number of sweep rows gives a mean of two medians: round to the figures' precision
    gz, evid = _median(sweep, "trace_gzip_ratio_median"), _median(sweep, "verdict_evidence_bytes_median")
    f["GZ"] = round(gz, 2) if gz else None
    f["EVID"] = round(evid) if evid else None
    sizes = chaos.get("store_sizes") or {}
    n = (sizes.get("measurements") or {}).get("rows")
    if n:
        total = sum((sizes.get(t) or {}).get("bytes") or 0 for t in ("measurements", "verdicts", "traces"))
        f["ROWB"] = round(total / n)
    per_year = SITES * VANTAGES * WEEKS
    if f.get("ROWB"):
        f["PG_YEAR"] = round(f["ROWB"] * per_year / 1e12, 2)
    if f["TRACE"] and f["GZ"]:
        f["TRACE_GZ"] = round(f["TRACE"] / f["GZ"], 1)
        f["TRACES_YEAR_RAW"] = round(f["TRACE"] * 1e3 * per_year / 1e12, 1)
        f["TRACES_YEAR_GZ"] = round(f["TRACE_GZ"] * 1e3 * per_year / 1e12, 1)
        # every trace for 90 days, then 5 % of them
        kept = f["TRACES_YEAR_GZ"] * (90 / 365 + 0.05 * 275 / 365)
        f["TRACES_KEPT"] = round(kept, 1)
        f["TRACES_STORED_GB"] = round(kept * 1000)
        f["COST_S3"] = round(f["TRACES_STORED_GB"] * S3_GB_MONTH)
    if f["PROJ"] and f["SECONDS"]:
        f["HOSTS_PER_VP"] = math.ceil(PER_VP_HOUR / f["PROJ"])
        f["HOSTS_TOTAL"] = f["HOSTS_PER_VP"] * VANTAGES
        f["HOSTS_TOTAL_SPARE"] = f["HOSTS_TOTAL"] + VANTAGES
        f["NEEDK"] = round(f["PROJ"] * f["SECONDS"] / 3600)
        per_host_hour = PER_VP_HOUR / f["HOSTS_PER_VP"]
        f["NEEDK_HOST"] = round(per_host_hour * f["SECONDS"] / 3600)
        f["MBPS_HOST"] = round(f["NEEDK_HOST"] * 0.4, 1)
        f["PROJ_HOST_DAY"] = round(per_host_hour * 24)
        f["COST_HOSTS"] = round(f["HOSTS_TOTAL_SPARE"] * HOST_MONTH)
        if f["WIRE"]:
            f["GB_DAY_HOST"] = round(f["WIRE"] * f["PROJ_HOST_DAY"] / 1000, 1)
            f["GB_DAY_VP"] = round(f["GB_DAY_HOST"] * f["HOSTS_PER_VP"], 1)
            f["TB_MONTH"] = round(f["GB_DAY_VP"] * VANTAGES * 30 / 1000, 2)
            f["EGRESS_GB"] = round(f["TB_MONTH"] * 1000 * 0.1)
            f["COST_EGRESS"] = round(f["EGRESS_GB"] * EGRESS_GB)
    parts = [f.get(k) for k in ("COST_HOSTS", "COST_EGRESS", "COST_S3")]
    if all(p is not None for p in parts):
        f["COST_TOTAL"] = round(sum(parts) + FIXED_MONTH)  # type: ignore[arg-type]
    return f


def render(template: str, f: dict[str, Any]) -> str:
    def one(m: re.Match[str]) -> str:
        v = f.get(m.group(1))
        if v is None:
            return f"(pending: {m.group(1)})"
        return f"{v:,}" if isinstance(v, int) and abs(v) >= 10_000 else str(v)

    return re.sub(r"@([A-Z_]+)@", one, template)


def main() -> int:
    tpl = (REPO / "deploy" / "SCALE.md.in").read_text()
    f = figures()
    head = (
        "<!-- generated by deploy/scale_plan.py from deploy/SCALE.md.in and bench/results/; edit those -->\n"
    )
    (REPO / "deploy" / "SCALE.md").write_text(head + render(tpl, f))
    pending = sorted(k for k in set(re.findall(r"@([A-Z_]+)@", tpl)) if f.get(k) is None)
    print(json.dumps({"pending": pending}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
