"""Captured QUIC datagrams -> the server's bytes in flight, without decrypting anything.

QUIC encrypts packet numbers and ACK frames, so the capture sees per datagram only its time,
direction, UDP payload size and the unprotected header bits: long or short header, the long
header's type and version, and the short header's spin bit. Two estimators read that:

* ``published`` (the method's heuristic, thesis §6.2.2): every server datagram is data, every
  client datagram an ACK of a constant size = server bytes / client datagrams.

* ``link`` (ccscope's): the bottleneck is ours, so where each server datagram went is known.
  The capture stamps server datagrams *before* the drop-tail queue; replaying the queue with the
  profile's rate, buffer and delay (the same arithmetic as capture/link/src/emu.rs) gives which
  datagrams were dropped and when each survivor reached the client. A client datagram leaves
  the client one uplink delay before the capture sees it, and a QUIC receiver acknowledges
  everything it holds in every ACK, so each client datagram acknowledges exactly the server
  datagrams delivered before it left. Dropped datagrams are never acknowledged: the server
  declares them lost by RFC 9002's thresholds (3 later packets acknowledged, or 9/8 RTT), and
  the estimate does the same. Small server datagrams are ACK-only (not in flight) by size, as
  are client datagrams: a client datagram larger than an ACK carries data or ACK ranges, which
  is counted as a sign of loss (the receiver's cadence changes after a gap).

Both run in the capture's frame and, shifted by half the Internet RTT (from the handshake and,
where the server spins it, the spin bit), in the sender's. Datagrams that are not QUIC, or whose
header this parser does not understand, are counted and skipped, never trusted.
"""

from __future__ import annotations

import ipaddress
import itertools
import math
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccscope.capture.pcap import PcapReader
from ccscope.capture.quic_clientlog import ClientLog, align_received, match_short, read_client_log
from ccscope.errors import CaptureError
from ccscope.profile import Profile, first_rate_bps
from ccscope.trace import FlowKey, Trace

ALIGNMENTS = ("capture", "sender")
ESTIMATORS = ("client", "link", "published")
QUIC_PORTS = (443, 8443, 4433)
# A server datagram this small holds no data: an ACK-only packet (1-byte header flags, up to a
# 20-byte DCID, packet number, an ACK frame, 16-byte AEAD tag) - not counted in flight.
ACK_ONLY_MAX = 64
PACKET_THRESHOLD = 3  # RFC 9002 kPacketThreshold
TIME_THRESHOLD = 9.0 / 8.0  # RFC 9002 kTimeThreshold
UDP_HDR = 8

# Header kinds (per datagram: its first packet's header)
K_NOT_QUIC, K_INITIAL, K_0RTT, K_HANDSHAKE, K_RETRY, K_VN, K_SHORT, K_UNKNOWN_VERSION = range(8)
KIND_NAMES = ("not_quic", "initial", "0rtt", "handshake", "retry", "version_negotiation", "short",
              "unknown_version")  # fmt: skip
QUIC_V1 = 0x00000001
QUIC_V2 = 0x6B3343CF
_V1_TYPES = (K_INITIAL, K_0RTT, K_HANDSHAKE, K_RETRY)
_V2_TYPES = (K_RETRY, K_INITIAL, K_0RTT, K_HANDSHAKE)  # RFC 9369 renumbers the long types
REASONS = ("non_ip", "non_udp", "fragments", "malformed", "not_quic", "unknown_version")


@dataclass
class Datagrams:
    """The UDP datagrams of one flow, in capture order, with what their headers show."""

    t_ns: np.ndarray  # int64 capture time
    to_client: np.ndarray  # bool: server -> client
    size: np.ndarray  # int64 UDP payload bytes (what QUIC counts in flight)
    ip_len: np.ndarray  # int64 IP packet bytes (what the link serialises)
    kind: np.ndarray  # int8 K_* of the first packet
    spin: np.ndarray  # int8: short header spin bit, -1 for long headers
    scid_len: np.ndarray  # int8: long header's source connection ID length, -1 otherwise
    versions: dict[int, int] = field(default_factory=dict)  # long-header version -> datagrams

    def __len__(self) -> int:
        return len(self.t_ns)


@dataclass
class QuicFlow:
    key: FlowKey  # server = the side that did not send the first Initial
    d: Datagrams


@dataclass
class QuicCapture:
    flows: list[QuicFlow]  # largest (server bytes) first
    stats: dict[str, int]
    partial: bool = False


