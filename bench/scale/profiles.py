"""Part `profiles`: do profiles A and B disturb each other when measured at the same time?

The same lab sites are measured with the profiles one after another and side by side (rounds
alternate the order), and each profile's BiF error against the server's TCP_INFO, its shape
figures and the verdict are compared. The lab path has no shared bottleneck (each profile has
its own shell and 200 kbit/s link; the lab's Internet path has no rate limit).
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import _lab_up, host, log

PROFILE_CCAS = ("reno", "cubic", "bbr", "htcp")


def _one_site(cca: str, size: int, concurrent: bool, work: Path) -> dict[str, Any]:
    from ccscope.capture.measure import bif_errors, measure
    from ccscope.classifier import classify
    from ccscope.trace import Trace

    url = f"https://{cca}.lab.test/obj/{size}"
    out = work / f"{cca}-{'conc' if concurrent else 'seq'}-{time.monotonic_ns()}"
    t0 = time.monotonic()
    m = measure(url, ("A", "B"), out, lab=True, timeout=120, concurrent=concurrent)
    wall = time.monotonic() - t0
    row: dict[str, Any] = {
        "cca": cca,
        "mode": "concurrent" if concurrent else "sequential",
        "wall_s": round(wall, 2),
    }
    traces = []
    for r in m.runs:
        cap, snd, strict = bif_errors(r.groundtruth)
        row[r.profile] = {
            "ok": r.ok,
            "error": r.error,
            "duration_s": r.duration_s,
            "bytes": r.bytes,
            "max_bif": r.max_bif,
            "retransmits": r.retransmits,
            "base_rtt_ms": r.base_rtt_ms,
            "bif_err_pct_bdp_sender_resolved": snd,
            "bif_err_pct_bdp_sender_strict": strict,
            "bif_err_pct_bdp_capture_resolved": cap,
        }
        if r.sender_trace_file:
            traces.append(Trace.load(Path(r.sender_trace_file)))
    try:
        v = classify(traces)
        row["verdict"] = {
            "label": v.label,
            "kind": v.kind,
            "confidence": round(v.confidence, 3),
            "display": v.display,
        }
    except Exception as e:  # a failed download leaves too little to classify: record why
        row["verdict"] = {"label": None, "kind": "error", "display": str(e)[:200]}
    shutil.rmtree(out, ignore_errors=True)
    return row


def part_profiles(args: argparse.Namespace) -> dict[str, Any]:
    from ccscope.classifier.dataset import label_of

    lab = _lab_up(PROFILE_CCAS)
    work = Path(args.work_dir) / "profiles"
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for rnd in range(args.rounds):
            order = (False, True) if rnd % 2 == 0 else (True, False)
            for conc in order:
                log(f"profiles: round {rnd + 1}/{args.rounds}, {'concurrent' if conc else 'sequential'} ...")
                # Different sites never share anything on the lab path; they run side by side.
                with ThreadPoolExecutor(len(PROFILE_CCAS)) as pool:
                    got = list(
                        pool.map(lambda c, conc=conc: _one_site(c, args.size, conc, work), PROFILE_CCAS)
                    )
                for g in got:
                    g["round"] = rnd
                rows += got
    finally:
        lab.down()

    def agg(mode: str, prof: str, key: str) -> float | None:
        xs = [r[prof][key] for r in rows if r["mode"] == mode and prof in r and r[prof].get(key) is not None]
        return round(statistics.mean(xs), 3) if xs else None

    summary: dict[str, Any] = {}
    for mode in ("sequential", "concurrent"):
        mine = [r for r in rows if r["mode"] == mode]
        summary[mode] = {
            "measurements": len(mine),
            "wall_s_mean": round(statistics.mean(r["wall_s"] for r in mine), 2),
            "verdicts_right": sum(r["verdict"].get("label") == label_of(r["cca"]) for r in mine),
            **{
                f"{p}_{k}_mean": agg(mode, p, k)
                for p in ("A", "B")
                for k in (
                    "bif_err_pct_bdp_sender_strict",
                    "bif_err_pct_bdp_sender_resolved",
                    "duration_s",
                    "retransmits",
                    "max_bif",
                )
            },
        }
    # Like for like: per (cca, round) pair, the concurrent figure minus the sequential one.
    diffs: dict[str, list[float]] = {}
    for r in rows:
        if r["mode"] != "concurrent":
            continue
        s = next(
            (
                x
                for x in rows
                if x["mode"] == "sequential" and x["cca"] == r["cca"] and x["round"] == r["round"]
            ),
            None,
        )
        if s is None:
            continue
        for p in ("A", "B"):
            for k in ("bif_err_pct_bdp_sender_strict", "duration_s", "max_bif", "retransmits"):
                a, b = r.get(p, {}).get(k), s.get(p, {}).get(k)
                if a is not None and b is not None:
                    diffs.setdefault(f"{p}_{k}", []).append(a - b)
    same_verdict = sum(
        1
        for r in rows
        if r["mode"] == "concurrent"
        for s in rows
        if s["mode"] == "sequential"
        and s["cca"] == r["cca"]
        and s["round"] == r["round"]
        and s["verdict"].get("display") == r["verdict"].get("display")
    )
    return {
        "profiles_concurrent": {
            "object_bytes": args.size,
            "ccas": list(PROFILE_CCAS),
            "rounds": args.rounds,
            "summary": summary,
            "paired_difference_concurrent_minus_sequential_mean": {
                k: round(statistics.mean(v), 3) for k, v in diffs.items()
            },
            "paired_difference_abs_max": {k: round(max(abs(x) for x in v), 3) for k, v in diffs.items()},
            "same_verdict_pairs": same_verdict,
            "pairs": sum(r["mode"] == "concurrent" for r in rows),
            "runs": rows,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "host": host(),
        }
    }
