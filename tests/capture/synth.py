"""Synthetic TCP downloads and capture files for the capture tests and fuzz seeds."""

from __future__ import annotations

import ipaddress
import random
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ccscope.capture.packets import (
    TCP_ACK,
    TCP_FIN,
    TCP_PSH,
    TCP_RST,
    TCP_SYN,
    ipv4_tcp,
    ipv6_tcp,
    tcp_header,
)
from ccscope.capture.pcap import LINKTYPE_RAW, PcapWriter

SERVER4, CLIENT4 = "192.0.2.10", "10.0.0.2"
SERVER6, CLIENT6 = "2001:db8::10", "2001:db8:1::2"
NS = 1_000_000_000


@dataclass
class Pkt:
    t: float  # seconds
    from_server: bool
    seq: int  # relative to the sender's ISN
    ack: int  # relative to the peer's ISN
    flags: int
    plen: int = 0
    window: int = 65535
    sack: tuple[tuple[int, int], ...] = ()  # SACK blocks, relative to the peer's ISN


@dataclass
class Flow:
    """A TCP conversation described with relative sequence numbers (ISN = 0 on both sides)."""

    server: str = SERVER4
    client: str = CLIENT4
    sport: int = 443
    cport: int = 40000
    server_isn: int = 1_000_000
    client_isn: int = 5_000
    pkts: list[Pkt] = field(default_factory=list)
    v6_ext: list[tuple[int, bytes]] | None = None
    t0_ns: int = 1_700_000_000 * NS

    def s(self, t: float, seq: int, plen: int = 0, flags: int = TCP_ACK, ack: int = 1) -> Flow:
        self.pkts.append(Pkt(t, True, seq, ack, flags, plen))
        return self

    def c(
        self, t: float, ack: int, plen: int = 0, flags: int = TCP_ACK, seq: int = 1,
        window: int = 65535, sack: tuple[tuple[int, int], ...] = (),
    ) -> Flow:  # fmt: skip
        self.pkts.append(Pkt(t, False, seq, ack, flags, plen, window, sack))
        return self

    def handshake(self, t: float = 0.0, rtt: float = 0.05, request: int = 100) -> Flow:
        self.c(t, 0, flags=TCP_SYN, seq=0)
        self.s(t + rtt, 0, flags=TCP_SYN | TCP_ACK, ack=1)
        self.c(t + 2 * rtt, 1)
        self.c(t + 2 * rtt, 1, plen=request, flags=TCP_ACK | TCP_PSH)
        return self

    def packets(self) -> list[tuple[int, bytes, int]]:
        """(ts_ns, header-only IP bytes, wire length) for every packet."""
        out = []
        v6 = ":" in self.server
        srv = ipaddress.ip_address(self.server).packed
        cli = ipaddress.ip_address(self.client).packed
        for p in self.pkts:
            if p.from_server:
                a, b, sp, dp = srv, cli, self.sport, self.cport
                seq, ack = self.server_isn + p.seq, self.client_isn + p.ack
            else:
                a, b, sp, dp = cli, srv, self.cport, self.sport
                seq, ack = self.client_isn + p.seq, self.server_isn + p.ack
            if not p.flags & TCP_ACK:
                ack = 0
            opts = b"\x01\x01\x08\x0a" + struct.pack("!II", 1, 2)  # NOP NOP timestamps
            if p.sack:  # as Linux writes it: NOP NOP SACK after the timestamps
                isn = self.server_isn if not p.from_server else self.client_isn
                opts += sack_option([((isn + a) % 2**32, (isn + b) % 2**32) for a, b in p.sack])
            tcp = tcp_header(sp, dp, seq, ack, p.flags, p.window, opts)
            if v6:
                hdr, wire = ipv6_tcp(a, b, tcp, p.plen, ext=self.v6_ext)
            else:
                hdr, wire = ipv4_tcp(a, b, tcp, p.plen)
            out.append((self.t0_ns + round(p.t * NS), hdr, wire))
        return out


def sack_option(blocks: Iterable[tuple[int, int]], nops: bool = True) -> bytes:
    """A SACK option (kind 5) with absolute edges, led by two NOPs as Linux aligns it."""
    bl = list(blocks)
    body = b"".join(struct.pack("!II", a, b) for a, b in bl)
    return (b"\x01\x01" if nops else b"") + bytes([5, 2 + 8 * len(bl)]) + body


def sack_loss_flow(**kw: object) -> Flow:
    """Ten 100-byte segments (relative seq 1..1001); the third (201-301) is dropped after the
    capture point; the client SACKs what follows and the retransmission fills the hole."""
    f = Flow(**kw)  # type: ignore[arg-type]
    f.handshake()  # request: client bytes 1..101
    for i in range(10):
        f.s(0.20 + 0.01 * i, 1 + 100 * i, 100, ack=101)
    f.c(0.30, 101, seq=101)
    f.c(0.31, 201, seq=101)
    for k in range(7):  # segments 4..10 arrive: the hole stays at 201
        f.c(0.32 + 0.01 * k, 201, seq=101, sack=((301, 401 + 100 * k),))
    f.s(0.40, 201, 100, ack=101)  # retransmission
    f.c(0.50, 1001, seq=101)
    return f


