"""Part `stopping`: recall with adaptive stopping beside full length, replayed.

On the reference set's unseen draws (the robustness bench's headline set):
`classifier.stopping.simulate` replays each measurement's recorded traces cut at every check
(what a live run would have read then), so both recalls come from the same transfers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
from pathlib import Path
from typing import Any

from common import _model, _rule, log


def _replay(traces: list[Any], cls: Any, every_s: float) -> list[tuple[float, Any]]:
    """Every check a live run would make on these traces: (seconds held, verdict), as
    classifier.stopping.simulate cuts them (at every_s, 2 every_s, ... below the full length)."""
    end = min(t.duration for t in traces) if traces else 0.0
    out = []
    t = every_s
    while t < end:
        out.append((t, cls([tr.head(t) for tr in traces])))
        t += every_s
    return out


def _apply(rule: Any, checks: list[tuple[float, Any]], full: Any, full_s: float) -> tuple[Any, float, bool]:
    """The verdict `rule` ends with on recorded checks (simulate's logic, without re-classifying):
    where it settles, else the full traces' verdict at full length."""
    history: list[Any] = []
    for t, v in checks:
        history.append(v)
        if rule.settled(history, t):
            return v, t, True
    return full, full_s, False


def part_stopping(args: argparse.Namespace) -> dict[str, Any]:
    from ccscope.classifier import classify
    from ccscope.classifier.stopping import MIN_P_WHY, StoppingRule
    from ccscope.classifier.train import load_samples, score
    from ccscope.trace import Trace

    model = _model(args.model)
    rule = _rule(args)
    samples, _ = load_samples(Path(args.root))
    unseen = [s for s in samples if s.set == "unseen" and s.transport == "tcp" and s.paths]
    if not unseen:
        raise SystemExit(f"no unseen draws under {args.root}")

    def cls(traces: Any) -> Any:
        return classify(traces, model)

    def pred(v: Any) -> str:
        return v.label if v.kind == "cca" else ("unknown" if v.kind == "unknown" else "insufficient")

    recorded = []  # per measurement: its checks, its full verdict and length
    for i, s in enumerate(unseen):
        traces = [Trace.load(Path(p)) for p in s.paths]
        full_s = min(t.duration for t in traces)
        recorded.append((s, _replay(traces, cls, rule.every_s), cls(traces), full_s))
        if (i + 1) % 20 == 0:
            log(f"stopping: {i + 1}/{len(unseen)} replayed")

    def evaluate(r: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        rows, stops = [], []
        for s, checks, full, full_s in recorded:
            v, at, settled = _apply(r, checks, full, full_s)
            p = pred(v)
            rows.append({"key": s.key, "label": s.label, "variant": s.variant, "pred": p, "top1": p,
                         "top1_naive_bayes": p})  # fmt: skip
            stops.append({"key": s.key, "label": s.label, "full": full.display, "adaptive": v.display,
                          "settled": settled, "at_s": round(at, 1), "full_s": round(full_s, 1)})  # fmt: skip
        return score(rows, model.classes), stops

    full_rows = [
        {"key": s.key, "label": s.label, "variant": s.variant, "pred": pred(f), "top1": pred(f),
         "top1_naive_bayes": pred(f)}
        for s, _c, f, _s in recorded
    ]  # fmt: skip
    sf = score(full_rows, model.classes)
    sa, stops = evaluate(rule)
    settled = [x for x in stops if x["settled"]]
    # The same recorded checks under neighbouring rules: what each threshold buys and costs.
    grid = []
    for min_s in (10.0, 14.0):
        for stable in (3, 4, 5):
            for min_p in (0.0, 0.3, 0.5, 0.7):
                r = StoppingRule(every_s=rule.every_s, min_s=min_s, stable=stable, min_p=min_p)
                g, st = evaluate(r)
                ats = sorted(x["at_s"] for x in st)
                grid.append(
                    {
                        "min_s": min_s,
                        "stable": stable,
                        "min_p": min_p,
                        "recall": g["mean_recall"],
                        "settled_share": round(sum(x["settled"] for x in st) / len(st), 3),
                        "verdict_changed_by_stopping": sum(x["full"] != x["adaptive"] for x in st),
                        "trace_s_p50": round(statistics.median(ats), 1),
                        "trace_s_p90": round(ats[int(0.9 * (len(ats) - 1))], 1),
                    }
                )
    return {
        "recall_full": sf["mean_recall"],
        "recall_adaptive": sa["mean_recall"],
        "stopping_replay": {
            "how": "the reference set's unseen draws (TCP; the robustness bench's headline set), "
            "each measurement's recorded sender-aligned traces cut at every check (every_s, "
            "2 every_s, ... as classifier.stopping.simulate does) and classified; recall_adaptive "
            "is the mean per-class recall of the verdicts where the default rule stopped (else "
            "the full-length verdict), recall_full that of the full traces. A replay of recorded "
            "downloads, not live ones (their length is the collection's cap, ~25 s): the live "
            "time to verdict is part ttv. `grid`: the same checks under neighbouring rules "
            "(trace_s: seconds of trace each verdict read, the full length where not settled)",
            "rule": {k: getattr(rule, k) for k in ("every_s", "min_s", "stable", "min_p")},
            "min_p_why": MIN_P_WHY,
            "model": model.version,
            "measurements": len(stops),
            "recall_full_ci": sf["mean_recall_ci"],
            "recall_adaptive_ci": sa["mean_recall_ci"],
            "settled": len(settled),
            "verdict_changed_by_stopping": sum(x["full"] != x["adaptive"] for x in stops),
            "stopped_at_s_p50": round(statistics.median(x["at_s"] for x in settled), 1) if settled else None,
            "trace_s_full_p50": round(statistics.median(x["full_s"] for x in stops), 1),
            "grid": grid,
            "rows": stops,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        },
    }
