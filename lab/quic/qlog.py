"""A server's qlog -> its own bytes in flight and cwnd over time (the QUIC ground truth).

Reads the three shapes the lab's stacks write: JSON-SEQ (`.sqlog`, quiche and quic-go: a header
record with the reference time, then one event per record, times in ms from it) and JSON
(`.qlog`, aioquic: `traces[].events[]`, times in ms since the epoch). The metrics events are
`recovery:metrics_updated` (quic-go, aioquic) or `quic:recovery_metrics_updated` (quiche, which
writes only the fields that changed). Damaged records are skipped and counted.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ccscope.errors import LabError
from ccscope.trace import FlowKey, Trace

MAX_QLOG_BYTES = 512 * 1024 * 1024


@dataclass
class QlogSeries:
    t: np.ndarray  # seconds since the epoch
    bif: np.ndarray
    cwnd: np.ndarray
    srtt_ms: np.ndarray
    lost: list[float] = field(default_factory=list)  # epoch seconds of packet_lost events
    skipped: int = 0


def _epoch_of(ref: Any) -> float | None:
    """The reference time of a qlog header as epoch seconds."""
    if isinstance(ref, int | float):
        return float(ref) / 1000.0
    if isinstance(ref, dict):
        w = ref.get("wall_clock_time")
        if isinstance(w, str):
            try:
                s = w.rstrip("Z")
                frac = ""
                if "." in s:
                    s, frac = s.split(".", 1)
                base = dt.datetime.fromisoformat(s).replace(tzinfo=dt.UTC).timestamp()
                return base + (float("0." + frac) if frac else 0.0)
            except ValueError:
                return None
        if isinstance(ref.get("epoch"), int | float):
            return float(ref["epoch"]) / 1000.0
    return None


def _events(path: Path) -> tuple[list[dict[str, Any]], float, int]:
    """(events, time offset in epoch seconds to add to event time/1000, skipped records)."""
    raw = path.read_bytes()
    if len(raw) > MAX_QLOG_BYTES:
        raise LabError(f"{path}: qlog larger than {MAX_QLOG_BYTES} bytes")
    skipped = 0
    text = raw.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{") and "\x1e" not in text[:4096]:
        # One JSON document (aioquic); newline-delimited records are read below.
        try:
            doc = json.loads(text)
            evs: list[dict[str, Any]] = []
            offset = 0.0
            for tr in doc.get("traces", []):
                ref = (tr.get("common_fields") or {}).get("reference_time")
                off = _epoch_of(ref) if ref is not None else None
                offset = off or 0.0
                evs += [e for e in tr.get("events", []) if isinstance(e, dict)]
            return evs, offset, 0
        except ValueError:
            pass
    evs = []
    offset = 0.0
    for rec in text.replace("\x1e", "\n").splitlines():
        rec = rec.strip()
        if not rec:
            continue
        try:
            d = json.loads(rec)
        except ValueError:
            skipped += 1
            continue
        if not isinstance(d, dict):
            skipped += 1
            continue
        if "trace" in d or "qlog_format" in d or "file_schema" in d:
            tr = d.get("trace") or {}
            ref = (tr.get("common_fields") or {}).get("reference_time")
            off = _epoch_of(ref)
            if off is not None:
                offset = off
            continue
        evs.append(d)
    return evs, offset, skipped


def read_qlog(path: str | Path) -> QlogSeries:
    path = Path(path)
    try:
        evs, offset, skipped = _events(path)
    except OSError as e:
        raise LabError(f"cannot read qlog {path}: {e}") from e
    t: list[float] = []
    bif: list[int] = []
    cwnd: list[int] = []
    srtt: list[float] = []
    lost: list[float] = []
    cur_b, cur_c, cur_r = 0, 0, float("nan")
    for e in evs:
        name = str(e.get("name", ""))
        tm = e.get("time")
        if not isinstance(tm, int | float):
            skipped += 1
            continue
        ts = offset + float(tm) / 1000.0
        if name.endswith("packet_lost"):
            lost.append(ts)
            continue
        if not name.endswith("metrics_updated"):
            continue
        d = e.get("data") or {}
        if not isinstance(d, dict):
            skipped += 1
            continue
        b = d.get("bytes_in_flight")
        c = d.get("congestion_window", d.get("cwnd"))
        r = d.get("smoothed_rtt")
        if b is None and c is None and r is None:
            continue
        if isinstance(b, int | float):
            cur_b = int(b)
        if isinstance(c, int | float):
            cur_c = int(c)
        if isinstance(r, int | float):
            cur_r = float(r)
        t.append(ts)
        bif.append(cur_b)
        cwnd.append(cur_c)
        srtt.append(cur_r)
    order = np.argsort(np.asarray(t, dtype=np.float64), kind="stable")
    return QlogSeries(
        t=np.asarray(t, dtype=np.float64)[order],
        bif=np.asarray(bif, dtype=np.int64)[order],
        cwnd=np.asarray(cwnd, dtype=np.int64)[order],
        srtt_ms=np.asarray(srtt, dtype=np.float64)[order],
        lost=sorted(lost),
        skipped=skipped,
    )


def qlog_trace(path: str | Path, *, flow: FlowKey | None = None, label: str | None = None) -> Trace:
    """The qlog's series as a ground-truth Trace (bif, cwnd and srtt columns)."""
    s = read_qlog(path)
    if len(s.t) == 0:
        raise LabError(f"{path}: no metrics_updated events (was the qlog cut short?)")
    t0 = float(s.t[0])
    return Trace(
        flow=flow or FlowKey("0.0.0.0", 443, "0.0.0.0", 0, transport="quic"),
        t=s.t - t0,
        bif=s.bif,
        start_time=t0,
        source="lab-groundtruth",
        columns={"cwnd": s.cwnd, "srtt_ms": s.srtt_ms},
        events={"loss": [x - t0 for x in s.lost]},
        extra={"cca": label, "qlog": str(path), "skipped_records": s.skipped},
    )
