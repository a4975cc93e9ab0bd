"""A collection job whose server record came late: mended on resume, cut to the measurement."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ccscope.classifier.collected import NO_TRUTH, fill_missing_truth, load_index
from ccscope.lab.server import Request, write_record
from ccscope.lab.tcpinfo import build_tcp_info
from ccscope.trace import FlowKey, Trace

T0 = 1_700_000_000_000_000_000  # ns
MSS = 1448
KEY = "00aa11bb22cc33dd/cubic/run0"


def _late_record(gt: Path, run_id: str, seconds: float) -> None:
    """A server record that lasts `seconds`: the download's first half second, then a stalled
    connection (the client's shell is gone) until the kernel gives up."""
    samples = []
    for k in range(int(seconds * 1000)):
        live = k < 500
        acked = min(k, 500) * 2000
        inflight = 20 * MSS if live else 30 * MSS
        raw = build_tcp_info(
            state=1 if live else 9, snd_mss=MSS, snd_cwnd=20 if live else 1, unacked=inflight // MSS,
            rtt_us=20_000, min_rtt_us=20_000, bytes_acked=acked, bytes_sent=acked + inflight,
        )  # fmt: skip
        samples.append((T0 + k * 1_000_000, raw))
    req = Request("GET", "/obj/1000000", 200, 1_000_000, run_id, T0 + 5_000_000)
    write_record(
        gt, cca="cubic", scheme="https", server=("198.18.0.12", 443), client=("100.64.0.1", 40000),
        start_ns=T0, samples=samples, requests=[req], end_reason="client closed",
        sample_interval_ms=1.0,
    )  # fmt: skip


def _partial_job(root: Path) -> Path:
    out = root / KEY
    out.mkdir(parents=True)
    t = np.arange(0.0, 0.5, 0.001)
    sender = Trace(
        flow=FlowKey("198.18.0.12", 443, "100.64.0.1", 40000), t=t, bif=np.full(len(t), 20 * MSS),
        start_time=T0 / 1e9, source="pcap", alignment="sender",
    )  # fmt: skip
    sender_file = sender.save(out / "A.sender.trace.json")
    slots = {"A": {"profile": "nebby-A", "capped": True, "sender_trace": str(sender_file)}}
    rec = {
        "key": KEY, "cca": "cubic", "label": "cubic", "draw_id": "00aa11bb22cc33dd", "split": "train",
        "run": 0, "status": "partial", "reason": f"A: {NO_TRUTH}", "slots": slots,
    }  # fmt: skip
    result = {"status": "partial", "reason": rec["reason"], "slots": slots}
    (out / "result.json").write_text(json.dumps(result))
    (root / "index.jsonl").write_text(json.dumps(rec) + "\n")
    return out


def test_a_record_written_after_the_job_is_found_on_resume(tmp_path: Path) -> None:
    root, gt = tmp_path / "draws", tmp_path / "gt"
    out = _partial_job(root)
    assert fill_missing_truth(root, [gt]) == []  # no record yet: nothing changes, nothing breaks
    assert load_index(root)[KEY]["status"] == "partial"

    _late_record(gt, f"{KEY.replace('/', '-')}-nebby-A", seconds=3.0)
    assert fill_missing_truth(root, [gt]) == [KEY]
    rec = load_index(root)[KEY]
    assert rec["status"] == "ok" and rec["reason"] is None
    assert json.loads((out / "result.json").read_text())["status"] == "ok"
    truth = Trace.load(rec["slots"]["A"]["truth_trace"])
    # cut a second after the measured half second, not the record's three stalled seconds
    assert 1.4 <= truth.t[-1] <= 1.5
    assert fill_missing_truth(root, [gt]) == []  # mended once; the index holds the new line