def classify_header(head: bytes) -> tuple[int, int, int]:
    """(kind, spin, version) of a UDP payload's first bytes. Never raises."""
    if not head:
        return K_NOT_QUIC, -1, 0
    b0 = head[0]
    if b0 & 0x80:
        if len(head) < 7:  # flags, version, DCID length, SCID length at least
            return K_NOT_QUIC, -1, 0
        (ver,) = struct.unpack_from("!I", head, 1)
        if ver == 0:
            return K_VN, -1, 0
        dcil = head[5]
        if dcil > 20 or len(head) < 7 + dcil:  # v1/v2 cap connection IDs at 20 bytes
            return K_NOT_QUIC, -1, ver
        ptype = (b0 >> 4) & 0x03
        if ver == QUIC_V1 or (ver & 0x0F0F0F0F) == 0x0A0A0A0A:  # v1 and greased versions
            kinds = _V1_TYPES
        elif ver == QUIC_V2:
            kinds = _V2_TYPES
        else:
            return K_UNKNOWN_VERSION, -1, ver
        if not b0 & 0x40:
            return K_NOT_QUIC, -1, ver
        return kinds[ptype], -1, ver
    # Short header: the fixed bit must be set (a peer may grease it only where the client asked
    # for it, RFC 9287, which ours never does): anything else on the port is not QUIC
    if len(head) < 2 or not b0 & 0x40:
        return K_NOT_QUIC, -1, 0
    return K_SHORT, (b0 >> 5) & 1, 0


def _udp(
    pkt: bytes, orig_len: int, counts: dict[str, int]
) -> tuple[bytes, bytes, int, int, int, int, bytes] | None:
    """(src, dst, sport, dport, udp_payload_len, ip_len, payload head) of an IP/UDP packet."""
    n = len(pkt)
    if n < 1:
        counts["malformed"] += 1
        return None
    ver = pkt[0] >> 4
    if ver == 4:
        if n < 20:
            counts["malformed"] += 1
            return None
        ihl = (pkt[0] & 0x0F) * 4
        tot, frag, proto = struct.unpack_from("!H2xHxB", pkt, 2)
        if tot == 0:
            tot = orig_len
        if ihl < 20 or n < ihl or tot < ihl:
            counts["malformed"] += 1
            return None
        if frag & 0x3FFF:
            counts["fragments"] += 1
            return None
        src, dst, l4, ip_len = bytes(pkt[12:16]), bytes(pkt[16:20]), ihl, tot
    elif ver == 6:
        if n < 40:
            counts["malformed"] += 1
            return None
        plen, proto = struct.unpack_from("!HB", pkt, 4)
        if plen == 0:
            plen = max(0, orig_len - 40)
        src, dst, l4, ip_len = bytes(pkt[8:24]), bytes(pkt[24:40]), 40, 40 + plen
        # Extension headers are not walked: a measurement's QUIC never carries them.
    else:
        counts["non_ip"] += 1
        return None
    if proto != 17:
        counts["non_udp"] += 1
        return None
    if n < l4 + UDP_HDR or ip_len < l4 + UDP_HDR:
        counts["malformed"] += 1
        return None
    sport, dport, ulen = struct.unpack_from("!HHH", pkt, l4)
    size = ip_len - l4 - UDP_HDR
    if ulen and ulen - UDP_HDR != size:
        # UDP and IP disagree on the length: the IP length is what crossed the wire
        size = min(size, max(0, ulen - UDP_HDR))
    return src, dst, sport, dport, size, ip_len, bytes(pkt[l4 + UDP_HDR : l4 + UDP_HDR + 64])