def plain_flow(**kw: object) -> Flow:
    """The hand-checked transfer used by several tests (expected BiF in PLAIN_BIF)."""
    f = Flow(**kw)  # type: ignore[arg-type]
    f.handshake()  # SYN 0, SYN-ACK 0.05, ACK 0.1, GET 0.1
    f.s(0.15, 1, ack=101)  # server ACKs the request
    f.s(0.16, 1, 100, ack=101)
    f.s(0.17, 101, 100, ack=101)
    f.c(0.20, 101, seq=101)
    f.s(0.21, 201, 100, ack=101)
    f.c(0.25, 301, seq=101)
    f.s(0.26, 301, 0, flags=TCP_FIN | TCP_ACK, ack=101)
    f.c(0.30, 302, flags=TCP_FIN | TCP_ACK, seq=101)
    f.s(0.35, 302, ack=102)
    return f


PLAIN_BIF = [0, 1, 0, 0, 0, 100, 200, 100, 200, 0, 1, 0, 0]


def bulk_flow(
    n_data: int = 5000,
    mss: int = 48,
    rtt_visible: float = 0.1,
    rtt_internet: float = 0.03,
    rate_pps: float = 250.0,
    seed: int = 1,
    loss: float = 0.0,
    **kw: object,
) -> Flow:
    """A long ACK-clocked download: about 2*n_data packets, optional random retransmissions."""
    rng = random.Random(seed)
    f = Flow(**kw)  # type: ignore[arg-type]
    f.handshake(rtt=rtt_internet)
    t = 2 * rtt_internet + 0.01
    acked = 1
    nxt = 1
    events: list[tuple[float, int, Pkt]] = []
    for i in range(n_data):
        t += 1.0 / rate_pps
        if loss and rng.random() < loss and nxt > 1 + mss:
            seq = max(1, nxt - mss * rng.randint(1, 5))  # retransmit something old
            events.append((t, 0, Pkt(t, True, seq, 101, TCP_ACK, mss)))
        else:
            events.append((t, 0, Pkt(t, True, nxt, 101, TCP_ACK, mss)))
            nxt += mss
        if i % 2 == 1:  # delayed ACK every second segment
            acked = nxt - mss * rng.randint(0, 2)
            ta = t + rtt_visible + rng.random() * 0.01
            events.append((ta, 1, Pkt(ta, False, 101, acked, TCP_ACK, 0)))
    events.sort(key=lambda e: (e[0], e[1]))
    f.pkts.extend(p for _, _, p in events)
    tl = events[-1][0] + 0.05
    f.s(tl, nxt, flags=TCP_FIN | TCP_ACK, ack=101)
    f.c(tl + rtt_visible, nxt + 1, seq=101, flags=TCP_FIN | TCP_ACK)
    return f


def write_pcap(
    path: Path,
    packets: Iterable[tuple[int, bytes, int]],
    *,
    linktype: int = LINKTYPE_RAW,
    frame: Callable[[bytes], bytes] = lambda ip: ip,
    nanosecond: bool = True,
    byteorder: str = "<",
) -> Path:
    with PcapWriter(path, linktype=linktype, nanosecond=nanosecond, byteorder=byteorder) as w:
        for ts, ip, wire in packets:
            fr = frame(ip)
            w.write(ts, fr, wire + len(fr) - len(ip))
    return path


def ethernet(ip: bytes, vlan: int | None = None) -> bytes:
    et = 0x86DD if ip[0] >> 4 == 6 else 0x0800
    hdr = b"\x02\x00\x00\x00\x00\x01" + b"\x02\x00\x00\x00\x00\x02"
    if vlan is not None:
        hdr += struct.pack("!HH", 0x8100, vlan)
    return hdr + struct.pack("!H", et) + ip


def sll(ip: bytes) -> bytes:
    et = 0x86DD if ip[0] >> 4 == 6 else 0x0800
    return struct.pack("!HHH8sH", 0, 1, 6, b"\x02\x00\x00\x00\x00\x01\x00\x00", et) + ip


def sll2(ip: bytes) -> bytes:
    et = 0x86DD if ip[0] >> 4 == 6 else 0x0800
    return struct.pack("!HHIHBB8s", et, 0, 2, 1, 0, 6, b"\x02\x00\x00\x00\x00\x01\x00\x00") + ip


def null_le(ip: bytes) -> bytes:
    fam = 30 if ip[0] >> 4 == 6 else 2
    return struct.pack("<I", fam) + ip


def _block(btype: int, body: bytes, e: str = "<") -> bytes:
    body += b"\x00" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack(e + "II", btype, n) + body + struct.pack(e + "I", n)


