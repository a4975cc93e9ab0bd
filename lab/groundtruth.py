"""Lab ground truth: the servers' own TCP_INFO samples, as Traces, matched to measurements.

A record is the pair `groundtruth/<cca>/<start_ns>_<client>_<port>.{csv,json}` the lab server
writes per connection (see server.py for the columns). `record_trace()` turns one into a
`Trace` (source "lab-groundtruth", aligned to the sender), `find_groundtruth()` finds the record
behind a measured trace, and `compare_bif()` scores a measured BiF series against it.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ccscope.errors import LabError
from ccscope.lab.registry import LAB_DOMAIN
from ccscope.trace import FlowKey, Trace

_INT64_MAX = np.iinfo(np.int64).max
MAX_SCAN = 5000  # sidecars opened when looking a run id up without a time window


@dataclass
class GroundTruthRecord:
    meta: dict[str, Any]
    json_path: Path
    csv_path: Path

    @property
    def run_id(self) -> str | None:
        return self.meta.get("run_id")

    @property
    def run_ids(self) -> set[str]:
        ids = {r.get("run_id") for r in self.meta.get("requests", [])}
        ids.add(self.meta.get("run_id"))
        return {i for i in ids if i}

    @property
    def start_ns(self) -> int:
        return int(self.meta["start_ns"])

    @property
    def end_ns(self) -> int:
        return int(self.meta.get("end_ns") or self.meta["start_ns"])

    def columns(self) -> dict[str, np.ndarray]:
        """The CSV as int64 columns (the kernel's "unlimited" pacing rate is clipped)."""
        try:
            with self.csv_path.open() as f:
                names = f.readline().strip().split(",")
                data = np.loadtxt(f, delimiter=",", dtype=np.uint64, ndmin=2)
        except (OSError, ValueError) as e:
            raise LabError(f"unreadable ground truth {self.csv_path}: {e}") from e
        if data.size == 0:
            data = np.zeros((0, len(names)), dtype=np.uint64)
        if data.shape[1] != len(names):
            raise LabError(f"{self.csv_path}: {data.shape[1]} columns, header has {len(names)}")
        clipped = np.minimum(data, np.uint64(_INT64_MAX)).astype(np.int64)
        return {n: clipped[:, i] for i, n in enumerate(names)}

    def to_trace(self) -> Trace:
        return record_trace(self)


def load_record(path: str | Path) -> GroundTruthRecord:
    """A record from its sidecar (.json) or its CSV path."""
    p = Path(path)
    jp = p.with_suffix(".json")
    try:
        meta = json.loads(jp.read_text())
    except (OSError, ValueError) as e:
        raise LabError(f"unreadable ground-truth sidecar {jp}: {e}") from e
    if not isinstance(meta, dict) or "start_ns" not in meta:
        raise LabError(f"{jp} is not a ground-truth sidecar")
    return GroundTruthRecord(meta=meta, json_path=jp, csv_path=jp.with_name(meta.get("csv") or
                             jp.with_suffix(".csv").name))  # fmt: skip


def record_trace(rec: GroundTruthRecord) -> Trace:
    """The record as a Trace: bif = highest sequence sent − cumulative ACK, per sample."""
    c = rec.columns()
    m = rec.meta
    t_ns = c["t_ns"]
    if len(t_ns) == 0:
        raise LabError(f"{rec.csv_path}: ground truth holds no samples")
    t_ns = np.maximum.accumulate(t_ns)  # a wall-clock step backwards must not break the Trace
    t0 = int(t_ns[0])
    mss = c["snd_mss"]
    retrans_t = (t_ns[1:][np.diff(c["total_retrans"]) > 0] - t0) / 1e9
    min_rtt = int(c["min_rtt_us"][-1])
    srv, cli = m["server"], m["client"]
    path = m.get("object_path") or "/"
    return Trace(
        flow=FlowKey(
            server=str(srv["addr"]),
            server_port=int(srv["port"]),
            client=str(cli["addr"]),
            client_port=int(cli["port"]),
        ),
        t=(t_ns - t0) / 1e9,
        bif=c["bif"],
        start_time=t0 / 1e9,
        source="lab-groundtruth",
        base_rtt_ms=min_rtt / 1000.0 if 0 < min_rtt < 0xFFFFFFFF else None,
        bytes_acked=int(c["bytes_acked"][-1]),
        object_url=f"{m.get('scheme', 'http')}://{m.get('cca')}.{LAB_DOMAIN}{path}",
        partial=m.get("end_reason") not in ("client closed", "server closed"),
        alignment="sender",
        columns={
            "cwnd_bytes": c["snd_cwnd"] * mss,
            "pacing_rate": c["pacing_rate"],
            "srtt_ms": c["rtt_us"] / 1000.0,
            "bif_unacked": c["bif_unacked"],
            # the kernel's own pipe (tcp_packets_in_flight): unacked - sacked - lost + retrans
            "in_flight": (c["unacked"] - c["sacked"] - c["lost"] + c["retrans"]) * mss,
            "delivery_rate": c["delivery_rate"],
            "ca_state": c["ca_state"],
            "bytes_acked": c["bytes_acked"],
        },
        events={"retransmit": [round(float(x), 6) for x in retrans_t]},
        extra={
            "cca": m.get("cca"),
            "run_id": m.get("run_id"),
            "scheme": m.get("scheme"),
            "groundtruth_file": str(rec.json_path),
            "end_reason": m.get("end_reason"),
            "bytes_retrans": m.get("bytes_retrans"),
            "total_retrans": m.get("total_retrans"),
            "min_rtt_ms": min_rtt / 1000.0,
        },
    )


def load_groundtruth(path: str | Path) -> Trace:
    return record_trace(load_record(path))


# --- finding the record behind a measurement ----------------------------------------------


def _gt_dir(gt_dir: str | Path | None) -> Path:
    if gt_dir is not None:
        return Path(gt_dir)
    from ccscope.lab.lab import groundtruth_dir

    return groundtruth_dir()


def list_records(
    gt_dir: str | Path | None = None,
    *,
    cca: str | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
) -> list[Path]:
    """Sidecar paths, newest first; the start_ns in the file name filters without opening them."""
    root = _gt_dir(gt_dir)
    dirs = [root / cca] if cca else [d for d in root.glob("*") if d.is_dir()]
    out: list[tuple[int, Path]] = []
    for d in dirs:
        for p in d.glob("*.json"):
            try:
                start = int(p.name.split("_", 1)[0])
            except ValueError:
                continue
            if since_ns is not None and start < since_ns:
                continue
            if until_ns is not None and start > until_ns:
                continue
            out.append((start, p))
    out.sort(key=lambda x: x[0], reverse=True)
    return [p for _, p in out]


def find_record(
    run_id: str | None = None,
    trace: Trace | None = None,
    *,
    gt_dir: str | Path | None = None,
    wait_s: float = 0.0,
) -> GroundTruthRecord | None:
    """The record of `run_id` (the X-CCScope-Run header), else the one matching `trace` by
    server address + client port + time overlap. Waits up to `wait_s` for it to appear: the
    server writes a record only once the connection is over."""
    if run_id is None and trace is None:
        raise ValueError("find_record needs a run id or a trace")
    deadline = time.monotonic() + wait_s
    while True:
        rec = _find_once(run_id, trace, _gt_dir(gt_dir))
        if rec is not None or time.monotonic() >= deadline:
            return rec
        time.sleep(0.2)


def find_groundtruth(
    run_id: str | None = None,
    trace: Trace | None = None,
    *,
    gt_dir: str | Path | None = None,
    wait_s: float = 0.0,
) -> Trace | None:
    """Like find_record, as a Trace (None if there is none)."""
    rec = find_record(run_id, trace, gt_dir=gt_dir, wait_s=wait_s)
    return None if rec is None else record_trace(rec)


def _window(trace: Trace | None) -> tuple[int, int] | None:
    if trace is None or len(trace.t) == 0:
        return None
    return (int((trace.start_time + trace.t[0]) * 1e9), int((trace.start_time + trace.t[-1]) * 1e9))


def _find_once(run_id: str | None, trace: Trace | None, root: Path) -> GroundTruthRecord | None:
    if not root.is_dir():
        return None
    win = _window(trace)
    # Connections start (accept) within a few RTTs of the captured SYN; a minute covers any path.
    slack = 60 * 10**9
    paths = (
        list_records(root, since_ns=win[0] - slack, until_ns=win[1] + slack)
        if win
        else list_records(root)[:MAX_SCAN]
    )
    recs: list[GroundTruthRecord] = []
    for p in paths:
        try:
            recs.append(load_record(p))
        except LabError:
            continue  # a half-written or foreign file must not hide the others
    if run_id:
        hits = [r for r in recs if run_id in r.run_ids]
        if trace is not None and len(hits) > 1:
            hits = [r for r in hits if _matches_flow(r, trace, win)] or hits
        if hits:
            # Several connections of one run (a redirect, a retry): the biggest transfer wins.
            return max(hits, key=lambda r: (int(r.meta.get("bytes_acked", 0)), r.start_ns))
    if trace is not None:
        hits = [r for r in recs if _matches_flow(r, trace, win)]
        if hits:
            return max(hits, key=lambda r: _overlap(r, win))
    return None


def _overlap(rec: GroundTruthRecord, win: tuple[int, int] | None) -> int:
    if win is None:
        return 0
    return min(rec.end_ns, win[1]) - max(rec.start_ns, win[0])


def _matches_flow(rec: GroundTruthRecord, trace: Trace, win: tuple[int, int] | None) -> bool:
    # The client address may be rewritten by the measuring shell's NAT; the port rarely is.
    m = rec.meta
    if str(m["server"]["addr"]) != trace.flow.server:
        return False
    if int(m["client"]["port"]) != trace.flow.client_port:
        return False
    return _overlap(rec, win) > 0


# --- scoring ------------------------------------------------------------------------------


def _step_interp(t_truth: np.ndarray, v_truth: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Truth at times t, holding the previous sample ("previous"/zero-order hold)."""
    idx = np.searchsorted(t_truth, t, side="right") - 1
    return v_truth[np.clip(idx, 0, len(v_truth) - 1)].astype(np.float64)


def _handshake_rtt_s(truth: Trace, measured: Trace) -> float:
    srtt = truth.columns.get("srtt_ms")
    if srtt is not None:
        pos = srtt[srtt > 0]
        if len(pos):
            return float(pos[0]) / 1000.0  # the SYN-ACK's RTT: the first the server measured
    if measured.base_rtt_ms:
        return measured.base_rtt_ms / 1000.0
    return 0.0


def compare_bif(
    measured: Trace,
    truth: Trace,
    *,
    bdp_bytes: float | None = None,
    skip_rtts: float = 1.0,
    max_lag_ms: float | None = None,
    max_truth_gap_ms: float = 3.0,
) -> dict[str, Any]:
    """Error of `measured` BiF against ground truth over the time both cover.

    Truth is sampled at the measured timestamps with a step ("previous") interpolation; the
    first `skip_rtts` handshake RTTs of the common span are ignored (the capture sees the
    handshake, the server's samples start at accept). Reports MAE in bytes and in % of
    `bdp_bytes`, plus the lag (measured shifted by −lag) that minimises the MAE: a
    capture-aligned trace runs behind the sender by the one-way delay to the capture point.

    The truth is a 1 ms poll from user space, which can stall under load; where the two truth
    samples around a measured point are more than `max_truth_gap_ms` apart the truth is not
    known at that instant, so the point is left out (and `truth_coverage` says how many were
    kept). Within a gap the sender's BiF is only known to lie between the two samples around
    it: `mae_bytes_resolved` measures the error beyond that resolution.
    """
    base = truth.start_time
    tm = (measured.start_time - base) + measured.t
    tt = truth.t
    out: dict[str, Any] = {"points": 0, "bdp_bytes": bdp_bytes, "cca": truth.extra.get("cca")}
    if len(tm) == 0 or len(tt) == 0:
        out["error"] = "empty trace"
        return out
    rtt = _handshake_rtt_s(truth, measured)
    lo = max(float(tm[0]), float(tt[0])) + skip_rtts * rtt
    hi = min(float(tm[-1]), float(tt[-1]))
    sel = (tm >= lo) & (tm <= hi)
    out["skipped_s"] = round(skip_rtts * rtt, 6)
    if not np.any(sel):
        out["error"] = "the traces do not overlap in time"
        return out
    idx = np.searchsorted(tt, tm, side="right") - 1
    nxt = np.clip(idx + 1, 0, len(tt) - 1)
    prev = np.clip(idx, 0, len(tt) - 1)
    gap = np.where(idx + 1 < len(tt), tt[nxt] - tt[prev], tm - tt[prev])
    known = gap <= max_truth_gap_ms / 1000.0
    out["truth_coverage"] = round(float((sel & known).sum()) / max(1, int(sel.sum())), 4)
    sel &= known
    if not np.any(sel):
        out["error"] = "the ground truth has no samples dense enough over the trace"
        return out
    t = tm[sel]
    mv = measured.bif[sel].astype(np.float64)
    tv = _step_interp(tt, truth.bif, t)
    lo_v = np.minimum(truth.bif[prev[sel]], truth.bif[nxt[sel]]).astype(np.float64)
    hi_v = np.maximum(truth.bif[prev[sel]], truth.bif[nxt[sel]]).astype(np.float64)
    resolved = float((np.maximum(lo_v - mv, 0) + np.maximum(mv - hi_v, 0)).mean())
    err = mv - tv
    ae = np.abs(err)
    mae = float(ae.mean())
    truth_mean = float(tv.mean())
    out.update({
        "mae_bytes_resolved": round(resolved, 1),
        "mae_pct_bdp_resolved": _pct(resolved, bdp_bytes),
        "points": int(sel.sum()),
        "span_s": round(float(t[-1] - t[0]), 6),
        "mae_bytes": round(mae, 1),
        "mae_pct_bdp": _pct(mae, bdp_bytes),
        "mae_pct_mean_bif": _pct(mae, truth_mean),
        "bias_bytes": round(float(err.mean()), 1),
        "rmse_bytes": round(math.sqrt(float((err**2).mean())), 1),
        "p95_abs_bytes": round(float(np.percentile(ae, 95)), 1),
        "max_abs_bytes": round(float(ae.max()), 1),
        "truth_mean_bif": round(truth_mean, 1),
        "measured_mean_bif": round(float(mv.mean()), 1),
        "correlation": _corr(mv, tv),
    })  # fmt: skip
    # Best lag, searched on a 1 ms grid within ±max(RTT, 20 ms).
    span_ms = max_lag_ms if max_lag_ms is not None else max(rtt * 1000.0, 20.0)
    lags = np.arange(-math.ceil(span_ms), math.ceil(span_ms) + 1) / 1000.0
    best_lag, best_mae = 0.0, mae
    for lag in lags:
        tl = t - lag
        ok = (tl >= tt[0]) & (tl <= tt[-1])
        if ok.sum() < max(10, 0.5 * len(t)):
            continue
        m = float(np.abs(mv[ok] - _step_interp(tt, truth.bif, tl[ok])).mean())
        if m < best_mae:
            best_lag, best_mae = float(lag), m
    out.update({
        "best_lag_ms": round(best_lag * 1000.0, 3),
        "mae_bytes_best_lag": round(best_mae, 1),
        "mae_pct_bdp_best_lag": _pct(best_mae, bdp_bytes),
    })  # fmt: skip
    return out


def compare_pipe(measured: Trace, truth: Trace, **kw: Any) -> dict[str, Any]:
    """`compare_bif` for the pipe: the measured BiF less SACKed bytes against the sender's own
    packets in flight (TCP_INFO unacked - sacked - lost + retrans, in bytes)."""
    if "in_flight" not in truth.columns:
        return {"error": "the ground truth carries no in-flight column"}
    return compare_bif(measured.with_bif(measured.pipe), truth.with_bif(truth.columns["in_flight"]), **kw)


def _pct(x: float, ref: float | None) -> float | None:
    if not ref or ref <= 0:
        return None
    return round(100.0 * x / ref, 3)


def _corr(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < 3 or float(a.std()) == 0.0 or float(b.std()) == 0.0:
        return None
    return round(float(np.corrcoef(a, b)[0, 1]), 4)


def pipe_trace(truth: Trace, like: Trace | None = None) -> Trace:
    """The server's own pipe as a trace the classifier reads like a measured one: `bif` is the
    kernel's packets in flight, (unacked − sacked − lost + retrans) × MSS, sampled every
    millisecond, with no `sacked` column (so `Trace.pipe` is that series). `like` (the measured
    sender-aligned trace of the same download) lends its profile, RTTs and URL, so features are
    read on the same scale. The truth's own BiF stays beside it as `bif_truth`."""
    pipe = truth.columns.get("in_flight")
    if pipe is None:
        raise LabError("the ground truth carries no in-flight column")
    keep = ("cwnd_bytes", "pacing_rate", "srtt_ms", "delivery_rate", "ca_state")
    cols = {"bif_truth": truth.bif, **{k: truth.columns[k] for k in keep if k in truth.columns}}
    return Trace(
        flow=truth.flow,
        t=truth.t,
        bif=np.maximum(pipe, 0),
        start_time=truth.start_time,
        source="lab-groundtruth",
        profile=like.profile if like is not None else None,
        base_rtt_ms=like.base_rtt_ms if like is not None else truth.base_rtt_ms,
        internet_rtt_ms=like.internet_rtt_ms if like is not None else None,
        bytes_acked=truth.bytes_acked,
        object_url=like.object_url if like is not None else truth.object_url,
        partial=truth.partial or (like.partial if like is not None else False),
        alignment="sender",
        columns=cols,
        events=dict(truth.events),
        extra={**truth.extra, "series": "pipe: (unacked - sacked - lost + retrans) x mss, TCP_INFO"},
    )