def read_quic(
    source: str | os.PathLike[str] | bytes | Iterable[tuple[int, bytes, int]],
) -> QuicCapture:
    """Every UDP flow of a capture that speaks QUIC, as header-level datagrams.

    `source` is a pcap/pcapng (path or bytes) or (ts_ns, ip_packet, orig_len) tuples. A flow's
    client is the side whose first datagram is a long-header Initial (else the side not on a
    well-known QUIC port, else the first sender)."""
    counts = dict.fromkeys(REASONS, 0)
    partial = False
    if isinstance(source, str | bytes | os.PathLike):
        reader = PcapReader(source)
        counts["non_ip"] += reader.non_ip
        counts["malformed"] += reader.malformed
        partial = reader.truncated
        packets: Iterable[tuple[int, bytes, int]] = reader
    else:
        packets = source
    per: dict[tuple[bytes, int, bytes, int], list[tuple[int, bool, int, int, int, int, int, int]]] = {}
    first: dict[tuple[bytes, int, bytes, int], tuple[bytes, int, int]] = {}
    versions: dict[tuple[bytes, int, bytes, int], dict[int, int]] = {}
    total = 0
    for ts, pkt, orig in packets:
        total += 1
        u = _udp(pkt, orig, counts)
        if u is None:
            continue
        src, dst, sport, dport, size, ip_len, head = u
        kind, spin, ver = classify_header(head)
        scil = -1
        if kind in (K_INITIAL, K_0RTT, K_HANDSHAKE, K_RETRY) and len(head) > 6 + head[5]:
            scil = head[6 + head[5]]
        if kind == K_NOT_QUIC:
            counts["not_quic"] += 1
            continue
        if kind == K_UNKNOWN_VERSION:
            counts["unknown_version"] += 1
        a, b = (src, sport), (dst, dport)
        key = (*a, *b) if a <= b else (*b, *a)
        if key not in first:
            first[key] = (src, sport, kind)
        fwd = (src, sport) == (key[0], key[1])
        per.setdefault(key, []).append((int(ts), fwd, size, ip_len, kind, spin, ver, scil))
        if ver:
            vd = versions.setdefault(key, {})
            vd[ver] = vd.get(ver, 0) + 1
    flows = []
    for key, rows in per.items():
        fsrc, fport, fkind = first[key]
        a_is_client = (fsrc, fport) == (key[0], key[1])
        if fkind != K_INITIAL:
            # no Initial seen first (a capture started mid-connection): the well-known port is
            # the server's
            if key[3] in QUIC_PORTS and key[1] not in QUIC_PORTS:
                a_is_client = True
            elif key[1] in QUIC_PORTS and key[3] not in QUIC_PORTS:
                a_is_client = False
        arr = np.array([(r[0], r[2], r[3], r[4], r[5], r[7]) for r in rows], dtype=np.int64)
        fwd = np.array([r[1] for r in rows], dtype=bool)
        to_client = fwd != a_is_client  # fwd = sent by key's side a
        order = np.argsort(arr[:, 0], kind="stable")
        d = Datagrams(
            t_ns=arr[order, 0], to_client=to_client[order], size=arr[order, 1], ip_len=arr[order, 2],
            kind=arr[order, 3].astype(np.int8), spin=arr[order, 4].astype(np.int8),
            scid_len=arr[order, 5].astype(np.int8), versions=versions.get(key, {}),
        )  # fmt: skip
        c_addr, c_port, s_addr, s_port = (
            (key[0], key[1], key[2], key[3]) if a_is_client else (key[2], key[3], key[0], key[1])
        )
        fk = FlowKey(_addr(s_addr), int(s_port), _addr(c_addr), int(c_port), transport="quic")
        flows.append(QuicFlow(fk, d))
    flows.sort(key=lambda f: -int(f.d.size[f.d.to_client].sum()))
    stats = {"packets": total, **counts, "udp_flows": len(flows)}
    stats["truncated"] = int(partial)
    return QuicCapture(flows, stats, partial)


def _addr(b: bytes) -> str:
    return str(ipaddress.ip_address(b))


# --- the link the capture sits in front of -------------------------------------------------


@dataclass(frozen=True)
class LinkModel:
    """The profile's downlink as the emulator runs it: FIFO drop-tail at a fixed rate, then delay."""

    rate_bps: float
    buffer_bytes: float  # math.inf: no limit
    down_delay_s: float
    up_delay_s: float
    up_rate_bps: float | None

    @classmethod
    def from_profile(
        cls, profile: Profile | dict[str, Any] | None, link_stats: dict[str, Any] | None = None
    ) -> LinkModel | None:
        """None when the profile is unknown or the link is not a fixed-rate FIFO without jitter
        (rate schedules, jitter, per-flow queues): then only the published estimator applies."""
        if profile is None:
            return None
        try:
            p = profile if isinstance(profile, Profile) else Profile.from_dict(profile)
        except Exception:
            return None
        if p.down.jitter_ms or "," in p.down.rate or p.down.drop_nth or p.down.drop_window_over:
            return None
        try:
            rate = first_rate_bps(p.down.rate)
            up = first_rate_bps(p.up.rate)
        except Exception:
            return None
        if rate is None:
            return None
        buf = _buffer_bytes(p.down.buffer, rate, p.base_rtt_ms, p.mtu)
        if link_stats:  # the emulator reports the limit it resolved: trust it over our reading
            lim = (link_stats.get("down") or {}).get("buffer_bytes_limit")
            if isinstance(lim, int | float) and not isinstance(lim, bool):
                buf = float(lim)
        if buf is None:
            return None
        return cls(rate, buf, p.down.delay_ms / 1000.0, p.up.delay_ms / 1000.0, up)