def pcapng_bytes(
    packets: Iterable[tuple[int, bytes, int]],
    *,
    linktypes: tuple[int, ...] = (LINKTYPE_RAW,),
    frames: tuple[Callable[[bytes], bytes], ...] = (lambda ip: ip,),
    tsresol: int | None = 9,
    e: str = "<",
    unknown_blocks: bool = True,
) -> bytes:
    """A pcapng section; packets go round-robin over the interfaces given by `linktypes`."""
    out = _block(0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1), e)
    for lt in linktypes:
        opts = b""
        if tsresol is not None:
            opts = struct.pack(e + "HH", 9, 1) + bytes([tsresol]) + b"\x00" * 3
        opts += struct.pack(e + "HH", 0, 0)
        out += _block(1, struct.pack(e + "HHI", lt, 0, 65535) + opts, e)
    if unknown_blocks:
        out += _block(0x0BAD, b"custom stuff", e)  # skipped by readers
    if tsresol is None:
        res = 10**6
    elif tsresol & 0x80:
        res = 1 << (tsresol & 0x7F)
    else:
        res = 10**tsresol
    for i, (ts, ip, wire) in enumerate(packets):
        k = i % len(linktypes)
        fr = frames[k](ip)
        tsu = ts * res // NS
        body = struct.pack(e + "IIIII", k, tsu >> 32, tsu & 0xFFFFFFFF, len(fr),
                           wire + len(fr) - len(ip)) + fr  # fmt: skip
        out += _block(6, body, e)
        if unknown_blocks and i == 3:
            out += _block(5, struct.pack(e + "IIIHH", 0, 0, 0, 0, 0), e)  # interface stats
    return out


__all__ = [
    "CLIENT4",
    "CLIENT6",
    "PLAIN_BIF",
    "SERVER4",
    "SERVER6",
    "TCP_ACK",
    "TCP_FIN",
    "TCP_PSH",
    "TCP_RST",
    "TCP_SYN",
    "Flow",
    "bulk_flow",
    "ethernet",
    "flow_csv",
    "null_le",
    "pcapng_bytes",
    "plain_flow",
    "seed_csvs",
    "seed_pcaps",
    "sll",
    "sll2",
    "write_pcap",
]


def flow_csv(flow: Flow, *, sep: str = ",", flags: bool = False, quote: bool = False) -> str:
    """The flow as a tshark-style CSV with relative sequence numbers (no tshark needed)."""
    cols = ["frame.time_relative", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport",
            "tcp.seq", "tcp.ack", "tcp.len", "frame.len"]  # fmt: skip
    if flags:
        cols += ["tcp.flags", "tcp.window_size_value"]
    q = '"' if quote else ""
    lines = [sep.join(f"{q}{c}{q}" for c in cols)]
    for p in flow.pkts:
        if p.from_server:
            a, b, sp, dp = flow.server, flow.client, flow.sport, flow.cport
        else:
            a, b, sp, dp = flow.client, flow.server, flow.cport, flow.sport
        vals = [f"{p.t:.9f}", a, b, sp, dp, p.seq, p.ack if p.flags & TCP_ACK else 0, p.plen,
                60 + p.plen]  # fmt: skip
        if flags:
            vals += [f"0x{p.flags:04x}", p.window]
        lines.append(sep.join(f"{q}{v}{q}" for v in vals))
    return "\n".join(lines) + "\n"


def seed_pcaps() -> list[bytes]:
    """Small, varied captures: fuzzing seeds (classic, pcapng, link types, IPv6, loss, SACK)."""
    import io

    out = []
    flows = [
        plain_flow(),
        bulk_flow(n_data=40, loss=0.1, server_isn=2**32 - 100),
        bulk_flow(n_data=30, server=SERVER6, client=CLIENT6, loss=0.1),
        sack_loss_flow(server_isn=2**32 - 500),
    ]
    flows[2].v6_ext = [(0, bytes(6))]
    for i, f in enumerate(flows):
        buf = io.BytesIO()
        frame = [lambda ip: ip, ethernet, sll, lambda ip: ip][i]
        lt = [LINKTYPE_RAW, 1, 113, LINKTYPE_RAW][i]
        with PcapWriter(buf, linktype=lt, nanosecond=i != 1, byteorder="<>"[i % 2]) as w:
            for ts, ip, wire in f.packets():
                fr = frame(ip)
                w.write(ts, fr, wire + len(fr) - len(ip))
        out.append(buf.getvalue())
    out.append(pcapng_bytes(plain_flow().packets(), linktypes=(LINKTYPE_RAW, 276),
                            frames=(lambda ip: ip, sll2)))  # fmt: skip
    return out


def seed_csvs() -> list[bytes]:
    return [
        flow_csv(plain_flow()).encode(),
        flow_csv(bulk_flow(n_data=30, loss=0.1), sep="\t", flags=True).encode(),
        flow_csv(plain_flow(server=SERVER6, client=CLIENT6), quote=True).encode(),
    ]
