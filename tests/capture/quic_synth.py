"""Synthetic QUIC captures: a window-limited server behind a simulated bottleneck, with its own
bytes in flight as it counts them, written as the capture point would see the datagrams.

The simulation is written apart from capture/quic_bif.py (an event queue, not the replay), so a
test that compares the estimator with `truth` checks the estimator's reading of the link, not
the same arithmetic twice.
"""

from __future__ import annotations

import heapq
import io
import os
import struct
from dataclasses import dataclass, field

import numpy as np

from ccscope.capture.pcap import PcapWriter

SERVER = bytes([198, 18, 0, 151])
CLIENT = bytes([100, 64, 0, 2])
SPORT, CPORT = 443, 50000
EPOCH_NS = 1_795_000_000 * 10**9


def ipv4_udp(src: bytes, dst: bytes, sport: int, dport: int, payload: bytes, size: int) -> bytes:
    """An IPv4/UDP packet whose UDP payload is `size` bytes long (starting with `payload`)."""
    body = payload + bytes(max(0, size - len(payload)))
    udp = struct.pack("!HHHH", sport, dport, 8 + len(body), 0) + body
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, src, dst)
    return ip + udp


def long_header(ptype: int, dcid: bytes = b"\x11" * 8, scid: bytes = b"\x22" * 8, version: int = 1) -> bytes:
    return (
        bytes([0xC0 | (ptype << 4)])
        + struct.pack("!I", version)
        + bytes([len(dcid)])
        + dcid
        + bytes([len(scid)])
        + scid
    )


def short_header(spin: int = 0, dcid: bytes = b"\x33" * 8) -> bytes:
    return bytes([0x40 | (spin << 5) | 0x01]) + dcid + b"\x00\x01"


@dataclass
class SimFlow:
    packets: list[tuple[int, bytes]]  # (capture ns, IP packet), in capture order
    truth_t: np.ndarray  # server clock, seconds
    truth_bif: np.ndarray
    internet_rtt_s: float
    drops: int
    dropped: list[int] = field(default_factory=list)
    profile: dict = field(default_factory=dict)


