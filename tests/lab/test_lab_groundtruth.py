"""Ground-truth records: writing, loading as Traces, matching to measurements, scoring."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ccscope.lab.groundtruth import (
    compare_bif,
    find_groundtruth,
    find_record,
    list_records,
    load_groundtruth,
)
from ccscope.lab.server import CSV_COLUMNS, Request, write_record
from ccscope.lab.tcpinfo import build_tcp_info, parse_tcp_info
from ccscope.trace import FlowKey, Trace

T0 = 1_700_000_000_000_000_000  # ns
MSS = 1448


def _bif_shape(k: int) -> int:
    """A sawtooth: what a loss-based CCA's BiF roughly looks like."""
    return 0 if k < 20 else (k % 200) * 100 + 2000


def _record(gt: Path, *, run_id: str | None, client_port: int, start_ns: int = T0,
            n: int = 1000) -> Path:  # fmt: skip
    samples = []
    acked = 0
    for k in range(n):
        bif = _bif_shape(k) if k < n - 1 else 0  # all acknowledged at the end
        acked += 1000
        raw = build_tcp_info(
            state=1, snd_mss=MSS, snd_cwnd=10 + k % 50, unacked=bif // MSS, rtt_us=20_000,
            min_rtt_us=20_000, bytes_acked=acked, bytes_sent=acked + bif + 500,
            bytes_retrans=500, pacing_rate=(1 << 64) - 1 if k == 0 else 125_000,
            total_retrans=1 if k >= 500 else 0,
        )  # fmt: skip
        samples.append((start_ns + k * 1_000_000, raw))
    req = Request("GET", "/obj/1000000", 200, 1_000_000, run_id, start_ns + 5_000_000)
    return write_record(
        gt, cca="cubic", scheme="https", server=("198.18.0.12", 443),
        client=("100.64.0.1", client_port), start_ns=start_ns, samples=samples,
        requests=[req], end_reason="client closed", sample_interval_ms=1.0,
    )  # fmt: skip


def _measured(shift_s: float, offset: int, port: int = 40000) -> Trace:
    # Mid-way between the truth's 1 ms samples, so no timestamp sits on a float boundary; the
    # last truth sample (all acked, BiF 0) is left out.
    t = np.arange(0, 0.998, 0.0005) + 0.00025
    k = np.floor(t * 1000).astype(int)
    bif = np.array([_bif_shape(int(x)) for x in k]) + offset
    return Trace(
        flow=FlowKey("198.18.0.12", 443, "100.64.0.6", port),
        t=t,
        bif=bif,
        start_time=(T0 / 1e9) + shift_s,
        source="pcap",
    )


def test_record_roundtrip_to_trace(tmp_path: Path) -> None:
    p = _record(tmp_path, run_id="run-1", client_port=40000)
    assert p.name == f"{T0}_100.64.0.1_40000.json"
    header = (p.with_suffix(".csv")).read_text().splitlines()[0].split(",")
    assert tuple(header) == CSV_COLUMNS
    tr = load_groundtruth(p)
    assert tr.source == "lab-groundtruth" and tr.alignment == "sender"
    assert tr.flow == FlowKey("198.18.0.12", 443, "100.64.0.1", 40000)
    assert tr.start_time == pytest.approx(T0 / 1e9)
    assert len(tr.t) == 1000 and tr.t[1] == pytest.approx(0.001)
    assert tr.bif[100] == _bif_shape(100) and tr.bif[-1] == 0
    assert tr.columns["cwnd_bytes"][3] == 13 * MSS
    assert tr.columns["srtt_ms"][0] == pytest.approx(20.0)
    assert tr.columns["pacing_rate"][0] == np.iinfo(np.int64).max  # "unlimited", clipped
    assert tr.extra["cca"] == "cubic" and tr.extra["run_id"] == "run-1"
    assert tr.events["retransmit"] == [pytest.approx(0.5)]
    assert tr.object_url == "https://cubic.lab.test/obj/1000000"
    assert not tr.partial
    Trace.from_dict(tr.to_dict())  # serialisable like any trace


def test_parse_matches_build() -> None:
    i = parse_tcp_info(build_tcp_info(bytes_sent=10, bytes_retrans=2, bytes_acked=3, rtt_us=7))
    assert (i.bytes_sent, i.bytes_retrans, i.bytes_acked, i.rtt_us, i.bif) == (10, 2, 3, 7, 5)


def test_find_by_run_id_then_by_flow(tmp_path: Path) -> None:
    _record(tmp_path, run_id="a", client_port=40000)
    _record(tmp_path, run_id="b", client_port=40001, start_ns=T0 + 10**9)
    _record(tmp_path, run_id=None, client_port=40002, start_ns=T0 + 3 * 10**9)
    assert len(list_records(tmp_path)) == 3
    rec = find_record("b", gt_dir=tmp_path)
    assert rec is not None and rec.meta["client"]["port"] == 40001
    # No run id: server address + client port + time overlap.
    tr = find_groundtruth(trace=_measured(3.0, 0, port=40002), gt_dir=tmp_path)
    assert tr is not None and tr.flow.client_port == 40002
    assert find_groundtruth(trace=_measured(30.0, 0, port=40002), gt_dir=tmp_path) is None
    assert find_groundtruth("zzz", gt_dir=tmp_path) is None
    assert find_groundtruth("zzz", gt_dir=tmp_path / "missing", wait_s=0.3) is None


def test_compare_bif_exact_offset_and_lag(tmp_path: Path) -> None:
    truth = load_groundtruth(_record(tmp_path, run_id="x", client_port=40000))
    same = compare_bif(_measured(0.0, 0), truth, bdp_bytes=10_000)
    assert same["points"] > 1000
    assert same["mae_bytes"] == 0 and same["skipped_s"] == pytest.approx(0.02)
    off = compare_bif(_measured(0.0, 1000), truth, bdp_bytes=10_000)
    assert off["mae_bytes"] == pytest.approx(1000) and off["bias_bytes"] == pytest.approx(1000)
    assert off["mae_pct_bdp"] == pytest.approx(10.0)
    # A copy running 7 ms late (what a capture point sees) is found at lag +7 ms.
    late = compare_bif(_measured(0.007, 0), truth, bdp_bytes=10_000)
    assert late["mae_bytes"] > 0
    assert late["best_lag_ms"] == pytest.approx(7.0) and late["mae_bytes_best_lag"] == 0
    apart = compare_bif(_measured(50.0, 0), truth)
    assert apart["points"] == 0 and "overlap" in apart["error"]
