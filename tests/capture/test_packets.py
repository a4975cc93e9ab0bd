"""Header parsing: the scalar parser and the vectorised batch parser must agree on anything."""

from __future__ import annotations

import random

import numpy as np

from ccscope.capture.packets import (
    TCP_ACK,
    TCP_SYN,
    TCPSegment,
    UDPDatagram,
    ipv4_tcp,
    ipv6_tcp,
    parse_batch,
    parse_ip,
    tcp_header,
)
from tests.capture.synth import bulk_flow

SRC4, DST4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
SRC6, DST6 = bytes(range(16)), bytes(range(16, 32))


def test_ipv4_tcp_fields_and_payload_from_ip_length() -> None:
    tcp = tcp_header(443, 40000, 0xFFFFFFF0, 77, TCP_SYN | TCP_ACK | 0x100, 1234, b"\x01" * 12)
    hdr, wire = ipv4_tcp(SRC4, DST4, tcp, 1400, ip_options=b"\x01\x01\x01\x00")
    s = parse_ip(hdr, wire)  # header-only capture: payload is not in the bytes
    assert isinstance(s, TCPSegment)
    assert (s.sport, s.dport, s.seq, s.ack, s.window) == (443, 40000, 0xFFFFFFF0, 77, 1234)
    assert s.flags == TCP_SYN | TCP_ACK | 0x100
    assert s.header_len == 32 and s.payload_len == 1400
    assert s.src == SRC4 and s.dst == DST4


def test_ipv6_extension_headers_walked_and_bounded() -> None:
    tcp = tcp_header(80, 1, 5, 6, TCP_ACK)
    ext = [(0, bytes(6)), (43, bytes([0, 0, 0, 0, 0, 0])), (60, bytes(14))]
    hdr, wire = ipv6_tcp(SRC6, DST6, tcp, 99, ext=ext)
    s = parse_ip(hdr, wire)
    assert isinstance(s, TCPSegment) and s.payload_len == 99 and s.dport == 1
    reasons: dict[str, int] = {}
    hdr, _ = ipv6_tcp(SRC6, DST6, tcp, 9, ext=[(60, bytes(6))] * 12)  # absurdly long chain
    assert parse_ip(hdr, None, reasons) is None and reasons == {"malformed": 1}
    hdr, _ = ipv6_tcp(SRC6, DST6, tcp, 9, ext=[(44, bytes(6))])
    assert parse_ip(hdr, None, reasons) is None and reasons["fragments"] == 1


def test_reasons_never_raise() -> None:
    reasons: dict[str, int] = {}
    tcp = tcp_header(1, 2, 3, 4, TCP_ACK)
    cases = [
        b"",
        b"\x45",
        b"\x75" + bytes(40),  # version 7
        ipv4_tcp(SRC4, DST4, tcp, 0, frag=0x2000)[0],
        ipv4_tcp(SRC4, DST4, tcp[:10], 0)[0],  # TCP header cut short
        ipv4_tcp(SRC4, DST4, b"\x00" * 8, 0, proto=1)[0],
    ]
    out = [parse_ip(c, None, reasons) for c in cases]
    assert out == [None] * len(cases)
    assert reasons == {"malformed": 3, "non_ip": 1, "fragments": 1, "non_tcp": 1}
    udp = parse_ip(ipv4_tcp(SRC4, DST4, b"\x00\x35\x00\x36" + bytes(4), 20, proto=17)[0])
    assert isinstance(udp, UDPDatagram) and udp.payload_len == 20 and udp.dport == 0x36
    # a TSO capture: IP total length 0, wire length stands in
    hdr, wire = ipv4_tcp(SRC4, DST4, tcp, 3000)
    hdr = hdr[:2] + b"\x00\x00" + hdr[4:]
    s = parse_ip(hdr, wire)
    assert isinstance(s, TCPSegment) and s.payload_len == 3000


def _batch(pkts: list[tuple[bytes, int]]) -> tuple[list[tuple[int, ...]], dict[str, int]]:
    data = b"".join(p for p, _ in pkts)
    offs = np.cumsum([0] + [len(p) for p, _ in pkts[:-1]]).astype(np.int64)
    caps = np.array([len(p) for p, _ in pkts], dtype=np.int64)
    wires = np.array([w for _, w in pkts], dtype=np.int64)
    t = parse_batch(data, np.arange(len(pkts), dtype=np.int64), offs, caps, wires)
    rows = list(
        zip(*(getattr(t, k).tolist() for k in
              ("ts_ns", "sport", "dport", "seq", "ack", "flags", "window", "payload_len")),
            strict=True)
    )  # fmt: skip
    return rows, t.counts


def test_batch_matches_scalar_on_mutated_packets() -> None:
    rng = random.Random(7)
    base = [(ip, wire) for _, ip, wire in bulk_flow(n_data=60, loss=0.1).packets()]
    tcp = tcp_header(7, 8, 9, 10, TCP_ACK)
    base += [ipv6_tcp(SRC6, DST6, tcp, 5, ext=[(0, bytes(6))]), ipv6_tcp(SRC6, DST6, tcp, 5)]
    base += [ipv4_tcp(SRC4, DST4, tcp, 0, frag=0x2001), ipv4_tcp(SRC4, DST4, tcp, 2, proto=17)]
    pkts: list[tuple[bytes, int]] = []
    for _ in range(3000):
        ip, wire = rng.choice(base)
        b = bytearray(ip)
        for _ in range(rng.randint(0, 4)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
        if rng.random() < 0.2:
            b = b[: rng.randrange(len(b) + 1)]
        pkts.append((bytes(b), wire if rng.random() < 0.9 else rng.randrange(70000)))
    rows, counts = _batch(pkts)
    want = []
    reasons: dict[str, int] = {}
    udp = 0
    for i, (p, w) in enumerate(pkts):
        s = parse_ip(p, w, reasons)
        if isinstance(s, TCPSegment):
            want.append((i, s.sport, s.dport, s.seq, s.ack, s.flags, s.window, s.payload_len))
        elif isinstance(s, UDPDatagram):
            udp += 1
    assert rows == want
    for k in ("malformed", "fragments", "non_ip"):
        assert counts[k] == reasons.get(k, 0), k
    assert counts["non_tcp"] == reasons.get("non_tcp", 0) + udp
