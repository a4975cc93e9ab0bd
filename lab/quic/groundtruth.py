"""Score a QUIC measurement against the lab server's own qlog.

The lab QUIC servers leave `groundtruth/quic/runs/<run id>.json` for every request that named
its run (`x-ccscope-run`), pointing at the connection's qlog. The estimate (sender-aligned) and
the published heuristic on the same capture are both compared with the qlog's bytes in flight.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from ccscope.errors import LabError
from ccscope.lab.quic.lab import runs_dir
from ccscope.lab.quic.qlog import qlog_trace
from ccscope.profile import Profile
from ccscope.trace import Trace

# qlog records every change: the truth is a step function known at every instant, so no
# sample-gap exclusion applies (the TCP_INFO truth is a 1 ms poll)
EXACT = 1e9
GRID_S = 0.001


def compare_over_time(measured: Trace, truth: Trace, *, bdp_bytes: float, skip_s: float) -> dict[str, Any]:
    """Mean |error| of two step series over time (a 1 ms grid), not per event.

    Both series are exact step functions here, and both jump at every packet: sampled at the
    estimate's own events, a sub-millisecond offset between the capture's clock and the
    server's turns every send into a full-packet error at the very instant it is sampled. Over
    time the same offset weighs what it lasts, which is also how the classifier reads a trace
    (on a fixed grid)."""
    ts = measured.start_time + measured.t
    tt = truth.start_time + truth.t
    out: dict[str, Any] = {"bdp_bytes": bdp_bytes}
    if len(ts) == 0 or len(tt) == 0:
        out["error"] = "empty trace"
        return out
    lo, hi = max(ts[0], tt[0]) + skip_s, min(ts[-1], tt[-1])
    if hi <= lo:
        out["error"] = "the traces do not overlap in time"
        return out
    g = np.arange(lo, hi, GRID_S)
    mv = measured.bif[np.clip(np.searchsorted(ts, g, side="right") - 1, 0, len(ts) - 1)].astype(np.float64)
    tv = truth.bif[np.clip(np.searchsorted(tt, g, side="right") - 1, 0, len(tt) - 1)].astype(np.float64)
    err = mv - tv
    mae = float(np.abs(err).mean())
    out.update({
        "points": len(g),
        "span_s": round(float(hi - lo), 3),
        "mae_bytes": round(mae, 1),
        "mae_pct_bdp": round(100.0 * mae / bdp_bytes, 3) if bdp_bytes else None,
        "bias_bytes": round(float(err.mean()), 1),
        "p95_abs_bytes": round(float(np.percentile(np.abs(err), 95)), 1),
        "truth_mean_bif": round(float(tv.mean()), 1),
        "measured_mean_bif": round(float(mv.mean()), 1),
    })  # fmt: skip
    return out


def find_run(run_id: str, gt_dir: Path | None = None, wait_s: float = 8.0) -> dict[str, Any] | None:
    """The run record with its qlog complete (servers write both when the connection ends)."""
    from ccscope.lab.lab import groundtruth_dir

    path = runs_dir(gt_dir or groundtruth_dir()) / f"{run_id}.json"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            doc = json.loads(path.read_text())
            q = doc.get("qlog")
            if q and Path(q).is_file() and Path(q).stat().st_size > 0:
                qlog_trace(q)  # complete enough to read
                return dict(doc)
        except (OSError, ValueError, LabError):
            pass
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def score_quic_run(
    flow: Trace, sender: Trace, profile: Profile, run_id: str, *, gt_dir: Path | None = None
) -> dict[str, Any] | None:
    from ccscope.lab.groundtruth import compare_bif

    rec = find_run(run_id, gt_dir)
    if rec is None:
        return None
    truth = qlog_trace(rec["qlog"], flow=sender.flow, label=rec.get("label"))
    bdp = profile.bdp_bytes(flow.internet_rtt_ms or 0.0) or 1.0
    out: dict[str, Any] = {
        "cca": rec.get("label"),
        "stack": rec.get("stack"),
        "qlog": rec.get("qlog"),
        "capture": compare_bif(flow, truth, bdp_bytes=bdp, max_truth_gap_ms=EXACT),
        "sender": compare_bif(sender, truth, bdp_bytes=bdp, max_truth_gap_ms=EXACT),
    }
    skip = 2.0 * (profile.base_rtt_ms + (flow.internet_rtt_ms or 0.0)) / 1000.0  # the handshake
    out["sender_time"] = compare_over_time(sender, truth, bdp_bytes=bdp, skip_s=skip)
    out["capture_time"] = compare_over_time(flow, truth, bdp_bytes=bdp, skip_s=skip)
    pub = sender.columns.get("bif_published")
    if pub is not None:
        out["sender_published"] = compare_bif(
            sender.with_bif(pub), truth, bdp_bytes=bdp, max_truth_gap_ms=EXACT
        )
    pub_c = flow.columns.get("bif_published")
    if pub_c is not None:
        # the published method itself: capture-aligned, as the thesis compared it
        out["published"] = compare_bif(flow.with_bif(pub_c), truth, bdp_bytes=bdp, max_truth_gap_ms=EXACT)
        out["published_time"] = compare_over_time(flow.with_bif(pub_c), truth, bdp_bytes=bdp, skip_s=skip)
    return out