def _buffer_bytes(spec: str, rate_bps: float, rtt_ms: float, mtu: int) -> float | None:
    s = spec.strip().lower()
    if s == "inf":
        return math.inf
    try:
        if s.endswith("bdp"):
            return max(round(float(s[:-3]) * rate_bps / 8.0 * rtt_ms / 1000.0), mtu)
        if s.endswith("b"):
            return float(s[:-1])
    except ValueError:
        return None
    return None  # packet-counted buffers are not modelled


@dataclass
class Replay:
    """What the link did to each server datagram (index into the flow's server datagrams)."""

    dropped: np.ndarray  # bool
    arrive_ns: np.ndarray  # int64 arrival at the client (dropped: -1)


def replay_downlink(t_ns: np.ndarray, ip_len: np.ndarray, link: LinkModel) -> Replay:
    """The emulator's drop-tail queue (emu.rs enqueue): a datagram is dropped when the bytes still
    being serialised plus its own exceed the buffer; otherwise it starts when the previous one
    ends, takes ip_len*8/rate, and arrives one delay later."""
    n = len(t_ns)
    dropped = np.zeros(n, dtype=bool)
    arrive = np.full(n, -1, dtype=np.int64)
    ser = ip_len.astype(np.float64) * 8.0 / link.rate_bps * 1e9
    delay = round(link.down_delay_s * 1e9)
    occ: list[tuple[float, int]] = []  # (end_ns, bytes) of datagrams in the queue
    head = 0
    occ_bytes = 0
    last_end = -math.inf
    limit = link.buffer_bytes
    tl, ll, sl = t_ns.tolist(), ip_len.tolist(), ser.tolist()
    for i in range(n):
        now = tl[i]
        while head < len(occ) and occ[head][0] <= now:
            occ_bytes -= occ[head][1]
            head += 1
        if occ_bytes + ll[i] > limit:
            dropped[i] = True
            continue
        start = max(last_end, now)
        end = start + sl[i]
        last_end = end
        if end > now:
            occ.append((end, ll[i]))
            occ_bytes += ll[i]
        arrive[i] = int(end) + delay
    return Replay(dropped, arrive)


# --- the estimators -----------------------------------------------------------------------


@dataclass
class Estimate:
    """Event series of one estimator in one frame: BiF after each event."""

    t_ns: np.ndarray
    bif: np.ndarray
    loss_ns: np.ndarray  # when a datagram was declared lost (link estimator only)
    info: dict[str, Any] = field(default_factory=dict)