def simulate(
    *,
    window: int = 40,
    rate_bps: float = 2_456_000.0,
    buffer_bytes: float = 61_400.0,
    delay_s: float = 0.05,
    internet_one_way_s: float = 0.01,
    packets: int = 600,
    size: int = 1200,
    ack_size: int = 45,
    spin: bool = False,
) -> SimFlow:
    """A server sending `packets` full datagrams with at most `window` in flight, acknowledged
    one by one by a client that never stalls; losses declared by RFC 9002's two thresholds."""
    t0 = 0.0  # simulated in seconds from 0: float seconds since the epoch are only ~240 ns fine
    ev: list[tuple[float, int, str, int]] = []  # (time, seq, kind, packet)
    seq = 0

    def push(t: float, kind: str, k: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(ev, (t, seq, kind, k))

    cap: list[tuple[float, bytes]] = []
    truth: list[tuple[float, int]] = []
    inflight = 0
    sent = 0
    acked: set[int] = set()
    lost: set[int] = set()
    dropped: set[int] = set()
    q: list[tuple[float, int]] = []  # (end, bytes) of datagrams in the bottleneck queue
    last_end = 0.0
    # spin bit (RFC 9000 §17.4): the server echoes the last value it got, the client inverts it
    srv_spin = cli_seen = 0
    ip_len = size + 28
    sent_spin: dict[int, int] = {}
    send_time: dict[int, float] = {}

    def send_more(now: float) -> None:
        nonlocal inflight, sent
        while sent < packets and inflight + size <= window * size:
            inflight += size
            truth.append((now, inflight))
            sent_spin[sent] = srv_spin
            send_time[sent] = now
            push(now + internet_one_way_s, "at_capture", sent)
            sent += 1

    # handshake: client Initial leaves the capture, the server answers one Internet RTT later
    cap.append((t0, ipv4_udp(CLIENT, SERVER, CPORT, SPORT, long_header(0), 1200)))
    start = t0 + internet_one_way_s
    push(start, "server_start", -1)
    largest_acked = -1
    while ev:
        now, _, kind, k = heapq.heappop(ev)
        if kind == "server_start":
            send_more(now)
        elif kind == "at_capture":
            hdr = short_header(sent_spin[k] if spin else 0)
            cap.append((now, ipv4_udp(SERVER, CLIENT, SPORT, CPORT, hdr, size)))
            q[:] = [x for x in q if x[0] > now]
            if sum(b for _, b in q) + ip_len > buffer_bytes:
                dropped.add(k)
                continue
            begin = max(last_end, now)
            last_end = begin + ip_len * 8.0 / rate_bps
            q.append((last_end, ip_len))
            push(last_end + delay_s, "at_client", k)
        elif kind == "at_client":
            cli_seen = sent_spin[k]
            t_cap = now + 50e-6 + delay_s + (ack_size + 28) * 8.0 / rate_bps  # client think time
            bit = 1 - cli_seen
            cap.append(
                (t_cap, ipv4_udp(CLIENT, SERVER, CPORT, SPORT, short_header(bit if spin else 0), ack_size))
            )
            push(t_cap + internet_one_way_s, "ack_at_server", k * 2 + bit)
        elif kind == "ack_at_server":
            k, srv_spin = divmod(k, 2)
            acked.add(k)
            inflight -= size
            largest_acked = max(largest_acked, k)
            rtt = now - send_time[k]
            for j in sorted(dropped - lost):
                # RFC 9002: 3 packets later acknowledged, or sent 9/8 RTT before a later one's ACK
                if j <= largest_acked - 3 or (j < largest_acked and send_time[j] <= now - 1.125 * rtt):
                    lost.add(j)
                    inflight -= size
            truth.append((now, inflight))
            # a little server think time, so a send never ties with a departure to the ns
            send_more(now + 37e-6)
    cap.sort(key=lambda x: x[0])
    tt = np.array([t for t, _ in truth])
    bb = np.array([b for _, b in truth], dtype=np.int64)
    prof = {
        "name": "sim",
        "down": {
            "delay_ms": delay_s * 1000,
            "rate": f"{rate_bps / 1000:g}kbit",
            "buffer": f"{buffer_bytes:g}B",
        },
        "up": {"delay_ms": delay_s * 1000, "rate": f"{rate_bps / 1000:g}kbit", "buffer": "inf"},
        "mtu": 1280,
        "sack": True,
    }
    return SimFlow(
        [(EPOCH_NS + round(t * 1e9), p) for t, p in cap],
        tt + EPOCH_NS / 1e9,
        bb,
        2 * internet_one_way_s,
        len(dropped),
        sorted(dropped),
        prof,
    )


def pcap_bytes(packets: list[tuple[int, bytes]]) -> bytes:
    buf = io.BytesIO()
    with PcapWriter(buf) as w:
        for ts, p in packets:
            w.write(ts, p)
    return buf.getvalue()


def seed_quic_pcaps() -> list[bytes]:
    """Small QUIC captures for fuzzing: a lossy transfer, one with the spin bit, odd headers."""
    a = simulate(packets=60, window=30, buffer_bytes=12_000)
    b = simulate(packets=40, window=8, spin=True)
    odd = [
        (1, ipv4_udp(CLIENT, SERVER, CPORT, SPORT, long_header(0, version=0xFF00001D), 1200)),
        (2, ipv4_udp(SERVER, CLIENT, SPORT, CPORT, b"\x80\x00\x00\x00\x00\x08" + b"\x01" * 8, 30)),
        (3, ipv4_udp(SERVER, CLIENT, SPORT, CPORT, long_header(3), 120)),
        (4, ipv4_udp(SERVER, CLIENT, SPORT, CPORT, b"\x00", 1)),
        (5, ipv4_udp(CLIENT, SERVER, CPORT, SPORT, os.urandom(0) + b"\x45" * 3, 3)),
    ]
    return [pcap_bytes(a.packets), pcap_bytes(b.packets), pcap_bytes(odd)]
