"""Part `ttv`: time to verdict, live.

Every zoo CCA's lab site measured the way workers measure (profiles side by side, adaptive
stopping with the default rule or --rule, the crawler's least object size, 420 KB, and the
workers' 60 s cap); the wall time from the start of the measurement to the verdict on its
stored traces, p50 and p90.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import _lab_up, _model, _rule, host, log

# The zoo's lab sites: the kernel's CCAs and the BPF zoo's, one site each (every trained class).
TTV_CCAS = (
    "reno", "cubic", "bbr", "bbr2", "bbr3", "dctcp", "bic", "highspeed", "htcp", "hybla", "illinois",
    "lp", "nv", "scalable", "vegas", "veno", "westwood", "yeah", "cdg",
)  # fmt: skip


def _ttv_one(cca: str, args: argparse.Namespace, model: Any, work: Path) -> dict[str, Any]:
    from ccscope.capture.measure import measure
    from ccscope.classifier import classify
    from ccscope.classifier.dataset import label_of
    from ccscope.trace import Trace

    def cls(traces: Any) -> Any:
        return classify(traces, model)

    out = work / f"{cca}-{time.monotonic_ns()}"
    t0 = time.monotonic()
    m = measure(
        f"https://{cca}.lab.test/obj/{args.ttv_bytes}",
        ("A", "B"),
        out,
        lab=True,
        timeout=args.ttv_cap,
        stopping=_rule(args),
        classify=cls,
    )
    traces = [Trace.load(Path(r.sender_trace_file)) for r in m.runs if r.sender_trace_file]
    try:
        v = cls(traces)
        verdict = {"display": v.display, "label": v.label if v.kind == "cca" else v.kind}
    except Exception as e:  # a failed download leaves nothing to classify: record why
        verdict = {"display": f"error: {e}"[:200], "label": "error"}
    ttv = time.monotonic() - t0
    st = m.stopping or {}
    shutil.rmtree(out, ignore_errors=True)
    return {
        "cca": cca,
        "label": label_of(cca),
        "time_to_verdict_s": round(ttv, 2),
        "settled": bool(st.get("settled")),
        "stopped_at_s": st.get("stopped_at_s"),
        "checks": len(st.get("checks") or []),
        "verdict_at_stop": st.get("verdict"),
        "verdict": verdict["display"],
        "right": verdict["label"] == label_of(cca),
        "bytes": {r.profile: r.bytes for r in m.runs},
        "errors": {r.profile: r.error for r in m.runs if r.error},
    }


def part_ttv(args: argparse.Namespace) -> dict[str, Any]:
    model = _model(args.model)
    ccas = tuple(c for c in TTV_CCAS if args.ttv_ccas is None or c in args.ttv_ccas.split(","))
    lab = _lab_up(ccas)
    work = Path(args.work_dir) / "ttv"
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for rnd in range(args.ttv_rounds):
            log(f"ttv: round {rnd + 1}/{args.ttv_rounds}, {len(ccas)} sites, {args.ttv_parallel} at once")
            with ThreadPoolExecutor(args.ttv_parallel) as pool:
                for row in pool.map(lambda c: _ttv_one(c, args, model, work), ccas):
                    row["round"] = rnd
                    rows.append(row)
                    log(
                        json.dumps(
                            {k: row[k] for k in ("cca", "time_to_verdict_s", "stopped_at_s", "verdict")}
                        )
                    )
    finally:
        lab.down()
    ttv = sorted(r["time_to_verdict_s"] for r in rows)

    def pct(q: float) -> float:
        # numpy's default (linear) percentile: p90 of 19 values lies between the 17th and 18th
        import numpy as np

        return round(float(np.percentile(ttv, q)), 1)

    return {
        "time_to_verdict_s_p50": pct(50),
        "time_to_verdict_s_p90": pct(90),
        "time_to_verdict": {
            "how": "wall seconds from the start of a measurement (profiles A and B side by side, "
            "adaptive stopping with `rule`) to the verdict on its stored traces; one "
            "site per zoo CCA on the lab (10 ms one way), object "
            f"{args.ttv_bytes} B, cap {args.ttv_cap:g} s as the workers'; {args.ttv_parallel} "
            "measurements at a time",
            "model": model.version,
            "rule": {k: getattr(_rule(args), k) for k in ("every_s", "min_s", "stable", "min_p")},
            "measurements": len(rows),
            "settled": sum(r["settled"] for r in rows),
            "time_to_verdict_s_max": ttv[-1] if ttv else None,
            "verdicts_right": sum(r["right"] for r in rows),
            "runs": rows,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "host": host(),
        },
    }
