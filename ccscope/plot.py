"""Pictures of traces: bytes in flight over time, as the classifier read them (PNG, matplotlib).

One panel per trace (profile A above B): BiF, the pipe (BiF less SACKed bytes) and the SACKed
bytes themselves; retransmissions as a rug; and, when the verdict is given, what the classifier
found in that trace (`Verdict.evidence["traces"][i]`, in the order the traces were classified):
slow start's end, the segments of congestion avoidance (shaded, each back-off that opened one
marked with its β), and the BBR detectors' ProbeRTT dips. A reader can check the explanation
against the figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ccscope.trace import Trace
from ccscope.verdict import Verdict

# Colour-blind-safe (Okabe-Ito) and dark enough on white for the lines to read.
COLOURS = {"bif": "#0072B2", "pipe": "#D55E00", "sacked": "#009E73", "retx": "#CC79A7", "mark": "#000000"}


def trace_marks(evidence: dict[str, Any] | None) -> dict[str, Any]:
    """What one trace's verdict evidence says to draw, in seconds since the trace's first sample:
    {"slow_start_end": s | None, "segments": [(start, end, after, beta)], "backoffs": [(t, beta)],
    "dips": [t]}. Shared by the PNG here and the dashboard's SVG."""
    ev = evidence or {}
    segs = []
    backoffs = []
    for s in ev.get("segments") or []:
        try:
            a, b = float(s["start_s"]), float(s["end_s"])
        except (KeyError, TypeError, ValueError):
            continue
        beta = s.get("beta")
        segs.append((a, b, str(s.get("after") or ""), beta))
        if s.get("after") in ("loss", "drop"):
            backoffs.append((a, beta))
    dips: list[float] = []
    for det in (ev.get("detectors") or {}).values():
        for d in ((det or {}).get("evidence") or {}).get("probe_rtt_dips") or []:
            try:
                dips.append(float(d["t_s"]))
            except (KeyError, TypeError, ValueError):
                continue
    ss = ev.get("slow_start_end_s")
    return {
        "slow_start_end": float(ss) if isinstance(ss, int | float) else None,
        "segments": segs,
        "backoffs": backoffs,
        "dips": sorted(set(dips)),
    }


def plot_traces(
    traces: Sequence[Trace], out: str | Path, verdict: Verdict | None = None, *, title: str | None = None
) -> Path:
    """Write a PNG of `traces` (with `verdict`'s marks when given) to `out`; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not traces:
        raise ValueError("nothing to plot")
    per_trace = list((verdict.evidence.get("traces") or []) if verdict else [])
    fig, axes = plt.subplots(len(traces), 1, figsize=(10, 3.2 * len(traces)), squeeze=False)
    for i, (tr, ax) in enumerate(zip(traces, axes[:, 0], strict=True)):
        ev = per_trace[i] if i < len(per_trace) and isinstance(per_trace[i], dict) else None
        _panel(ax, tr, trace_marks(ev))
    head = title or ", ".join(sorted({t.flow.server for t in traces}))
    if verdict is not None:
        head += f" — {verdict.display}"
        if verdict.kind == "cca":
            head += f" ({verdict.confidence:.2f})"
    fig.suptitle(head)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _panel(ax: Any, tr: Trace, marks: dict[str, Any]) -> None:
    t = tr.t - (tr.t[0] if len(tr.t) else 0.0)
    kb = 1.0 / 1000.0
    ax.step(t, tr.bif * kb, where="post", lw=0.8, color=COLOURS["bif"], label="BiF")
    if "sacked" in tr.columns:
        ax.step(t, tr.pipe * kb, where="post", lw=0.8, color=COLOURS["pipe"], label="pipe (BiF − SACKed)")
        ax.fill_between(
            t, 0, tr.columns["sacked"] * kb, step="post", color=COLOURS["sacked"], alpha=0.3, label="SACKed"
        )
    top = float(tr.bif.max()) * kb if len(tr.bif) else 1.0
    retx = np.asarray(tr.events.get("retransmit", []), dtype=float)
    if len(retx):
        t0 = float(tr.t[0]) if len(tr.t) else 0.0
        ax.plot(
            retx - t0, np.full(len(retx), -0.03 * top), "|", ms=6, color=COLOURS["retx"], label="retransmit"
        )
    for k, (a, b, _after, _beta) in enumerate(marks["segments"]):
        ax.axvspan(a, b, color="#999999", alpha=0.12 if k % 2 else 0.22, lw=0)
    for x, beta in marks["backoffs"]:
        ax.axvline(x, color=COLOURS["mark"], lw=0.6, ls="--")
        if isinstance(beta, int | float):
            ax.annotate(f"β {beta:.2f}", (x, top), fontsize=7, ha="left", va="top", rotation=90)
    if marks["slow_start_end"] is not None:
        ax.axvline(marks["slow_start_end"], color=COLOURS["mark"], lw=1.0, label="slow start ends")
    if marks["dips"]:
        ax.plot(marks["dips"], [top * 1.02] * len(marks["dips"]), "v", color=COLOURS["mark"], ms=5,
                label="ProbeRTT dip")  # fmt: skip
    prof = (tr.profile or {}).get("name", "?")
    ax.set_title(f"profile {prof}: {tr.flow}  ({tr.alignment} alignment)", fontsize=9)
    ax.set_xlabel("seconds")
    ax.set_ylabel("kB in flight")
    ax.legend(loc="upper right", fontsize=7)
