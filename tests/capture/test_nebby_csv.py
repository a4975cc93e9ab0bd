"""Nebby-style tshark CSV import, cross-checked against tshark on synthetic captures."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ccscope.capture.nebby_csv import traces_from_csv
from ccscope.capture.tcp_bif import flows_from_pcap
from ccscope.errors import TraceFormatError
from tests.capture.synth import (
    CLIENT6,
    PLAIN_BIF,
    SERVER6,
    bulk_flow,
    flow_csv,
    plain_flow,
    write_pcap,
)

NEBBY_FIELDS = [
    "frame.time_relative", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport",
    "tcp.seq", "tcp.ack", "tcp.len", "frame.len",
]  # fmt: skip
TSHARK = shutil.which("tshark") or "/usr/bin/tshark"


def tshark_csv(pcap: Path, fields: list[str], *extra: str, sep: str = ",") -> bytes:
    cmd = [TSHARK, "-n", "-r", str(pcap), "-T", "fields", "-E", "header=y",
           "-E", f"separator={sep}", *extra]  # fmt: skip
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, check=True, timeout=60)
    return out.stdout


def _same(pcap_res_trace, csv_trace) -> None:  # type: ignore[no-untyped-def]
    assert csv_trace.bif.tolist() == pcap_res_trace.bif.tolist()
    assert csv_trace.t.tolist() == pytest.approx(pcap_res_trace.t.tolist(), abs=1e-9)
    assert csv_trace.events["retransmit"] == pytest.approx(pcap_res_trace.events["retransmit"], abs=1e-9)
    assert csv_trace.bytes_acked == pcap_res_trace.bytes_acked
    assert csv_trace.internet_rtt_ms == pytest.approx(pcap_res_trace.internet_rtt_ms, abs=1e-6)
    assert csv_trace.source == "nebby-csv"


@pytest.mark.parametrize("flow", ["plain", "bulk", "wrap"])
def test_tshark_cross_check(tmp_path: Path, flow: str) -> None:
    f = {
        "plain": plain_flow(),
        "bulk": bulk_flow(n_data=800, loss=0.02),
        "wrap": bulk_flow(n_data=300, loss=0.02, server_isn=2**32 - 500),
    }[flow]
    pcap = write_pcap(tmp_path / "f.pcap", f.packets())
    want = flows_from_pcap(pcap).main
    # tshark's default relative sequence numbers, exactly the Nebby field list
    csv_rel = tshark_csv(pcap, NEBBY_FIELDS)
    got = traces_from_csv(csv_rel).main
    _same(want, got)
    assert str(got.flow) == str(want.flow)
    # raw sequence numbers give the same series
    raw = tshark_csv(pcap, NEBBY_FIELDS, "-o", "tcp.relative_sequence_numbers:FALSE")
    _same(want, traces_from_csv(raw).main)
    # with flags and window columns, dup-ACKs are recovered as well
    rich = tshark_csv(pcap, [*NEBBY_FIELDS, "tcp.flags", "tcp.window_size_value"], sep="\t")
    got = traces_from_csv(rich).main
    _same(want, got)
    assert got.events["dupack"] == pytest.approx(want.events["dupack"], abs=1e-9)


def test_tshark_ipv6_and_sender_alignment(tmp_path: Path) -> None:
    f = bulk_flow(n_data=300, server=SERVER6, client=CLIENT6, loss=0.02)
    pcap = write_pcap(tmp_path / "6.pcap", f.packets())
    want = flows_from_pcap(pcap, align="sender").main
    # Nebby's field list only has ip.*: IPv6 rows then carry ports only
    got = traces_from_csv(tshark_csv(pcap, NEBBY_FIELDS), align="sender").main
    _same(want, got)
    assert got.flow.server == "unknown" and got.alignment == "sender"
    fields = [*NEBBY_FIELDS, "ipv6.src", "ipv6.dst"]
    got = traces_from_csv(tshark_csv(pcap, fields), align="sender").main
    _same(want, got)
    assert got.flow.server == SERVER6


def test_columns_any_order_quoted_extra(tmp_path: Path) -> None:
    text = '"tcp.len","tcp.ack","extra","tcp.seq","tcp.dstport","tcp.srcport","frame.time_relative"\n'
    for t, s, d, seq, ack, ln in [
        (0.0, 40000, 443, 0, 0, 0),
        (0.05, 443, 40000, 0, 1, 0),
        (0.1, 40000, 443, 1, 1, 0),
        (0.16, 443, 40000, 1, 1, 100),
        (0.17, 443, 40000, 101, 1, 100),
        (0.2, 40000, 443, 1, 101, 0),
        (0.25, 40000, 443, 1, 201, 0),
    ]:
        text += f'"{ln}","{ack}","x","{seq}","{d}","{s}","{t}"\n'
    text += "garbage,row\n"
    text += '"1","2","x","3","4","nope","0.3"\n'
    text += '"","","","","","","0.31"\n'  # a non-TCP frame: empty tcp fields
    p = tmp_path / "n.csv"
    p.write_text(text)
    res = traces_from_csv(p)
    tr = res.main
    assert tr.bif.tolist() == [0, 1, 0, 100, 200, 100, 0]
    assert tr.flow.server_port == 443 and tr.flow.server == "unknown"
    assert res.stats["malformed"] == 2 and res.stats["non_tcp"] == 1
    assert tr.internet_rtt_ms == pytest.approx(50.0)


def test_server_by_payload_without_handshake(tmp_path: Path) -> None:
    text = "frame.time_relative,tcp.srcport,tcp.dstport,tcp.seq,tcp.ack,tcp.len\n"
    text += "0.0,8443,50000,1,1,1000\n0.1,50000,8443,1,1001,0\n"
    p = tmp_path / "n.csv"
    p.write_text(text)
    tr = traces_from_csv(p).main
    assert tr.flow.server_port == 8443 and tr.bif.tolist() == [1000, 0]
    assert tr.internet_rtt_ms is None and tr.extra["handshake"] is False


def test_missing_columns_named(tmp_path: Path) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("frame.time_relative,ip.src,tcp.srcport\n0.1,1.2.3.4,80\n")
    with pytest.raises(TraceFormatError, match=r"bad\.csv.*tcp\.dstport, tcp\.len, tcp\.seq"):
        traces_from_csv(p)
    with pytest.raises(TraceFormatError, match="empty CSV"):
        traces_from_csv(b"\n\n")
    with pytest.raises(TraceFormatError, match="not a CSV"):
        traces_from_csv(plain_flow_pcap_bytes(tmp_path))


def plain_flow_pcap_bytes(tmp_path: Path) -> bytes:
    return write_pcap(tmp_path / "p.pcap", plain_flow().packets()).read_bytes()


def test_plain_csv_reference_values(tmp_path: Path) -> None:
    csv = tshark_csv(write_pcap(tmp_path / "p.pcap", plain_flow().packets()), NEBBY_FIELDS)
    assert traces_from_csv(csv).main.bif.tolist() == PLAIN_BIF


def test_absurd_numbers_are_malformed_rows() -> None:
    good = flow_csv(plain_flow(), flags=True)
    header, *rows = good.splitlines()
    bad = [
        "9" * 25 + ".0,10.0.0.2,192.0.2.10,40000,443,1,1,0,60,0x0010,65535",  # time
        "0.5,10.0.0.2,192.0.2.10,40000,443,1,1,0,60,0x0010," + "9" * 25,  # window
        "0.5,10.0.0.2,192.0.2.10,70000,443,1,1,0,60,0x0010,65535",  # port
        "0.5,10.0.0.2,192.0.2.10,40000,443,-5,1,0,60,0x0010,65535",  # seq
        "nan,10.0.0.2,192.0.2.10,40000,443,1,1,0,60,0x0010,65535",  # time
        "0.5,10.0.0.2,2001:db8::1,40000,443,1,1,0,60,0x0010,65535",  # mixed families
    ]
    res = traces_from_csv("\n".join([header, *rows, *bad]).encode())
    assert res.main.bif.tolist() == PLAIN_BIF
    assert res.stats["malformed"] == len(bad)
