"""Our own QUIC client's record of a download (its qlog), lined up with the capture.

The capture sees when datagrams crossed the bottleneck but not what they carried; the client
that made them knows what it received (packet numbers) and what every ACK it sent covered. The
client is ours (capture/quic), so its qlog is there for every measurement: matching its packets
to the captured datagrams (same order, sizes that add up) tells, for each client datagram at
the capture point, exactly which server packets it acknowledged. Anything that does not line up
(a truncated log, a datagram the client could not decrypt) makes the match fail as a whole, and
the estimate falls back to the capture alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MAX_LOG_BYTES = 256 * 1024 * 1024
ONE_RTT = ("1RTT", "one_rtt", "1rtt")


@dataclass
class LoggedPacket:
    space: str  # "1RTT", "initial", "handshake", "0RTT"
    pn: int
    length: int  # bytes of this packet in its datagram
    in_flight: bool  # carries a frame other than ACK (what the sender counts in flight)
    acked: tuple[tuple[int, int], ...] = ()  # sent packets: 1-RTT ACK ranges it carries


@dataclass
class ClientLog:
    sent: list[LoggedPacket]
    received: list[LoggedPacket]


def read_client_log(path: str | Path) -> ClientLog | None:
    """The client qlog's sent and received packets in order; None when it cannot be read."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    if len(raw) > MAX_LOG_BYTES:
        return None
    sent: list[LoggedPacket] = []
    recv: list[LoggedPacket] = []
    for rec in raw.decode("utf-8", errors="replace").replace("\x1e", "\n").splitlines():
        if 'packet_sent"' not in rec and 'packet_received"' not in rec:
            continue
        try:
            e = json.loads(rec)
            d = e["data"]
            h = d["header"]
            frames = d.get("frames") or []
            kinds = [f.get("frame_type") for f in frames if isinstance(f, dict)]
            p = LoggedPacket(
                space=str(h.get("packet_type")),
                pn=int(h.get("packet_number")),
                length=int(d["raw"]["length"]),
                in_flight=any(k not in ("ack",) for k in kinds),
            )
            if e["name"].endswith("packet_sent"):
                if p.space in ONE_RTT:
                    for f in frames:
                        if isinstance(f, dict) and f.get("frame_type") == "ack":
                            p.acked = tuple((int(a[0]), int(a[-1])) for a in f.get("acked_ranges", []))
                sent.append(p)
            else:
                recv.append(p)
        except (ValueError, KeyError, TypeError, IndexError):
            continue
    return ClientLog(sent, recv)


MAX_SKIP = 4  # 1-RTT packets a long-header datagram may carry at its end (handshake only)


def match_short(
    short: list[bool], sizes: list[int], packets: list[LoggedPacket]
) -> list[LoggedPacket | None] | None:
    """The logged 1-RTT packet of each short-header datagram (None for long-header ones).

    A datagram that starts with a short header holds exactly one packet, so its size must equal
    the next logged 1-RTT packet's length. During the handshake a few 1-RTT packets ride at the
    end of long-header datagrams (and padding hides the boundary), so up to MAX_SKIP logged ones
    may be passed over there. None when the log and the capture do not line up."""
    one = [p for p in packets if p.space in ONE_RTT]
    out: list[LoggedPacket | None] = []
    j = 0
    misses = 0
    for is_short, size in zip(short, sizes, strict=True):
        if not is_short:
            out.append(None)
            continue
        k = j
        while k < len(one) and k - j <= MAX_SKIP and one[k].length != size:
            k += 1
        if k < len(one) and one[k].length == size:
            out.append(one[k])
            j = k + 1
        else:
            out.append(None)
            misses += 1
    n = sum(short)
    if n == 0 or misses > max(3, n // 100):
        return None
    return out


WINDOW = 64  # captured datagrams searched ahead for a logged packet's match


def align_received(
    short: list[bool], sizes: list[int], likely_dropped: list[bool], packets: list[LoggedPacket]
) -> list[LoggedPacket | None] | None:
    """The logged 1-RTT packet each captured server datagram became at the client, or None for
    a datagram the bottleneck dropped (or a long-header one). The capture holds every server
    datagram, the client's log only those that arrived, both in order. Each logged packet takes
    a captured datagram of its size, skipping as few datagrams as possible that the replayed
    queue says got through, and otherwise as many as its packet number jumped (a jump is that
    many drops, or a number the sender skipped on purpose). None when the two do not line up."""
    one = [p for p in packets if p.space in ONE_RTT]
    out: list[LoggedPacket | None] = [None] * len(sizes)
    idx = [i for i, s in enumerate(short) if s]
    pos = 0
    prev_pn: int | None = None
    misses = 0
    for p in one:
        gap = max(0, p.pn - prev_pn - 1) if prev_pn is not None else 0
        hi = min(pos + max(WINDOW, gap + WINDOW), len(idx))
        cands = [q for q in range(pos, hi) if sizes[idx[q]] == p.length]
        if not cands:
            misses += 1
            continue
        want = pos + gap
        # skipping a datagram the replay let through is the costly mistake (packet numbers are
        # also skipped on purpose, so the gap alone would misplace them); then the gap decides
        passed = [0]
        for q in range(pos, hi):
            passed.append(passed[-1] + (not likely_dropped[idx[q]]))
        q = min(cands, key=lambda c: (passed[c - pos], abs(c - want), c))
        out[idx[q]] = p
        pos = q + 1
        prev_pn = p.pn
    if not one or misses > max(3, len(one) // 100):
        return None
    return out
