"""QUIC bytes in flight from header-level captures (capture/quic_bif.py): header parsing, the
published heuristic, and the link estimator against a server simulated apart from it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ccscope.capture.quic_bif import (
    K_HANDSHAKE,
    K_INITIAL,
    K_NOT_QUIC,
    K_RETRY,
    K_SHORT,
    K_UNKNOWN_VERSION,
    K_VN,
    QUIC_V2,
    LinkModel,
    classify_header,
    quic_flows_from_pcap,
    read_quic,
    replay_downlink,
    traces_from_quic,
)
from ccscope.errors import CaptureError
from ccscope.profile import get_profile
from tests.capture.quic_synth import CLIENT, SERVER, ipv4_udp, long_header, pcap_bytes, short_header, simulate


def test_headers_are_read_without_trusting_them() -> None:
    assert classify_header(long_header(0))[0] == K_INITIAL
    assert classify_header(long_header(2))[0] == K_HANDSHAKE
    assert classify_header(long_header(3))[0] == K_RETRY
    # QUIC v2 renumbers the long-header types (RFC 9369): 1 is Initial there
    assert classify_header(long_header(1, version=QUIC_V2))[0] == K_INITIAL
    assert classify_header(b"\x80\x00\x00\x00\x00\x08" + b"\x01" * 8 + b"\x00")[0] == K_VN
    assert classify_header(long_header(0, version=0x12345678))[0] == K_UNKNOWN_VERSION
    assert classify_header(short_header(spin=1)) == (K_SHORT, 1, 0)
    # a connection ID longer than v1 allows, a cut header, nothing at all
    assert classify_header(b"\xc0\x00\x00\x00\x01\x15" + b"\x00" * 30)[0] == K_NOT_QUIC
    assert classify_header(b"\xc0\x00\x00")[0] == K_NOT_QUIC
    assert classify_header(b"")[0] == K_NOT_QUIC


def test_flows_and_sides() -> None:
    sim = simulate(packets=50, window=10)
    cap = read_quic(pcap_bytes(sim.packets))
    assert len(cap.flows) == 1
    f = cap.flows[0]
    assert (f.key.server, f.key.server_port, f.key.client_port, f.key.transport) == (
        "198.18.0.151",
        443,
        50000,
        "quic",
    )
    assert int(f.d.to_client.sum()) == 50 and int((~f.d.to_client).sum()) == 51  # 50 ACKs + Initial


def test_junk_is_counted_and_skipped() -> None:
    pkts = [
        (1, ipv4_udp(CLIENT, SERVER, 5000, 53, b"\x00\x01", 30)),
        (2, b"\x45\x00"),
        (3, b"\x60" + b"\x00" * 10),
    ]
    cap = read_quic(pcap_bytes(pkts))
    assert cap.flows == []
    assert cap.stats["not_quic"] == 1 and cap.stats["malformed"] == 2
    with pytest.raises(CaptureError, match="no QUIC flow"):
        quic_flows_from_pcap(pcap_bytes(pkts))


def test_replay_matches_a_drop_tail_queue() -> None:
    link = LinkModel(rate_bps=8000.0, buffer_bytes=2000.0, down_delay_s=0.1, up_delay_s=0.1, up_rate_bps=None)
    t = np.array([0, 0, 0, 0], dtype=np.int64)
    rep = replay_downlink(t, np.array([1000, 1000, 1000, 500]), link)
    # 1 s per 1000 bytes: two fit in 2000 bytes of buffer, the third does not, the 500 does not
    assert rep.dropped.tolist() == [False, False, True, True]
    assert rep.arrive_ns[:2].tolist() == [1_100_000_000, 2_100_000_000]


@pytest.mark.parametrize("buffer_bytes", [200_000.0, 25_000.0])
def test_link_estimator_follows_the_server(buffer_bytes: float) -> None:
    sim = simulate(packets=800, window=45, buffer_bytes=buffer_bytes, spin=True)
    res = traces_from_quic(read_quic(pcap_bytes(sim.packets)), align="sender", profile=sim.profile)
    tr = res.traces[0]
    assert tr.extra["quic"]["estimator"] == "link"
    # the same queue arithmetic, on nanosecond-rounded capture times: at most one boundary case
    assert abs(tr.extra["quic"]["modelled_drops"] - sim.drops) <= 1
    assert (sim.drops > 0) == (buffer_bytes < 50_000)
    assert tr.internet_rtt_ms == pytest.approx(sim.internet_rtt_s * 1000, abs=0.5)
    # over time, the estimate and the simulated server's own count agree
    g = np.arange(tr.start_time + 0.3, tr.start_time + tr.t[-1] - 0.05, 0.001)
    est = tr.bif[np.clip(np.searchsorted(tr.start_time + tr.t, g, side="right") - 1, 0, None)]
    tru = sim.truth_bif[np.clip(np.searchsorted(sim.truth_t, g, side="right") - 1, 0, None)]
    bdp = 2_456_000 / 8 * (0.1 + sim.internet_rtt_s)
    assert np.abs(est - tru).mean() / bdp < 0.02
    # the published heuristic on the same capture, kept beside it
    assert "bif_published" in tr.columns


def test_published_estimator_without_a_profile() -> None:
    sim = simulate(packets=100, window=20)
    tr = traces_from_quic(read_quic(pcap_bytes(sim.packets)), profile=None).traces[0]
    assert tr.extra["quic"]["estimator"] == "published"
    # a constant share per client datagram: everything is acknowledged by the end, by construction
    assert tr.bif.min() >= 0 and tr.bif[-1] == pytest.approx(0, abs=100)


def test_quic_profiles() -> None:
    a = get_profile("A-quic")
    assert a.mtu == 1280 and a.down.rate == "2456kbit" and a.bdp_bytes() == pytest.approx(30700)
    assert get_profile("B-quic-rate").down.rate == "200kbit"
    with pytest.raises(Exception, match="unknown profile"):
        get_profile("C-quic")


def test_stack_fingerprint_reads_the_connection_id_and_the_pacing() -> None:
    from ccscope.capture.quic_fingerprint import fingerprint, guess
    from tests.capture.quic_synth import CPORT, SPORT

    sim = simulate(packets=200, window=30)
    # the server's handshake datagram: a long header with a 20-byte source connection ID
    hs = ipv4_udp(SERVER, CLIENT, SPORT, CPORT, long_header(0, scid=b"\x01" * 20), 1200)
    pk = sorted([*sim.packets, (sim.packets[1][0] + 1, hs)])
    fp = fingerprint(read_quic(pcap_bytes(pk)).flows[0].d)
    assert fp.scid_len == 20 and fp.full_size == 1200 and fp.full_share == 1.0
    assert 0.0 < fp.back_to_back < 0.5  # the first window leaves in one burst, the rest ACK-clocked
    assert guess(fp)[0] == "quiche"
    assert guess(replace(fp, scid_len=7))[0] is None
