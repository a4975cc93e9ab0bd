"""pcap -> BiF traces: hand-checked values, events, wrap, IPv6, alignment, error paths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ccscope.capture.packets import ipv4_tcp, ipv6_tcp, tcp_header
from ccscope.capture.pcap import LINKTYPE_EN10MB, PcapReader
from ccscope.capture.tcp_bif import (
    LiveCapture,
    flows_from_pcap,
    live_sender_trace,
    traces_from_packets,
    traces_from_records,
    unwrap32,
)
from ccscope.errors import CaptureError
from ccscope.profile import get_profile
from ccscope.trace import Trace
from tests.capture.synth import (
    CLIENT6,
    NS,
    PLAIN_BIF,
    SERVER6,
    TCP_ACK,
    TCP_FIN,
    TCP_RST,
    TCP_SYN,
    Flow,
    Pkt,
    bulk_flow,
    ethernet,
    plain_flow,
    write_pcap,
)


def reference(flow: Flow, shift: float = 0.0) -> tuple[list[int], int, int]:
    """Naive per-packet state machine on the relative numbers the flow was built from.

    With `shift`, data packets move `shift` earlier and ACKs `shift` later (sender alignment).
    """
    d = round(shift * NS)  # integer ns, and ties keep capture order, like the implementation
    pkts = sorted(
        flow.pkts,
        key=lambda p: round(p.t * NS) - d if p.from_server else round(p.t * NS) + d,
    )
    mse = mack = 0
    last_win = None
    bif, retx, dup = [], 0, 0
    for p in pkts:
        if p.from_server:
            if p.plen and p.seq < mse:
                retx += 1
            mse = max(mse, p.seq + p.plen + bool(p.flags & TCP_SYN) + bool(p.flags & TCP_FIN))
        else:
            if p.flags & TCP_ACK:
                if (
                    p.plen == 0
                    and not p.flags & (TCP_SYN | TCP_FIN | TCP_RST)
                    and p.ack == mack
                    and p.window == last_win
                    and mse > mack
                ):
                    dup += 1
                mack = max(mack, p.ack)
            last_win = p.window
        bif.append(max(0, mse - mack))
    return bif, retx, dup


def test_plain_transfer_exact(tmp_path: Path) -> None:
    p = write_pcap(tmp_path / "plain.pcap", plain_flow().packets())
    res = flows_from_pcap(p, object_url="https://example.test/big", profile=get_profile("A"))
    assert len(res.traces) == 1 and not res.partial
    tr = res.main
    assert tr.bif.tolist() == PLAIN_BIF
    assert tr.t[0] == 0.0 and tr.t[-1] == pytest.approx(0.35)
    assert tr.start_time == pytest.approx(1_700_000_000.0)
    assert str(tr.flow) == "tcp 192.0.2.10:443 -> 10.0.0.2:40000"
    assert tr.internet_rtt_ms == pytest.approx(50.0)
    assert tr.extra["visible_rtt_ms"] == pytest.approx(40.0)
    assert tr.base_rtt_ms == pytest.approx(90.0)
    assert tr.bytes_acked == 300
    assert tr.events == {"retransmit": [], "dupack": []}
    assert tr.alignment == "capture" and tr.source == "pcap"
    assert tr.object_url == "https://example.test/big"
    assert tr.profile is not None and tr.profile["name"] == "A"
    assert res.stats["packets"] == 13 and res.stats["tcp"] == 13
    # the trace survives the shared on-disk format
    back = Trace.load(tr.save(tmp_path / "t.json.gz"))
    assert back.bif.tolist() == PLAIN_BIF and back.internet_rtt_ms == tr.internet_rtt_ms


def test_retransmissions_and_dupacks(tmp_path: Path) -> None:
    f = Flow()
    f.handshake()
    f.s(0.16, 1, 100, ack=101)
    f.s(0.17, 101, 100, ack=101)  # lost after the capture point
    f.s(0.18, 201, 100, ack=101)
    f.s(0.19, 301, 100, ack=101)
    f.c(0.26, 101, seq=101)  # covers the first segment
    f.c(0.28, 101, seq=101)  # dup 1
    f.c(0.29, 101, seq=101)  # dup 2
    f.c(0.295, 101, seq=101, window=30000)  # window update: not a dup
    f.s(0.30, 101, 100, ack=101)  # retransmission
    f.c(0.40, 401, seq=101)
    f.s(0.41, 401, 0, flags=TCP_FIN | TCP_ACK, ack=101)
    f.c(0.50, 402, seq=101, flags=TCP_FIN | TCP_ACK)
    p = write_pcap(tmp_path / "rx.pcap", f.packets())
    tr = flows_from_pcap(p).main
    assert tr.bif.tolist() == [0, 1, 0, 0, 100, 200, 300, 400, 300, 300, 300, 300, 300, 0, 1, 0]
    assert tr.events["retransmit"] == pytest.approx([0.30])
    assert tr.events["dupack"] == pytest.approx([0.28, 0.29])
    # Karn: the retransmitted segment's samples are skipped; the first segment gives 100 ms
    assert tr.extra["visible_rtt_ms"] == pytest.approx(100.0)
    assert reference(f) == (tr.bif.tolist(), 1, 2)


@pytest.mark.parametrize("isn", [0, 1_000_000, 2**32 - 150, 2**32 - 1, 2**31 - 7])
def test_seq_wrap_matches_reference(tmp_path: Path, isn: int) -> None:
    f = bulk_flow(n_data=400, loss=0.03, seed=isn % 97, server_isn=isn, client_isn=2**32 - 3)
    tr = flows_from_pcap(write_pcap(tmp_path / "w.pcap", f.packets())).main
    bif, retx, dup = reference(f)
    assert tr.bif.tolist() == bif
    assert len(tr.events["retransmit"]) == retx > 0
    assert len(tr.events["dupack"]) == dup
    data_end = max(p.seq + p.plen for p in f.pkts if p.from_server and p.plen)
    assert tr.extra["payload_bytes"] == data_end - 1
    assert tr.bytes_acked == data_end - 1  # the client acknowledged everything (and the FIN)


def test_unwrap32_long_transfer() -> None:
    true = np.arange(0, 3 * 2**32, 2**30, dtype=np.int64) + 12345
    assert unwrap32(true % 2**32).tolist() == true.tolist()
    assert unwrap32(np.array([2**32 - 10, 5])).tolist() == [-10, 5]


@pytest.mark.parametrize("ext", [None, [(0, b"\x01\x04\x00\x00\x00\x00"), (60, bytes(6))]])
def test_ipv6_same_as_ipv4(tmp_path: Path, ext: list[tuple[int, bytes]] | None) -> None:
    f4 = bulk_flow(n_data=300, loss=0.02)
    f6 = bulk_flow(n_data=300, loss=0.02, server=SERVER6, client=CLIENT6)
    f6.v6_ext = ext
    t4 = flows_from_pcap(write_pcap(tmp_path / "4.pcap", f4.packets())).main
    t6 = flows_from_pcap(write_pcap(tmp_path / "6.pcap", f6.packets())).main
    assert t6.bif.tolist() == t4.bif.tolist()
    assert t6.events == t4.events
    assert t6.flow.server == "2001:db8::10" and t6.flow.client == "2001:db8:1::2"
    assert t6.internet_rtt_ms == t4.internet_rtt_ms


def test_sender_alignment_shift(tmp_path: Path) -> None:
    p = write_pcap(tmp_path / "plain.pcap", plain_flow().packets())
    tr = flows_from_pcap(p, align="sender").main
    assert tr.alignment == "sender"
    # data seen at t left the server 25 ms earlier; ACKs reach it 25 ms later
    assert tr.bif.tolist() == [0, 1, 0, 0, 0, 100, 200, 300, 200, 201, 1, 0, 0]
    assert tr.start_time == pytest.approx(1_700_000_000.025)
    assert tr.t.tolist() == pytest.approx([0, 0, 0.1, 0.1, 0.1, 0.11, 0.12, 0.16, 0.2, 0.21, 0.25, 0.3, 0.3])
    assert reference(plain_flow(), shift=0.025)[0] == tr.bif.tolist()


def test_sender_alignment_bulk_matches_reference(tmp_path: Path) -> None:
    f = bulk_flow(n_data=1000, loss=0.01, rtt_internet=0.08)
    tr = flows_from_pcap(write_pcap(tmp_path / "b.pcap", f.packets()), align="sender").main
    bif, retx, _ = reference(f, shift=0.04)  # dup-ACKs are judged in capture order
    assert tr.bif.tolist() == bif
    assert len(tr.events["retransmit"]) == retx
    assert np.all(np.diff(tr.t) >= 0)
    # shifting moves BiF up: data counts as sent earlier, ACKs as received later
    cap = flows_from_pcap(write_pcap(tmp_path / "b.pcap", f.packets())).main
    assert tr.bif.mean() > cap.bif.mean()


def test_no_handshake_error(tmp_path: Path) -> None:
    f = Flow()
    f.s(0.1, 1, 100)
    f.s(0.2, 101, 100)
    f.c(0.3, 201)
    p = write_pcap(tmp_path / "nh.pcap", f.packets())
    with pytest.raises(CaptureError, match="no handshake"):
        flows_from_pcap(p)


def test_no_handshake_flow_skipped_next_to_good_one(tmp_path: Path) -> None:
    bad = Flow(cport=40001)
    bad.s(0.1, 1, 1000)
    bad.c(0.2, 1001)
    pk = sorted(plain_flow().packets() + bad.packets())
    res = flows_from_pcap(write_pcap(tmp_path / "mix.pcap", pk))
    assert len(res.traces) == 1 and res.main.flow.client_port == 40000
    assert res.stats["no_handshake"] == 1
    assert [r for _, r in res.skipped] == ["no handshake"]


def test_flows_sorted_by_payload_and_min_payload(tmp_path: Path) -> None:
    small = plain_flow(cport=40001)
    big = bulk_flow(n_data=50, cport=40002)
    empty = Flow(cport=40003).handshake()
    pk = sorted(small.packets() + big.packets() + empty.packets())
    p = write_pcap(tmp_path / "many.pcap", pk)
    res = flows_from_pcap(p)
    assert [t.flow.client_port for t in res.traces] == [40002, 40001]
    assert res.stats["flows"] == 3 and res.stats["too_small"] == 1
    res = flows_from_pcap(p, min_payload_bytes=1000)
    assert [t.flow.client_port for t in res.traces] == [40002]


def test_rst_ends_flow_and_port_reuse_splits(tmp_path: Path) -> None:
    f = plain_flow()
    f.pkts = f.pkts[:9]  # up to the third data segment
    f.pkts.append(Pkt(0.22, False, 101, 201, TCP_RST | TCP_ACK))
    f.pkts.append(Pkt(0.23, True, 301, 101, TCP_ACK, 100))  # after the RST: ignored
    g = plain_flow(server_isn=77_777, client_isn=99_999)  # same 4-tuple, new connection
    for p in g.pkts:
        p.t += 1.0
    pk = f.packets() + g.packets()
    res = flows_from_pcap(write_pcap(tmp_path / "reuse.pcap", pk))
    assert len(res.traces) == 2
    first = min(res.traces, key=lambda t: t.start_time)
    second = max(res.traces, key=lambda t: t.start_time)
    assert first.bif.tolist() == [*PLAIN_BIF[:9], 100]
    assert second.bif.tolist() == PLAIN_BIF


def test_non_tcp_and_fragments_counted(tmp_path: Path) -> None:
    base = plain_flow().packets()
    ts = base[0][0]
    src, dst = bytes([10, 0, 0, 2]), bytes([192, 0, 2, 10])
    udp = ipv4_tcp(src, dst, b"\x00\x35\x00\x35\x00\x10\x00\x00", 8, proto=17)
    icmp = ipv4_tcp(src, dst, b"\x08\x00\x00\x00\x00\x01\x00\x01", 0, proto=1)
    tcp = tcp_header(40000, 443, 1, 1, TCP_ACK)
    frag_first = ipv4_tcp(src, dst, tcp, 1000, frag=0x2000)  # MF
    frag_later = ipv4_tcp(src, dst, b"\x00" * 24, 0, frag=0x00B9)  # offset only
    v6frag = ipv6_tcp(bytes(16), bytes(16), tcp, 10, ext=[(44, bytes(6))])
    garbage = (b"\x45\x00\x00\x05" + bytes(16), 20)  # total length < header length
    extra = [(ts + i, *pkt) for i, pkt in
             enumerate([udp, icmp, frag_first, frag_later, v6frag, garbage])]  # fmt: skip
    res = flows_from_pcap(write_pcap(tmp_path / "mix.pcap", sorted(base + extra)))
    assert res.main.bif.tolist() == PLAIN_BIF
    st = res.stats
    assert (st["non_tcp"], st["fragments"], st["malformed"]) == (2, 3, 1)
    assert st["packets"] == len(base) + len(extra)


def test_ethernet_non_ip_counted(tmp_path: Path) -> None:
    pk = plain_flow().packets()
    arp = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x06" + bytes(28)
    with open(tmp_path / "e.pcap", "wb") as fh:
        from ccscope.capture.pcap import PcapWriter

        w = PcapWriter(fh, linktype=LINKTYPE_EN10MB)
        w.write(pk[0][0] - 1, arp)
        for ts, ip, wire in pk:
            w.write(ts, ethernet(ip), wire + 14)
        w.write(pk[-1][0] + 1, b"\x00" * 10)  # shorter than an Ethernet header
        w.close()
    res = flows_from_pcap(tmp_path / "e.pcap")
    assert res.main.bif.tolist() == PLAIN_BIF
    assert res.stats["non_ip"] == 1 and res.stats["malformed"] == 1


def test_truncated_capture_is_partial(tmp_path: Path) -> None:
    p = write_pcap(tmp_path / "t.pcap", plain_flow().packets())
    data = p.read_bytes()
    p.write_bytes(data[:-7])  # kill the writer mid-record
    res = flows_from_pcap(p)
    assert res.partial and res.stats["truncated"] == 1
    assert res.main.partial
    assert res.main.bif.tolist() == PLAIN_BIF[:-1]


def test_empty_and_non_tcp_captures(tmp_path: Path) -> None:
    p = write_pcap(tmp_path / "empty.pcap", [])
    with pytest.raises(CaptureError, match="no TCP segments"):
        flows_from_pcap(p)
    with pytest.raises(CaptureError, match="unknown alignment"):
        flows_from_pcap(p, align="server")


def test_traces_from_packets_equals_fast_path(tmp_path: Path) -> None:
    f = bulk_flow(n_data=500, loss=0.02, server=SERVER6, client=CLIENT6)
    f.v6_ext = [(60, bytes(6))]
    pk = sorted(f.packets() + bulk_flow(n_data=200, cport=41000).packets())
    p = write_pcap(tmp_path / "x.pcap", pk)
    fast = flows_from_pcap(p, align="sender")
    slow = traces_from_packets(PcapReader(p), align="sender")
    assert len(fast.traces) == len(slow.traces) == 2
    for a, b in zip(fast.traces, slow.traces, strict=True):
        assert a.flow == b.flow
        assert a.bif.tolist() == b.bif.tolist()
        assert a.t.tolist() == b.t.tolist()
        assert a.events == b.events
    # float-seconds timestamps work too
    fl = traces_from_packets((ts / NS, ip, n) for ts, ip, n in pk)
    assert fl.main.bif.tolist() == flows_from_pcap(p).main.bif.tolist()


def test_10k_packet_capture_is_deterministic(tmp_path: Path) -> None:
    # Speed is bench/classifier's business (pcap -> verdict per second); here only behaviour.
    p = write_pcap(tmp_path / "bulk.pcap", bulk_flow(n_data=6700, loss=0.01).packets())
    a, b = flows_from_pcap(p), flows_from_pcap(p)
    assert a.stats["packets"] > 10_000
    assert a.main.bif.tolist() == b.main.bif.tolist() and a.main.t.tolist() == b.main.t.tolist()


def test_traces_from_records() -> None:
    f = plain_flow()
    recs = []
    for p in f.pkts:
        if p.from_server:
            recs.append((p.t, f.server, f.sport, f.client, f.cport, f.server_isn + p.seq,
                         f.client_isn + p.ack, p.flags, p.plen))  # fmt: skip
        else:
            recs.append((p.t, f.client, f.cport, f.server, f.sport, f.client_isn + p.seq,
                         f.server_isn + p.ack, p.flags, p.plen))  # fmt: skip
    tr = traces_from_records(recs).main
    assert tr.bif.tolist() == PLAIN_BIF and tr.internet_rtt_ms == pytest.approx(50.0)


def test_live_capture_reads_a_growing_pcap_like_a_whole_parse(tmp_path: Path) -> None:
    # Adaptive stopping reads the capture while ccscope-link writes it: each read parses only
    # the new records (a record cut at the end waits for the next read) and must give exactly
    # the trace a parse of the whole file so far gives.
    whole = write_pcap(tmp_path / "whole.pcap", bulk_flow(n_data=3000, loss=0.02).packets()).read_bytes()
    grow = tmp_path / "grow.pcap"
    grow.write_bytes(b"")
    live = LiveCapture(grow)
    prof = get_profile("A")
    with pytest.raises(CaptureError, match="no pcap header yet"):
        live_sender_trace(live, profile=prof)
    compared = 0
    for cut in [*range(20, len(whole), 4_999), len(whole)]:  # mostly inside a record
        grow.write_bytes(whole[:cut])
        try:
            want = flows_from_pcap(grow, align="sender", profile=prof).main
        except CaptureError:
            with pytest.raises(CaptureError):
                live_sender_trace(live, profile=prof)
            continue
        got = live_sender_trace(live, profile=prof)
        assert got.t.tolist() == want.t.tolist() and got.bif.tolist() == want.bif.tolist()
        assert got.to_dict()["meta"] == want.to_dict()["meta"]
        assert got.columns.keys() == want.columns.keys()
        assert all(np.array_equal(got.columns[k], want.columns[k]) for k in want.columns)
        compared += 1
    assert compared > 20
    assert live._done == len(whole)  # every record parsed once, none left over


def test_live_capture_refuses_what_is_not_a_classic_pcap(tmp_path: Path) -> None:
    p = tmp_path / "x.pcap"
    p.write_bytes(b"\x0a\x0d\x0d\x0a" + bytes(40))  # a pcapng section header: not what the link writes
    with pytest.raises(CaptureError):
        live_sender_trace(LiveCapture(p))
