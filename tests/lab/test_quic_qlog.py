"""The QUIC ground truth from a server's qlog: both file shapes, quiche's partial metrics and its
loss counter, damaged records, and the truth trace in the TCP truth's shape."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ccscope.lab.quic.groundtruth import TRUTH_STEP_S, truth_trace
from ccscope.lab.quic.qlog import read_qlog
from ccscope.trace import FlowKey, Trace

RS = "\x1e"


def _seq(path: Path, events: list[dict[str, object] | str]) -> Path:
    head = {"qlog_format": "JSON-SEQ", "trace": {"common_fields": {
        "reference_time": {"wall_clock_time": "2026-11-25T15:00:00.000Z"}}}}  # fmt: skip
    recs = [json.dumps(head), *(e if isinstance(e, str) else json.dumps(e) for e in events)]
    path.write_text("".join(RS + r + "\n" for r in recs))
    return path


def _metrics(t: float, **data: object) -> dict[str, object]:
    return {"time": t, "name": "quic:recovery_metrics_updated", "data": data}


def test_quiche_seq_qlog(tmp_path: Path) -> None:
    sent = {"time": 1.0, "name": "quic:packet_sent", "data": {"header": {"packet_number": 1}}}
    q = _seq(tmp_path / "s.sqlog", [
        _metrics(0.5, smoothed_rtt=40.0, congestion_window=12000),
        sent,
        _metrics(10.0, bytes_in_flight=2400),
        '{"time": 11, "name": "quic:recovery_metrics_updated", "data": {"bytes_in',  # cut short
        _metrics(20.0, bytes_in_flight=1200, cf_lost_packets={"total": 2, "delta": 2},
                 congestion_window=6000),
    ])  # fmt: skip
    s = read_qlog(q)
    assert s.t[0] == pytest.approx(1795618800.0005)
    assert s.bif.tolist() == [0, 2400, 1200] and s.cwnd.tolist() == [12000, 12000, 6000]
    assert s.srtt_ms.tolist() == [40.0, 40.0, 40.0]
    assert s.lost == [pytest.approx(1795618800.020)] * 2 and s.skipped == 1


def test_aioquic_json_qlog_losses(tmp_path: Path) -> None:
    doc = {"traces": [{"common_fields": {"reference_time": 1795618800000}, "events": [
        {"time": 1795618800000.0, "name": "recovery:metrics_updated",
         "data": {"bytes_in_flight": 1000, "cwnd": 14000, "smoothed_rtt": 30.0}},
        {"time": 1795618800005.0, "name": "recovery:packet_lost", "data": {}},
        {"time": 1795618800006.0, "name": "recovery:metrics_updated", "data": {"bytes_in_flight": 0}},
    ]}]}  # fmt: skip
    p = tmp_path / "a.qlog"
    p.write_text(json.dumps(doc))
    s = read_qlog(p)
    assert s.bif.tolist() == [1000, 0] and len(s.lost) == 1


def test_truth_trace_is_the_tcp_truths_shape(tmp_path: Path) -> None:
    q = _seq(tmp_path / "s.sqlog", [
        _metrics(0.0, congestion_window=12000),
        _metrics(2.0, smoothed_rtt=40.0, bytes_in_flight=2400),
        _metrics(50.0, bytes_in_flight=3600, cf_lost_packets={"total": 1, "delta": 1}),
        _metrics(100.0, bytes_in_flight=0),
    ])  # fmt: skip
    flow = FlowKey("198.18.53.151", 443, "100.64.0.6", 5000, transport="quic")
    like = Trace(flow=flow, t=np.array([0.0, 0.1]), bif=np.array([0, 1]), start_time=1795618800.0,
                 profile={"name": "A-quic", "mtu": 1280}, base_rtt_ms=120.0, internet_rtt_ms=20.0,
                 bytes_acked=5000, object_url="https://cubic.quiche.lab.test/obj/5000",
                 alignment="sender")  # fmt: skip
    rec = {"qlog": str(q), "label": "quiche:cubic", "stack": "quiche", "run_id": "r1"}
    t = truth_trace(rec, like=like)
    assert t.source == "lab-groundtruth" and t.alignment == "sender" and t.transport == "quic"
    assert t.flow == flow and t.profile == like.profile and t.base_rtt_ms == 120.0
    assert (t.internet_rtt_ms, t.bytes_acked, t.object_url) == (20.0, 5000, like.object_url)
    assert len(t.t) == 101 and np.allclose(np.diff(t.t), TRUTH_STEP_S)
    # the value after the last event at or before each millisecond (epoch floats: +-1 us)
    assert t.bif[1] == 0 and t.bif[3] == 2400 and t.bif[51] == 3600 and t.bif[-1] == 0
    assert {"bif_truth", "cwnd_bytes", "srtt_ms"} <= set(t.columns)
    assert np.isfinite(t.columns["srtt_ms"]).all() and t.columns["srtt_ms"][0] == 40.0
    assert t.events["retransmit"] == [pytest.approx(0.05)] and t.extra["cca"] == "quiche:cubic"
    again = Trace.load(t.save(tmp_path / "A.truth.trace.json.gz"))
    assert again.bif.tolist() == t.bif.tolist()
