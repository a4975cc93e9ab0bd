"""IPv4/IPv6 + TCP/UDP header parsing that never raises on bad bytes.

Two entry points with the same semantics:

* `parse_ip` decodes one packet (used for odd packets, the generic `traces_from_packets` path
  and tests);
* `parse_batch` decodes every packet of a capture at once with numpy gathers over the file
  image, falling back to `parse_ip` only for packets the vectorised path does not cover
  (IPv6 extension headers, jumbograms).

Payload length always comes from the IP length fields, never from the captured length: the
capture files are header-only (caplen = IP+TCP headers, orig_len = full packet).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

TCP_FIN = 0x01
TCP_SYN = 0x02
TCP_RST = 0x04
TCP_PSH = 0x08
TCP_ACK = 0x10

PROTO_TCP = 6
PROTO_UDP = 17
# IPv6 extension headers we walk through (the rest end the chain: TCP, UDP, ICMPv6, ESP...)
_V6_HOPOPTS, _V6_ROUTING, _V6_FRAGMENT, _V6_DSTOPTS = 0, 43, 44, 60
_V6_EXT = (_V6_HOPOPTS, _V6_ROUTING, _V6_FRAGMENT, _V6_DSTOPTS)
MAX_V6_EXT_HEADERS = 8  # bound the walk: a real packet has at most a handful

# Reasons a packet is not turned into a TCP segment; also the keys of the capture stats.
REASONS = ("non_ip", "non_tcp", "fragments", "malformed")


@dataclass(frozen=True, slots=True)
class TCPSegment:
    src: bytes  # 4 or 16 address bytes
    dst: bytes
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int  # 9 bits: NS..FIN
    window: int
    payload_len: int
    header_len: int
    # SACK blocks (left edge, right edge) as sent, modulo 2^32; () without a SACK option
    sack: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class UDPDatagram:
    src: bytes
    dst: bytes
    sport: int
    dport: int
    payload_len: int


def _count(reasons: dict[str, int] | None, key: str) -> None:
    if reasons is not None:
        reasons[key] = reasons.get(key, 0) + 1


TCPOPT_EOL, TCPOPT_NOP, TCPOPT_SACK = 0, 1, 5
MAX_SACK_BLOCKS = 4  # 40 option bytes hold at most 4 blocks (3 beside timestamps)


def sack_blocks(opts: bytes) -> tuple[tuple[int, int], ...]:
    """The SACK blocks in a TCP option area (RFC 2018), as (left, right) edges mod 2^32.

    Hostile or damaged option areas (a length that runs past the end, a length below 2, a SACK
    option whose length is not 2 + 8n) yield no blocks rather than an error: SACK only refines
    the pipe estimate, and a bad option must not cost the packet."""
    i, n = 0, len(opts)
    while i < n:
        kind = opts[i]
        if kind == TCPOPT_EOL:
            break
        if kind == TCPOPT_NOP:
            i += 1
            continue
        if i + 1 >= n:
            return ()
        ln = opts[i + 1]
        if ln < 2 or i + ln > n:
            return ()
        if kind == TCPOPT_SACK:
            k = (ln - 2) // 8
            if (ln - 2) % 8 or not 1 <= k <= MAX_SACK_BLOCKS:
                return ()
            edges = struct.unpack_from(f"!{2 * k}I", opts, i + 2)
            return tuple((edges[2 * j], edges[2 * j + 1]) for j in range(k))
        i += ln
    return ()


def parse_ip(
    pkt: bytes | memoryview,
    orig_len: int | None = None,
    reasons: dict[str, int] | None = None,
) -> TCPSegment | UDPDatagram | None:
    """Decode an IP packet. Returns None (and counts the reason) for anything not usable.

    `orig_len` is the packet's length on the wire; it only stands in for an IP length field of
    zero (TSO/GSO captures, IPv6 jumbograms).
    """
    n = len(pkt)
    if n < 1:
        _count(reasons, "malformed")
        return None
    ver = pkt[0] >> 4
    if ver == 4:
        if n < 20:
            _count(reasons, "malformed")
            return None
        ihl = (pkt[0] & 0x0F) * 4
        tot, frag, proto = struct.unpack_from("!H2xHxB", pkt, 2)
        if tot == 0 and orig_len:
            tot = orig_len  # segmentation offload leaves the length field zero
        if ihl < 20 or n < ihl or tot < ihl:
            _count(reasons, "malformed")
            return None
        if frag & 0x3FFF:  # MF set or non-zero offset: we cannot see a whole TCP header/segment
            _count(reasons, "fragments")
            return None
        src, dst = bytes(pkt[12:16]), bytes(pkt[16:20])
        l4, l4len = ihl, tot - ihl
    elif ver == 6:
        if n < 40:
            _count(reasons, "malformed")
            return None
        plen, proto = struct.unpack_from("!HB", pkt, 4)
        src, dst = bytes(pkt[8:24]), bytes(pkt[24:40])
        if plen == 0 and orig_len:
            plen = orig_len - 40  # jumbogram / offload
        end = 40 + plen
        l4 = 40
        hops = 0
        while proto in _V6_EXT:
            hops += 1
            if hops > MAX_V6_EXT_HEADERS or l4 + 8 > n:
                _count(reasons, "malformed")
                return None
            if proto == _V6_FRAGMENT:
                _count(reasons, "fragments")
                return None
            nxt, hlen = pkt[l4], (pkt[l4 + 1] + 1) * 8
            proto = nxt
            l4 += hlen
        if l4 > end:
            _count(reasons, "malformed")
            return None
        l4len = end - l4
    else:
        _count(reasons, "non_ip")
        return None

    if proto == PROTO_TCP:
        if n < l4 + 20 or l4len < 20:
            _count(reasons, "malformed")
            return None
        sport, dport, seq, ack, offf, flg, win = struct.unpack_from("!HHIIBBH", pkt, l4)
        doff = (offf >> 4) * 4
        if doff < 20 or doff > l4len:
            _count(reasons, "malformed")
            return None
        # options are read only as far as the capture holds them
        opts = bytes(pkt[l4 + 20 : min(l4 + doff, n)])
        flags = flg | ((offf & 1) << 8)
        return TCPSegment(src, dst, sport, dport, seq, ack, flags, win, l4len - doff, doff, sack_blocks(opts))
    if proto == PROTO_UDP:
        if n < l4 + 8 or l4len < 8:
            _count(reasons, "malformed")
            return None
        sport, dport = struct.unpack_from("!HH", pkt, l4)
        return UDPDatagram(src, dst, sport, dport, l4len - 8)
    _count(reasons, "non_tcp")
    return None


@dataclass
class SegmentTable:
    """TCP segments in columns (one row per segment); the input of the BiF state machine.

    Addresses are 128-bit values split into two uint64 columns; IPv4 addresses sit in `lo` with
    `v6` False. When a source has no addresses (a CSV without ip columns) `has_addresses` is False
    and all addresses are zero: flows are then told apart by ports only.
    """

    ts_ns: np.ndarray  # int64
    v6: np.ndarray  # bool
    src_hi: np.ndarray  # uint64
    src_lo: np.ndarray
    dst_hi: np.ndarray
    dst_lo: np.ndarray
    sport: np.ndarray  # int64
    dport: np.ndarray
    seq: np.ndarray  # int64 in [0, 2^32)
    ack: np.ndarray
    flags: np.ndarray  # int64
    window: np.ndarray  # int64
    payload_len: np.ndarray  # int64
    ack_present: np.ndarray  # bool: the source gave an ack value for this row
    # SACK blocks per row: edges modulo 2^32 in (n, MAX_SACK_BLOCKS) int64 arrays; sack_n says
    # how many of a row's slots are used (0: no SACK option, or none readable)
    sack_n: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    sack_le: np.ndarray = field(default_factory=lambda: np.zeros((0, MAX_SACK_BLOCKS), dtype=np.int64))
    sack_re: np.ndarray = field(default_factory=lambda: np.zeros((0, MAX_SACK_BLOCKS), dtype=np.int64))
    flags_known: bool = True
    window_known: bool = True
    has_addresses: bool = True
    counts: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def take(self, idx: np.ndarray) -> SegmentTable:
        cols = {k: getattr(self, k)[idx] for k in _COLUMNS}
        return SegmentTable(
            **cols,
            flags_known=self.flags_known,
            window_known=self.window_known,
            has_addresses=self.has_addresses,
            counts=dict(self.counts),
        )

    @classmethod
    def from_segments(
        cls, rows: list[tuple[int, TCPSegment]], counts: dict[str, int] | None = None
    ) -> SegmentTable:
        """Build from (timestamp_ns, TCPSegment) pairs."""
        n = len(rows)
        t = cls.empty(n)
        for i, (ts, s) in enumerate(rows):
            t.ts_ns[i] = ts
            t.v6[i] = len(s.src) == 16
            t.src_hi[i], t.src_lo[i] = _addr_words(s.src)
            t.dst_hi[i], t.dst_lo[i] = _addr_words(s.dst)
            t.sport[i], t.dport[i] = s.sport, s.dport
            t.seq[i], t.ack[i] = s.seq, s.ack
            t.flags[i], t.window[i], t.payload_len[i] = s.flags, s.window, s.payload_len
            if s.sack:
                k = min(len(s.sack), MAX_SACK_BLOCKS)
                t.sack_n[i] = k
                for j, (le, re) in enumerate(s.sack[:k]):
                    t.sack_le[i, j], t.sack_re[i, j] = le, re
        t.counts = dict(counts or {})
        return t

    @classmethod
    def empty(cls, n: int) -> SegmentTable:
        i64 = np.zeros(n, dtype=np.int64)
        u64 = np.zeros(n, dtype=np.uint64)
        return cls(
            ts_ns=i64.copy(),
            v6=np.zeros(n, dtype=bool),
            src_hi=u64.copy(),
            src_lo=u64.copy(),
            dst_hi=u64.copy(),
            dst_lo=u64.copy(),
            sport=i64.copy(),
            dport=i64.copy(),
            seq=i64.copy(),
            ack=i64.copy(),
            flags=i64.copy(),
            window=i64.copy(),
            payload_len=i64.copy(),
            ack_present=np.ones(n, dtype=bool),
            sack_n=np.zeros(n, dtype=np.int8),
            sack_le=np.zeros((n, MAX_SACK_BLOCKS), dtype=np.int64),
            sack_re=np.zeros((n, MAX_SACK_BLOCKS), dtype=np.int64),
        )


_COLUMNS = (
    "ts_ns", "v6", "src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport",
    "seq", "ack", "flags", "window", "payload_len", "ack_present", "sack_n", "sack_le", "sack_re",
)  # fmt: skip


def _addr_words(a: bytes) -> tuple[int, int]:
    if len(a) == 4:
        return 0, int.from_bytes(a, "big")
    v = int.from_bytes(a, "big")
    return v >> 64, v & 0xFFFFFFFFFFFFFFFF


def addr_str(v6: bool, hi: int, lo: int) -> str:
    import ipaddress

    if v6:
        return str(ipaddress.IPv6Address((int(hi) << 64) | int(lo)))
    return str(ipaddress.IPv4Address(int(lo) & 0xFFFFFFFF))


def parse_batch(
    data: bytes,
    ts_ns: np.ndarray,
    ip_off: np.ndarray,
    ip_caplen: np.ndarray,
    ip_orig_len: np.ndarray,
) -> SegmentTable:
    """Decode all IP packets located in `data` at once; same rules as `parse_ip`.

    Counts of skipped packets go to the returned table's `counts` (keys of `REASONS`, plus
    `udp`).
    """
    n = len(ip_off)
    counts = dict.fromkeys(REASONS, 0)
    counts["udp"] = 0
    if n == 0:
        t = SegmentTable.empty(0)
        t.counts = counts
        return t
    u8 = np.frombuffer(data, dtype=np.uint8)
    top = len(u8) - 1
    cap = ip_caplen
    off = ip_off

    def g(base: np.ndarray, k: np.ndarray | int) -> np.ndarray:
        # clamp so that short packets cannot index outside the image; their rows are masked
        return u8[np.minimum(base + k, top)].astype(np.int64)

    def be16(base: np.ndarray, k: np.ndarray | int) -> np.ndarray:
        return (g(base, k) << 8) | g(base, np.asarray(k) + 1)

    def be32(base: np.ndarray, k: np.ndarray | int) -> np.ndarray:
        return (be16(base, k) << 16) | be16(base, np.asarray(k) + 2)

    b0 = np.where(cap >= 1, g(off, 0), 0)
    ver = b0 >> 4
    is4 = ver == 4
    is6 = ver == 6
    non_ip = (cap >= 1) & ~is4 & ~is6
    malformed = (cap < 1) | (is4 & (cap < 20)) | (is6 & (cap < 40))
    is4 &= ~malformed
    is6 &= ~malformed

    # --- IPv4 ---
    ihl = (b0 & 0x0F) * 4
    tot = be16(off, 2)
    tot = np.where(tot == 0, ip_orig_len, tot)
    frag4 = (be16(off, 6) & 0x3FFF) != 0
    proto4 = g(off, 9)
    bad4 = is4 & ((ihl < 20) | (cap < ihl) | (tot < ihl))
    malformed |= bad4
    is4 &= ~bad4
    fragments = is4 & frag4
    is4 &= ~frag4

    # --- IPv6 without extension headers (the rest goes to the scalar walker) ---
    plen6 = be16(off, 4)
    nh6 = g(off, 6)
    slow = is6 & (np.isin(nh6, _V6_EXT) | (plen6 == 0))
    is6 &= ~slow

    proto = np.where(is4, proto4, np.where(is6, nh6, -1))
    l4 = np.where(is4, ihl, 40)
    l4len = np.where(is4, tot - ihl, plen6)
    is_ip = is4 | is6
    tcp = is_ip & (proto == PROTO_TCP)
    udp = is_ip & (proto == PROTO_UDP)
    non_tcp = is_ip & ~tcp & ~udp

    bad_tcp = tcp & ((cap < l4 + 20) | (l4len < 20))
    doff = (g(off, l4 + 12) >> 4) * 4
    bad_tcp |= tcp & ((doff < 20) | (doff > l4len))
    tcp &= ~bad_tcp
    malformed |= bad_tcp
    bad_udp = udp & ((cap < l4 + 8) | (l4len < 8))
    udp &= ~bad_udp
    malformed |= bad_udp

    counts["non_ip"] += int(np.count_nonzero(non_ip))
    counts["malformed"] += int(np.count_nonzero(malformed))
    counts["fragments"] += int(np.count_nonzero(fragments))
    counts["non_tcp"] += int(np.count_nonzero(non_tcp | udp))
    counts["udp"] += int(np.count_nonzero(udp))

    rows = np.flatnonzero(tcp)
    t = SegmentTable.empty(len(rows))
    if len(rows):
        ro = ip_off[rows]
        l4r = l4[rows]
        v6 = is6[rows]
        t.ts_ns = ts_ns[rows].astype(np.int64)
        t.v6 = v6
        t.src_lo = be32(ro, 12).astype(np.uint64)
        t.dst_lo = be32(ro, 16).astype(np.uint64)
        if v6.any():  # 128-bit addresses as two big-endian 64-bit words
            t.src_lo = np.where(v6, _be64(u8, ro + 16), t.src_lo)
            t.src_hi = np.where(v6, _be64(u8, ro + 8), np.uint64(0))
            t.dst_lo = np.where(v6, _be64(u8, ro + 32), t.dst_lo)
            t.dst_hi = np.where(v6, _be64(u8, ro + 24), np.uint64(0))
        t.sport = be16(ro, l4r)
        t.dport = be16(ro, l4r + 2)
        t.seq = be32(ro, l4r + 4)
        t.ack = be32(ro, l4r + 8)
        b12 = g(ro, l4r + 12)
        t.flags = g(ro, l4r + 13) | ((b12 & 1) << 8)
        t.window = be16(ro, l4r + 14)
        t.payload_len = l4len[rows] - (b12 >> 4) * 4
        # option bytes the capture holds: from the fixed header's end to doff or caplen
        o_end = np.minimum((b12 >> 4) * 4, ip_caplen[rows] - l4r)
        _sack_batch(g, ro + l4r + 20, o_end - 20, t)

    slow_rows = np.flatnonzero(slow)
    if len(slow_rows):
        t = _merge_slow(t, data, ts_ns, ip_off, ip_caplen, ip_orig_len, slow_rows, counts)
    t.counts = counts
    return t


_Gather = Callable[[np.ndarray, np.ndarray | int], np.ndarray]  # parse_batch's byte reader


def _sack_batch(g: _Gather, base: np.ndarray, olen: np.ndarray, t: SegmentTable) -> None:
    """`sack_blocks` for every row at once: one vectorised step of the option walk per option,
    over the rows still walking (a real option area holds at most a handful of options, and 40
    bytes bound the walk). Same rules: a damaged area yields no blocks."""
    # most segments carry only Linux's NOP NOP timestamp (12 bytes): nothing to walk there
    ts_only = (olen == 12) & (g(base, 0) == TCPOPT_NOP) & (g(base, 1) == TCPOPT_NOP) & (g(base, 2) == 8)
    rows = np.flatnonzero((olen > 0) & ~ts_only)
    pos = np.zeros(len(rows), dtype=np.int64)
    b, ln = base[rows], olen[rows]
    for _ in range(40):
        if len(rows) == 0:
            break
        live = pos < ln
        rows, pos, b, ln = rows[live], pos[live], b[live], ln[live]
        if len(rows) == 0:
            break
        kind = g(b, pos)
        nop = kind == TCPOPT_NOP
        olen_i = np.where(pos + 1 < ln, g(b, pos + 1), 0)
        bad = ~nop & (kind != TCPOPT_EOL) & ((pos + 1 >= ln) | (olen_i < 2) | (pos + olen_i > ln))
        sack = ~nop & ~bad & (kind == TCPOPT_SACK)
        if sack.any():
            k = (olen_i[sack] - 2) // 8
            ok = ((olen_i[sack] - 2) % 8 == 0) & (k >= 1) & (k <= MAX_SACK_BLOCKS)
            r_s, b_s, p_s, k_s = rows[sack][ok], b[sack][ok], pos[sack][ok], k[ok]
            t.sack_n[r_s] = k_s
            for j in range(MAX_SACK_BLOCKS):
                m = k_s > j
                if m.any():
                    o = p_s[m] + 2 + 8 * j
                    t.sack_le[r_s[m], j] = _be32(g, b_s[m], o)
                    t.sack_re[r_s[m], j] = _be32(g, b_s[m], o + 4)
        # a row stops at the end of its list, a damaged option or its SACK option
        go = ~bad & ~sack & (kind != TCPOPT_EOL)
        step = np.where(nop, 1, olen_i)
        rows, pos, b, ln = rows[go], pos[go] + step[go], b[go], ln[go]


def _be32(g: _Gather, base: np.ndarray, k: np.ndarray) -> np.ndarray:
    return (g(base, k) << 24) | (g(base, k + 1) << 16) | (g(base, k + 2) << 8) | g(base, k + 3)


def _be64(u8: np.ndarray, idx: np.ndarray) -> np.ndarray:
    top = len(u8) - 8
    rows = u8[np.minimum(idx, top)[:, None] + np.arange(8, dtype=np.int64)]
    return rows.view(">u8").reshape(-1).astype(np.uint64)


def _merge_slow(
    t: SegmentTable,
    data: bytes,
    ts_ns: np.ndarray,
    ip_off: np.ndarray,
    ip_caplen: np.ndarray,
    ip_orig_len: np.ndarray,
    slow_rows: np.ndarray,
    counts: dict[str, int],
) -> SegmentTable:
    """Parse the packets the vectorised path skipped one by one and merge in capture order."""
    extra: list[tuple[int, TCPSegment]] = []
    for r in slow_rows.tolist():
        o, c = int(ip_off[r]), int(ip_caplen[r])
        p = parse_ip(data[o : o + c], int(ip_orig_len[r]), counts)
        if isinstance(p, TCPSegment):
            extra.append((int(ts_ns[r]), p))
        elif isinstance(p, UDPDatagram):
            counts["non_tcp"] += 1
            counts["udp"] += 1
    if not extra:
        return t
    e = SegmentTable.from_segments(extra)
    merged = SegmentTable(**{k: np.concatenate([getattr(t, k), getattr(e, k)]) for k in _COLUMNS})
    # keep capture order: stable sort on timestamp ties keeps fast rows first, which is fine
    order = np.argsort(merged.ts_ns, kind="stable")
    return merged.take(order)


# --- packet builders (synthetic captures for tests, fuzz seeds and lab fixtures) -------------


def tcp_header(
    sport: int,
    dport: int,
    seq: int,
    ack: int,
    flags: int,
    window: int = 65535,
    options: bytes = b"",
) -> bytes:
    if len(options) % 4:
        options += b"\x00" * (4 - len(options) % 4)
    doff = (20 + len(options)) // 4
    return (
        struct.pack(
            "!HHIIBBHHH",
            sport,
            dport,
            seq & 0xFFFFFFFF,
            ack & 0xFFFFFFFF,
            (doff << 4) | ((flags >> 8) & 1),
            flags & 0xFF,
            window,
            0,
            0,
        )
        + options
    )


def ipv4_tcp(
    src: bytes,
    dst: bytes,
    tcp: bytes,
    payload_len: int,
    *,
    ident: int = 0,
    frag: int = 0x4000,
    ip_options: bytes = b"",
    proto: int = PROTO_TCP,
) -> tuple[bytes, int]:
    """(captured header bytes, wire length) of an IPv4 packet with `payload_len` unseen bytes."""
    ihl = 5 + len(ip_options) // 4
    total = ihl * 4 + len(tcp) + payload_len
    hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, total, ident, frag, 64, proto, 0, src, dst)
    return hdr + ip_options + tcp, total


def ipv6_tcp(
    src: bytes,
    dst: bytes,
    tcp: bytes,
    payload_len: int,
    *,
    ext: list[tuple[int, bytes]] | None = None,
    proto: int = PROTO_TCP,
) -> tuple[bytes, int]:
    """IPv6 analogue of `ipv4_tcp`; `ext` is a chain of (header type, 6+8k body bytes)."""
    chain = ext or []
    ext_bytes = b""
    first = chain[0][0] if chain else proto
    for i, (_kind, body) in enumerate(chain):
        nxt = chain[i + 1][0] if i + 1 < len(chain) else proto
        hlen = (2 + len(body)) // 8 - 1
        ext_bytes += bytes([nxt, hlen]) + body
    plen = len(ext_bytes) + len(tcp) + payload_len
    hdr = struct.pack("!IHBB16s16s", 6 << 28, plen, first, 64, src, dst)
    return hdr + ext_bytes + tcp, 40 + plen