def _series(
    add_t: np.ndarray, add_v: np.ndarray, sub_t: np.ndarray, sub_v: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """BiF after every event: additions and subtractions merged in time (at equal times the
    subtraction goes first, as a server processes an ACK before it sends what the ACK allows)."""
    t = np.concatenate([sub_t, add_t])
    v = np.concatenate([-sub_v, add_v]).astype(np.int64)
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    return t, np.maximum(np.cumsum(v), 0)


def estimate_published(d: Datagrams, shift_ns: int = 0) -> Estimate:
    """The thesis heuristic: server datagrams are data, client datagrams acknowledge a constant
    total_server_bytes / client_datagrams each."""
    srv = d.to_client
    s_t, s_v = d.t_ns[srv] - shift_ns, d.size[srv]
    c_t = d.t_ns[~srv] + shift_ns
    k = float(s_v.sum()) / max(1, len(c_t))
    t, bif = _series(s_t, s_v.astype(np.float64), c_t, np.full(len(c_t), k))
    return Estimate(t, bif, np.zeros(0, dtype=np.int64), {"bytes_per_ack": round(k, 1)})


def estimate_link(d: Datagrams, link: LinkModel, shift_ns: int = 0, rtt0_ns: int = 0) -> Estimate:
    """ccscope's estimate (module docstring): the replayed bottleneck tells which server
    datagrams each client datagram acknowledges and which the server will declare lost."""
    srv = np.flatnonzero(d.to_client)
    cli = np.flatnonzero(~d.to_client)
    st, ssize = d.t_ns[srv], d.size[srv]
    rep = replay_downlink(st, d.ip_len[srv], link)
    inflight = ssize > ACK_ONLY_MAX  # ACK-only datagrams are not in flight
    ct = d.t_ns[cli]
    # when each client datagram left the client: one uplink delay (+ its own serialisation)
    # before the capture saw it
    up_ser = d.ip_len[cli].astype(np.float64) * 8.0 / link.up_rate_bps * 1e9 if link.up_rate_bps else 0.0
    c_left = ct - round(link.up_delay_s * 1e9) - np.asarray(up_ser, dtype=np.int64)
    # the delivered datagrams in arrival order (FIFO: arrival order = capture order)
    deliv = np.flatnonzero(~rep.dropped)
    arr = rep.arrive_ns[deliv]
    # datagrams delivered before each client datagram left (never fewer than an earlier ACK had)
    reach = np.maximum.accumulate(np.searchsorted(arr, c_left, side="right")) if len(ct) else np.zeros(0, int)
    upto, per_ack = _ack_cadence(reach, len(deliv), ssize[deliv] <= ACK_ONLY_MAX)
    # bytes in flight acknowledged at each client datagram: the in-flight delivered datagrams
    # between the previous ACK's cover and this one's
    dsize = np.where(inflight[deliv], ssize[deliv], 0).astype(np.int64)
    cum = np.concatenate([[0], np.cumsum(dsize)])
    acked = np.diff(np.concatenate([[0], cum[upto]]))
    # largest server datagram index acknowledged so far, per client datagram (-1: none yet)
    largest = np.where(upto > 0, deliv[np.maximum(upto - 1, 0)], -1) if len(deliv) else np.full(len(ct), -1)
    # loss: a dropped in-flight datagram i is declared lost at the first ACK that covers i + 3,
    # or 9/8 RTT after it was sent once a later datagram is acknowledged, whichever comes first
    lost_i = np.flatnonzero(rep.dropped & inflight)
    loss_t = np.full(len(lost_i), -1, dtype=np.int64)
    rtt_ns = _rtt_samples(st, deliv, upto, ct, shift_ns, rtt0_ns)
    for j, i in enumerate(lost_i.tolist()):
        a3 = int(np.searchsorted(largest, i + PACKET_THRESHOLD - 1, side="right"))
        a1 = int(np.searchsorted(largest, i, side="right"))
        cand = []
        if a3 < len(ct):
            cand.append(int(ct[a3]))
        if a1 < len(ct):
            # the server's clock: ACK arrivals run 2*shift behind sends in the capture frame
            cand.append(max(int(ct[a1]), int(st[i] + TIME_THRESHOLD * rtt_ns[a1] - 2 * shift_ns)))
        if cand:
            loss_t[j] = min(cand)
    ok = loss_t >= 0
    sub_t = np.concatenate([ct, loss_t[ok]]) + shift_ns
    sub_v = np.concatenate([acked, ssize[lost_i[ok]]]).astype(np.float64)
    add_t = st[inflight] - shift_ns
    add_v = ssize[inflight].astype(np.float64)
    t, bif = _series(add_t, add_v, sub_t, sub_v)
    info = {
        "modelled_drops": int(rep.dropped.sum()),
        "declared_lost": int(ok.sum()),
        "ack_only_server_datagrams": int((~inflight).sum()),
        "data_datagrams_per_ack": round(per_ack, 3),
        "buffer_bytes": link.buffer_bytes if math.isfinite(link.buffer_bytes) else None,
    }
    return Estimate(t, bif, np.sort(loss_t[ok] + shift_ns), info)


def estimate_client(
    d: Datagrams, link: LinkModel, log: ClientLog, shift_ns: int = 0, rtt0_ns: int = 0
) -> Estimate | None:
    """The link estimator with our own client's record in place of the cadence model: each
    client datagram's ACK ranges (from the client's qlog, matched to the captured datagrams by
    order and size) say exactly which server packets it acknowledged, and the received packets
    say which of them the server counts in flight. Handshake-phase datagrams (long headers,
    padded, coalesced) keep the link estimator's rule. None when the log does not line up."""
    srv = np.flatnonzero(d.to_client)
    cli = np.flatnonzero(~d.to_client)
    if not len(cli):
        return None
    st, ssize = d.t_ns[srv], d.size[srv]
    rep = replay_downlink(st, d.ip_len[srv], link)
    short = d.kind[srv] == K_SHORT
    m_recv = align_received(short.tolist(), ssize.tolist(), rep.dropped.tolist(), log.received)
    m_sent = match_short((d.kind[cli] == K_SHORT).tolist(), d.size[cli].tolist(), log.sent)
    if m_recv is None or m_sent is None:
        return None
    # what got through: for short-header datagrams the client's log says, for the handshake's
    # long-header ones the replayed queue; the last logged packet ends what can be known
    seen = np.array([p is not None for p in m_recv])
    last = int(np.flatnonzero(seen)[-1]) if seen.any() else -1
    dropped_all = np.where(short, ~seen, rep.dropped)
    dropped_all[last + 1 :] = rep.dropped[last + 1 :]
    rep = Replay(dropped_all, rep.arrive_ns)
    deliv = np.flatnonzero(~rep.dropped)
    m_recv = [m_recv[j] for j in deliv.tolist()]
    ct = d.t_ns[cli]
    # what each server datagram adds in flight: its size, unless the client saw it was ACK-only
    add = np.where(ssize > ACK_ONLY_MAX, ssize, 0).astype(np.int64)
    pn_at: dict[int, int] = {}  # 1-RTT pn -> server datagram index
    long_idx = []  # delivered long-header datagrams: acknowledged by the reach rule
    last_pn = np.full(len(srv), -1, dtype=np.int64)
    for j, p in zip(deliv.tolist(), m_recv, strict=True):
        if p is None:
            long_idx.append(j)
            continue
        add[j] = p.length if p.in_flight else 0
        pn_at[p.pn] = j
        last_pn[j] = p.pn
    last_pn = np.maximum.accumulate(last_pn)
    acked_bytes = np.zeros(len(cli), dtype=np.int64)
    largest = np.full(len(cli), -1, dtype=np.int64)
    newest = np.full(len(cli), -1, dtype=np.int64)  # newest server datagram acknowledged
    done: set[int] = set()
    top = -1
    for k, p in enumerate(m_sent):
        for a, b in p.acked if p is not None else ():
            top = max(top, b)
            for pn in range(max(a, 0), b + 1):
                if pn in done:
                    continue
                done.add(pn)
                j = pn_at.get(pn)
                if j is not None:
                    acked_bytes[k] += add[j]
                    newest[k] = max(newest[k], j)
        largest[k] = top
    newest = np.maximum.accumulate(newest)
    # handshake-phase datagrams: acknowledged by the first client datagram after they arrived
    up_ser = d.ip_len[cli].astype(np.float64) * 8.0 / link.up_rate_bps * 1e9 if link.up_rate_bps else 0.0
    c_left = ct - round(link.up_delay_s * 1e9) - np.asarray(up_ser, dtype=np.int64)
    li = np.asarray(long_idx, dtype=np.int64)
    lk = np.searchsorted(c_left, rep.arrive_ns[li], side="left")
    ok = lk < len(cli)
    np.add.at(acked_bytes, lk[ok], add[li[ok]])
    # dropped datagrams: their packet number lies just past the last one delivered before them
    dropped = np.flatnonzero(rep.dropped & (ssize > ACK_ONLY_MAX))
    run = np.zeros(len(srv), dtype=np.int64)
    for i in np.flatnonzero(rep.dropped).tolist():
        run[i] = (run[i - 1] if i and rep.dropped[i - 1] else 0) + 1
    rtt = np.full(len(cli), max(rtt0_ns, 1), dtype=np.int64)
    have = newest >= 0
    rtt[have] = np.maximum(ct[have] - st[newest[have]] + 2 * shift_ns, 1)
    loss_t = np.full(len(dropped), -1, dtype=np.int64)
    for j, i in enumerate(dropped.tolist()):
        pn = int(last_pn[i]) + int(run[i])
        a3 = int(np.searchsorted(largest, pn + PACKET_THRESHOLD - 1, side="right"))
        a1 = int(np.searchsorted(largest, pn, side="right"))
        cand = []
        if a3 < len(ct):
            cand.append(int(ct[a3]))
        if a1 < len(ct):
            cand.append(max(int(ct[a1]), int(st[i] + TIME_THRESHOLD * rtt[a1] - 2 * shift_ns)))
        if cand:
            loss_t[j] = min(cand)
    lost_ok = loss_t >= 0
    sub_t = np.concatenate([ct, loss_t[lost_ok]]) + shift_ns
    sub_v = np.concatenate([acked_bytes, add[dropped[lost_ok]]]).astype(np.float64)
    keep = add > 0
    t, bif = _series(st[keep] - shift_ns, add[keep].astype(np.float64), sub_t, sub_v)
    info = {
        "modelled_drops": int(rep.dropped.sum()),
        "declared_lost": int(lost_ok.sum()),
        "client_log_packets": len(log.sent) + len(log.received),
        "buffer_bytes": link.buffer_bytes if math.isfinite(link.buffer_bytes) else None,
    }
    return Estimate(t, bif, np.sort(loss_t[lost_ok] + shift_ns), info)


def _ack_cadence(reach: np.ndarray, delivered: int, ack_only: np.ndarray) -> tuple[np.ndarray, float]:
    """How far each client datagram's acknowledgement reaches, in delivered datagrams.

    The time bound `reach` (what had arrived when it left) holds for a receiver that reads every
    datagram on arrival. A userspace client does not: while it waits for a CPU, datagrams sit
    unread in its socket (the server still counts them in flight), and it acknowledges what it
    has read, at its own cadence: about one ACK per one (quiche) or two (RFC 9000's default)
    data datagrams read. So each client datagram earns that cadence (data datagrams per client
    datagram over the flow) as credit, and its acknowledgement reaches no further than the
    credit and the time bound allow. ACK-only server datagrams elicit no ACK and cost no credit;
    unused credit is capped at one cadence plus one datagram, so a stall is not paid back at once.
    """
    n = len(reach)
    if n == 0 or delivered == 0:
        return reach.astype(np.int64), 0.0
    data = delivered - int(ack_only.sum())
    per_ack = max(data / n, 1e-9)
    # whole datagrams: a client ACKs after every one or every two it reads, never 0.99
    per_ack_i = max(1.0, float(round(per_ack)))
    cap = per_ack_i
    free = np.concatenate([[0], np.cumsum(ack_only.astype(np.int64))])  # ACK-only before index
    out = np.empty(n, dtype=np.int64)
    cur = 0
    credit = 0.0
    rl = reach.tolist()
    for k in range(n):
        credit = min(credit + per_ack_i, cap)
        lim = cur + int(credit + 1e-9)
        lim += int(free[min(lim, delivered)] - free[min(cur, delivered)])  # ACK-only: free
        nxt = max(cur, min(rl[k], lim, delivered))
        used = (nxt - cur) - int(free[nxt] - free[cur])
        credit -= used
        cur = nxt
        out[k] = cur
    return out, per_ack


def _rtt_samples(
    st: np.ndarray, deliv: np.ndarray, upto: np.ndarray, ct: np.ndarray, shift_ns: int, rtt0_ns: int
) -> np.ndarray:
    """The server's latest RTT sample at each client datagram (capture-frame send -> ACK time,
    plus the Internet RTT the capture cannot see); rtt0 before the first."""
    out = np.full(len(ct), max(rtt0_ns, 1), dtype=np.int64)
    if len(deliv) == 0 or len(ct) == 0:
        return out
    newest = deliv[np.maximum(upto - 1, 0)]
    s = ct - st[newest] + 2 * shift_ns
    have = upto > 0
    out[have] = np.maximum(s[have], 1)
    return out


# --- RTT of the part of the path the capture cannot see ---------------------------------------


def internet_rtt_ns(d: Datagrams) -> tuple[int | None, dict[str, Any]]:
    """The Internet RTT (capture point -> server -> capture point): the first client Initial
    leaving to the first server datagram arriving, refined by the spin bit where the server
    spins it (a client edge leaving -> the server's next edge arriving). The smaller wins: both
    include only server think time on top."""
    info: dict[str, Any] = {}
    cands = []
    ci = np.flatnonzero((~d.to_client) & (d.kind == K_INITIAL))
    if len(ci):
        t0 = d.t_ns[ci[0]]
        later = np.flatnonzero(d.to_client & (d.t_ns >= t0))
        if len(later):
            hs = int(d.t_ns[later[0]] - t0)
            info["handshake_rtt_ms"] = round(hs / 1e6, 3)
            cands.append(hs)
    spin = _spin_rtt(d)
    if spin is not None:
        info["spin_rtt_ms"] = round(spin / 1e6, 3)
        cands.append(spin)
    return (min(cands) if cands else None), info


def _spin_rtt(d: Datagrams) -> int | None:
    short = d.kind == K_SHORT
    edges: list[tuple[int, bool]] = []
    for side in (False, True):
        sel = np.flatnonzero(short & (d.to_client == side))
        if len(sel) < 4:
            return None
        s = d.spin[sel]
        ch = np.flatnonzero(np.diff(s) != 0) + 1
        edges += [(int(d.t_ns[sel[i]]), side) for i in ch.tolist()]
    if len(edges) < 4:
        return None  # the server does not spin (RFC 9000 lets it opt out)
    edges.sort()
    samples = [b[0] - a[0] for a, b in itertools.pairwise(edges) if not a[1] and b[1] and b[0] > a[0]]
    return int(min(samples)) if samples else None


# --- flows -> traces ------------------------------------------------------------------------


@dataclass
class QuicResult:
    traces: list[Trace]  # one per flow, largest first
    stats: dict[str, int]
    partial: bool = False
    info: list[dict[str, Any]] = field(default_factory=list)


def traces_from_quic(
    cap: QuicCapture,
    *,
    align: str = "capture",
    estimator: str = "client",
    object_url: str | None = None,
    profile: Profile | dict[str, Any] | None = None,
    link_stats: dict[str, Any] | None = None,
    client_log: str | os.PathLike[str] | None = None,
    client_port: int | None = None,
    min_server_bytes: int = 1,
) -> QuicResult:
    """One trace per QUIC flow. `estimator`: "client" (the link estimator reading our client's
    own record, `client_log`, for the flow on `client_port`, else the largest), falling back to
    "link" (the capture and the profile alone), falling back to "published" (no usable profile)."""
    if align not in ALIGNMENTS:
        raise CaptureError(f"unknown alignment {align!r} (choose from {', '.join(ALIGNMENTS)})")
    if estimator not in ESTIMATORS:
        raise CaptureError(f"unknown QUIC estimator {estimator!r} (choose from {', '.join(ESTIMATORS)})")
    prof = profile.to_dict() if isinstance(profile, Profile) else profile
    link = LinkModel.from_profile(profile, link_stats) if estimator != "published" else None
    log = read_client_log(client_log) if client_log is not None and estimator == "client" else None
    out: list[Trace] = []
    infos: list[dict[str, Any]] = []
    for f in cap.flows:
        d = f.d
        if int(d.size[d.to_client].sum()) < min_server_bytes or not (~d.to_client).any():
            continue
        rtt, rinfo = internet_rtt_ns(d)
        shift = (rtt or 0) // 2 if align == "sender" else 0
        pub = estimate_published(d, shift)
        used = "published"
        est = pub
        if link is not None:
            mine = f.key.client_port == client_port if client_port else f is cap.flows[0]
            by_log = estimate_client(d, link, log, shift, rtt or 0) if log is not None and mine else None
            if by_log is not None:
                est, used = by_log, "client"
            else:
                est, used = estimate_link(d, link, shift, rtt or 0), "link"
        t0 = int(d.t_ns[0]) - shift
        t = (est.t_ns - t0) / 1e9
        pub_at = _resample(pub.t_ns, pub.bif, est.t_ns)
        base = float((prof or {}).get("base_rtt_ms") or 0.0)
        kinds = {k: int((d.kind == i).sum()) for i, k in enumerate(KIND_NAMES)}
        info = {
            "estimator": used,
            **rinfo,
            **est.info,
            "published_bytes_per_ack": pub.info["bytes_per_ack"],
            "datagrams": {k: n for k, n in kinds.items() if n},
            "versions": {f"0x{v:08x}": n for v, n in sorted(d.versions.items())},
            "client_datagrams": int((~d.to_client).sum()),
            "server_datagrams": int(d.to_client.sum()),
            "spin": bool(rinfo.get("spin_rtt_ms") is not None),
        }
        if link_stats and link is not None:
            down = link_stats.get("down") or {}
            if isinstance(down.get("drops_queue"), int):
                info["link_drops_queue"] = down["drops_queue"]
        tr = Trace(
            flow=f.key,
            t=t,
            bif=est.bif,
            start_time=t0 / 1e9,
            source="pcap",
            profile=prof,
            base_rtt_ms=(base + rtt / 1e6) if rtt is not None and base else None,
            internet_rtt_ms=rtt / 1e6 if rtt is not None else None,
            bytes_acked=int(d.size[d.to_client & (d.size > ACK_ONLY_MAX)].sum()),
            object_url=object_url,
            partial=cap.partial,
            alignment=align,
            columns={"bif_published": pub_at},
            events={
                "retransmit": ((est.loss_ns - t0) / 1e9).tolist(),
                "loss": ((est.loss_ns - t0) / 1e9).tolist(),
            },
            extra={"quic": info, "packets": len(d)},
        )
        out.append(tr)
        infos.append(info)
    return QuicResult(out, dict(cap.stats), cap.partial, infos)


def _resample(t: np.ndarray, v: np.ndarray, at: np.ndarray) -> np.ndarray:
    """A step series' value at other instants (the value after the last event at or before)."""
    if len(t) == 0:
        return np.zeros(len(at), dtype=np.int64)
    i = np.searchsorted(t, at, side="right") - 1
    return np.where(i >= 0, v[np.clip(i, 0, len(v) - 1)], 0).astype(np.int64)


def quic_flows_from_pcap(
    path: str | os.PathLike[str] | bytes,
    aligns: Sequence[str] = ALIGNMENTS,
    **kw: Any,
) -> dict[str, QuicResult]:
    """`traces_from_quic` for several alignments from one parse of the capture."""
    cap = read_quic(path)
    if not cap.flows:
        raise CaptureError(f"the capture holds no QUIC flow ({_no_quic(cap.stats)})")
    return {a: traces_from_quic(cap, align=a, **kw) for a in aligns}


def _no_quic(stats: dict[str, int]) -> str:
    parts = [f"{stats.get('packets', 0)} packets"]
    parts += [f"{stats[k]} {k.replace('_', ' ')}" for k in REASONS if stats.get(k)]
    return ", ".join(parts)
