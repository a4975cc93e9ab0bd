"""Captured TCP packets -> one bytes-in-flight Trace per flow.

Per flow (server = the side that sent the SYN-ACK):

    max_seq_end = highest seq + len sent by the server (SYN and FIN count one)
    max_ack     = highest cumulative ACK sent by the client
    BiF         = max(0, max_seq_end - max_ack), sampled at every packet of the flow

Sequence numbers are made relative to the server's ISN modulo 2^32 and then unwrapped to 64 bits,
so an ISN near 2^32 or a multi-gigabyte transfer does not break the running maxima. Everything per
flow is vectorised (running maxima are `np.maximum.accumulate`), so the cost is dominated by the
pcap record walk.

Two alignments:

* "capture": times and order as seen at the bottleneck (the published method);
* "sender": estimate of the server's own BiF. A data packet seen at t left the server about d1
  earlier, an ACK seen at t reaches the server about d2 later, with d1 = d2 = internet_rtt / 2
  (the SYN -> SYN-ACK time at the capture point covers exactly the path the capture cannot see).
  Shifting both event kinds and re-running the maxima removes the error that otherwise grows with
  the invisible Internet RTT. `start_time` and `t` then estimate the server's clock. Events keep
  their capture-order classification and only move in time.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccscope.capture.packets import (
    REASONS,
    TCP_ACK,
    TCP_FIN,
    TCP_RST,
    TCP_SYN,
    SegmentTable,
    TCPSegment,
    UDPDatagram,
    addr_str,
    parse_batch,
    parse_ip,
)
from ccscope.capture.pcap import ip_frames, read_records
from ccscope.errors import CaptureError
from ccscope.profile import Profile
from ccscope.trace import FlowKey, Trace

ALIGNMENTS = ("capture", "sender")
WELL_KNOWN_SERVER_PORTS = (443, 80, 8443, 8080)
_M32 = 1 << 32
_H32 = 1 << 31
NO_HANDSHAKE = "no handshake"


@dataclass
class CaptureResult:
    """Traces of one capture (largest flow first) plus what was skipped and why."""

    traces: list[Trace]
    stats: dict[str, int]
    partial: bool = False
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (flow, reason)

    @property
    def main(self) -> Trace:
        """The flow that carried the most payload (normally the measured download)."""
        return self.traces[0]


def read_pcap_table(path: str | os.PathLike[str] | bytes) -> tuple[SegmentTable, dict[str, int], bool]:
    """Parse a pcap/pcapng once: its TCP segments, the packet counts, and whether it was cut short."""
    frames = ip_frames(read_records(path))
    table = parse_batch(frames.data, frames.ts_ns, frames.ip_off, frames.ip_caplen,
                        frames.ip_orig_len)  # fmt: skip
    stats = _base_stats(frames.records, table.counts)
    stats["non_ip"] += frames.non_ip
    stats["malformed"] += frames.malformed
    stats["truncated"] = int(frames.truncated)
    return table, stats, frames.truncated


class LiveCapture:
    """A classic pcap still being written (ccscope-link's), read as it grows: each `table()`
    parses only the records added since the last call and appends them to what was parsed
    before. Segments parse independently of each other, so the table is the one a parse of the
    whole file so far would give, for the cost of what is new: adaptive stopping reads the
    capture every few seconds. A record the writer has not finished waits for the next call."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._head: bytes | None = None  # the 24-byte global header
        self._done = 24  # file offset up to which whole records were parsed
        self._table: SegmentTable | None = None
        self._records = self._non_ip = self._malformed = 0

    def table(self) -> tuple[SegmentTable, dict[str, int], bool]:
        """The segments so far, the packet counts and whether the file ends inside a record (as
        read_pcap_table gives them); raises CaptureError for a file that is not (yet) a classic
        pcap or holds a corrupt record."""
        try:
            with open(self.path, "rb") as f:
                if self._head is None:
                    head = f.read(24)
                    if len(head) < 24:
                        raise CaptureError(f"{self.path}: no pcap header yet ({len(head)} bytes)")
                    if read_records(head).fmt != "pcap":
                        raise CaptureError(f"{self.path}: a live capture must be a classic pcap")
                    self._head = head
                f.seek(self._done)
                new = f.read()
        except OSError as e:
            raise CaptureError(f"{self.path}: cannot read capture: {e.strerror or e}") from e
        rec = read_records(self._head + new)
        if len(rec.off):
            frames = ip_frames(rec)
            part = parse_batch(frames.data, frames.ts_ns, frames.ip_off, frames.ip_caplen,
                               frames.ip_orig_len)  # fmt: skip
            self._table = part if self._table is None else _concat(self._table, part)
            self._records += frames.records
            self._non_ip += frames.non_ip
            self._malformed += frames.malformed
            self._done += int(rec.off[-1] + rec.caplen[-1]) - 24
        table = self._table if self._table is not None else parse_batch(b"", *(np.zeros(0, np.int64),) * 4)
        stats = _base_stats(self._records, table.counts)
        stats["non_ip"] += self._non_ip
        stats["malformed"] += self._malformed
        stats["truncated"] = int(rec.truncated)
        return table, stats, rec.truncated


def _concat(a: SegmentTable, b: SegmentTable) -> SegmentTable:
    from ccscope.capture.packets import _COLUMNS

    cols = {k: np.concatenate([getattr(a, k), getattr(b, k)]) for k in _COLUMNS}
    counts = {k: a.counts.get(k, 0) + b.counts.get(k, 0) for k in {*a.counts, *b.counts}}
    return SegmentTable(**cols, counts=counts)


def live_sender_trace(
    live: LiveCapture, *, object_url: str | None = None, profile: Profile | dict[str, Any] | None = None
) -> Trace:
    """The largest flow's sender-aligned trace from a capture so far (adaptive stopping's
    check: only the alignment the classifier reads)."""
    table, stats, partial = live.table()
    return traces_from_table(
        table,
        stats=stats,
        partial=partial,
        align="sender",
        object_url=object_url,
        profile=profile,
        source="pcap",
        require_handshake=True,
    ).main


def flows_from_pcap(
    path: str | os.PathLike[str] | bytes,
    *,
    align: str = "capture",
    min_payload_bytes: int = 1,
    object_url: str | None = None,
    profile: Profile | dict[str, Any] | None = None,
) -> CaptureResult:
    """Read a pcap/pcapng (path or raw bytes) and return one BiF trace per TCP flow."""
    return flows_from_pcap_aligned(
        path, (align,), min_payload_bytes=min_payload_bytes, object_url=object_url, profile=profile
    )[align]


def flows_from_pcap_aligned(
    path: str | os.PathLike[str] | bytes,
    aligns: Sequence[str] = ALIGNMENTS,
    *,
    min_payload_bytes: int = 1,
    object_url: str | None = None,
    profile: Profile | dict[str, Any] | None = None,
) -> dict[str, CaptureResult]:
    """`flows_from_pcap` for several alignments from one parse of the capture."""
    for a in aligns:
        _check_align(a)
    table, stats, partial = read_pcap_table(path)
    return {
        a: traces_from_table(
            table,
            stats=stats,
            partial=partial,
            align=a,
            min_payload_bytes=min_payload_bytes,
            object_url=object_url,
            profile=profile,
            source="pcap",
            require_handshake=True,
        )
        for a in aligns
    }


def traces_from_packets(
    packets: Iterable[tuple[float | int, bytes, int]],
    *,
    align: str = "capture",
    min_payload_bytes: int = 1,
    object_url: str | None = None,
    profile: Profile | dict[str, Any] | None = None,
    partial: bool = False,
) -> CaptureResult:
    """Traces from (timestamp, ip_packet_bytes, orig_ip_len) tuples, e.g. from `PcapReader`.

    A float timestamp is seconds, an int is nanoseconds.
    """
    _check_align(align)
    counts = dict.fromkeys(REASONS, 0)
    rows: list[tuple[int, TCPSegment]] = []
    n = 0
    for ts, pkt, orig in packets:
        n += 1
        p = parse_ip(pkt, orig, counts)
        if isinstance(p, TCPSegment):
            ts_ns = ts if isinstance(ts, int) else round(float(ts) * 1e9)
            rows.append((ts_ns, p))
        elif isinstance(p, UDPDatagram):
            counts["non_tcp"] += 1
    table = SegmentTable.from_segments(rows, counts)
    stats = _base_stats(n, counts)
    stats["truncated"] = int(partial)
    return traces_from_table(
        table,
        stats=stats,
        partial=partial,
        align=align,
        min_payload_bytes=min_payload_bytes,
        object_url=object_url,
        profile=profile,
        source="pcap",
        require_handshake=True,
    )


TCPRecord = tuple[float | int, str, int, str, int, int, int, int, int]
"""(t, src, sport, dst, dport, seq, ack, flags, payload_len); float t = seconds, int t = ns."""


def traces_from_records(
    records: Iterable[TCPRecord],
    *,
    align: str = "capture",
    min_payload_bytes: int = 1,
    object_url: str | None = None,
    profile: Profile | dict[str, Any] | None = None,
    source: str = "pcap",
) -> CaptureResult:
    """Traces from already-parsed TCP headers (other capture tools, lab hooks, tests)."""
    import ipaddress

    rows: list[tuple[int, TCPSegment]] = []
    packed: dict[str, bytes] = {}
    for t, src, sport, dst, dport, seq, ack, flags, plen in records:
        for a in (src, dst):
            if a not in packed:
                try:
                    packed[a] = ipaddress.ip_address(a).packed
                except ValueError as e:
                    raise CaptureError(f"bad address {a!r} in TCP record") from e
        ts_ns = t if isinstance(t, int) else round(float(t) * 1e9)
        seg = TCPSegment(packed[src], packed[dst], sport, dport, seq % _M32, ack % _M32,
                         flags, 0, plen, 20)  # fmt: skip
        rows.append((ts_ns, seg))
    table = SegmentTable.from_segments(rows)
    table.window_known = False
    return traces_from_table(
        table,
        stats=_base_stats(len(rows), {}),
        align=align,
        min_payload_bytes=min_payload_bytes,
        object_url=object_url,
        profile=profile,
        source=source,
        require_handshake=True,
    )


def _check_align(align: str) -> None:
    if align not in ALIGNMENTS:
        raise CaptureError(f"unknown alignment {align!r} (choose from {', '.join(ALIGNMENTS)})")


def _base_stats(packets: int, counts: dict[str, int]) -> dict[str, int]:
    stats = {"packets": int(packets)}
    for k in REASONS:
        stats[k] = int(counts.get(k, 0))
    stats["truncated"] = 0
    return stats


# --- flows --------------------------------------------------------------------------------


def traces_from_table(
    table: SegmentTable,
    *,
    stats: dict[str, int],
    partial: bool = False,
    align: str = "capture",
    min_payload_bytes: int = 1,
    object_url: str | None = None,
    profile: Profile | dict[str, Any] | None = None,
    source: str = "pcap",
    require_handshake: bool = True,
) -> CaptureResult:
    """The per-flow state machine over parsed TCP segments (shared by the pcap and CSV paths).

    With `require_handshake` a flow without a SYN-ACK is skipped ("no handshake"); without it
    (CSV imports, which may lack flags) the server is the side that sent more payload.
    """
    _check_align(align)
    prof = profile.to_dict() if isinstance(profile, Profile) else profile
    stats = dict(stats)
    stats["tcp"] = len(table)
    skipped: list[tuple[str, str]] = []
    traces: list[tuple[int, Trace]] = []
    if len(table) == 0:
        raise CaptureError(_no_tcp_message(stats))

    ts = table.ts_ns
    if np.any(np.diff(ts) < 0):  # merged multi-interface captures need not be in time order
        table = table.take(np.argsort(ts, kind="stable"))

    e_src, e_dst = _endpoint_ids(table)
    n_ep = int(max(e_src.max(), e_dst.max())) + 1
    pair = np.minimum(e_src, e_dst).astype(np.int64)
    pair *= n_ep
    pair += np.maximum(e_src, e_dst)
    fid = _dense_ids(pair)
    del pair
    order = np.argsort(fid, kind="stable")
    bounds = np.flatnonzero(np.diff(fid[order])) + 1
    del fid
    groups = np.split(order, bounds)
    stats["flows"] = 0
    for grp in groups:
        for conn in _split_connections(table, grp):
            stats["flows"] += 1
            out = _flow_trace(table, conn, e_src, align=align, require_handshake=require_handshake)
            if isinstance(out, str):
                skipped.append((_describe(table, conn), out))
                continue
            payload, tr = out
            if payload < min_payload_bytes:
                skipped.append((str(tr.flow), f"payload {payload} < {min_payload_bytes} bytes"))
                continue
            tr.source = source
            tr.profile = prof
            tr.object_url = object_url
            tr.partial = partial
            traces.append((payload, tr))

    stats["no_handshake"] = sum(1 for _, r in skipped if r == NO_HANDSHAKE)
    stats["too_small"] = sum(1 for _, r in skipped if r.startswith("payload"))
    if not traces:
        if skipped and all(r == NO_HANDSHAKE for _, r in skipped):
            raise CaptureError(
                f"{NO_HANDSHAKE}: none of the {len(skipped)} TCP flow(s) in the capture has a "
                "SYN-ACK, so the server side and its initial sequence number are unknown "
                "(start the capture before the connection opens)"
            )
        reasons = "; ".join(f"{f}: {r}" for f, r in skipped[:5])
        raise CaptureError(f"no usable TCP flow in the capture ({reasons})")
    traces.sort(key=lambda pt: -pt[0])
    return CaptureResult(traces=[t for _, t in traces], stats=stats, partial=partial, skipped=skipped)


def _no_tcp_message(stats: dict[str, int]) -> str:
    parts = ", ".join(f"{k}={v}" for k, v in stats.items() if v)
    return f"no TCP segments in the capture ({parts or 'no packets'})"


def _endpoint_ids(t: SegmentTable) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids of (address, port) endpoints for sources and destinations."""
    n = len(t)
    if not t.v6.any():
        # IPv4 address and port pack exactly into 48 bits: one fast integer unique
        ab = np.empty(2 * n, dtype=np.int64)
        for half, addr, port in ((ab[:n], t.src_lo, t.sport), (ab[n:], t.dst_lo, t.dport)):
            half[:] = addr
            half <<= 16
            half |= port
        ids = _dense_ids(ab)
        return ids[:n], ids[n:]
    rec = np.empty(2 * n, dtype=[("v6", "u1"), ("hi", "u8"), ("lo", "u8"), ("port", "i8")])
    rec["v6"] = np.concatenate([t.v6, t.v6])
    rec["hi"] = np.concatenate([t.src_hi, t.dst_hi])
    rec["lo"] = np.concatenate([t.src_lo, t.dst_lo])
    rec["port"] = np.concatenate([t.sport, t.dport])
    _, inv = np.unique(rec, return_inverse=True)
    inv = inv.reshape(-1).astype(np.int64)
    return inv[:n], inv[n:]


def _dense_ids(v: np.ndarray) -> np.ndarray:
    """Each value's rank among the distinct values (np.unique's inverse; int32 while that
    holds them) in a third of np.unique's memory: grouping a large capture's flows must not
    cost several times its table."""
    n = len(v)
    perm = np.argsort(v)
    ranked = v[perm]
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
    del ranked
    rank = np.cumsum(new, dtype=np.int64)
    del new
    rank -= 1
    ids = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)
    ids[perm] = rank
    return ids


def _split_connections(t: SegmentTable, grp: np.ndarray) -> list[np.ndarray]:
    """A reused 4-tuple holds several connections: cut where a SYN brings a new ISN."""
    if not t.flags_known or len(grp) < 2:
        return [grp]
    f = t.flags[grp]
    syn_pos = np.flatnonzero((f & (TCP_SYN | TCP_ACK)) == TCP_SYN)
    if len(syn_pos) < 2:
        return [grp]
    seqs = t.seq[grp][syn_pos]
    cuts = syn_pos[1:][seqs[1:] != seqs[:-1]]  # a retransmitted SYN keeps its ISN
    return np.split(grp, cuts) if len(cuts) else [grp]


def _describe(t: SegmentTable, idx: np.ndarray) -> str:
    i = int(idx[0])
    a = _addr(t, i, src=True)
    b = _addr(t, i, src=False)
    return f"tcp {a}:{int(t.sport[i])} <-> {b}:{int(t.dport[i])}"


def _addr(t: SegmentTable, i: int, *, src: bool) -> str:
    if not t.has_addresses:
        return "unknown"
    if src:
        return addr_str(bool(t.v6[i]), int(t.src_hi[i]), int(t.src_lo[i]))
    return addr_str(bool(t.v6[i]), int(t.dst_hi[i]), int(t.dst_lo[i]))


def unwrap32(v: np.ndarray) -> np.ndarray:
    """Unwrap values taken modulo 2^32 into int64, assuming steps smaller than 2^31."""
    v = np.asarray(v, dtype=np.int64)
    if len(v) == 0:
        return v
    out = np.empty_like(v)
    first = int(v[0])
    out[0] = first - _M32 if first >= _H32 else first  # just below the ISN: slightly negative
    if len(v) > 1:
        d = (np.diff(v) + _H32) % _M32 - _H32
        out[1:] = out[0] + np.cumsum(d)
    return out


def _rows(idx: np.ndarray) -> slice | np.ndarray:
    """A flow's rows (increasing table indexes) as a slice when they are consecutive, so that
    its columns are views of the table's rather than gathered copies."""
    if len(idx) and int(idx[-1]) - int(idx[0]) == len(idx) - 1:
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


def _edges(
    seg_end: np.ndarray,
    srv: np.ndarray,
    a_rel: np.ndarray,
    cli_ack: np.ndarray,
    floor: int,
    order: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The highest sequence the server has sent and the highest the client has acknowledged,
    running over the rows (in `order` if given), each built and accumulated in place."""
    mse = np.maximum(seg_end, 0)
    mse[~srv] = 0
    mack = np.maximum(a_rel, floor)
    mack[~cli_ack] = floor
    if order is not None:
        mse, mack = mse[order], mack[order]
    np.maximum.accumulate(mse, out=mse)
    np.maximum.accumulate(mack, out=mack)
    return mse, mack


def _before(op: np.ufunc, x: np.ndarray, running: np.ndarray, first: int) -> np.ndarray:
    """op(x[i], running[i - 1]) for every row, `first` standing in before the first row."""
    out = np.empty(len(x), dtype=bool)
    if len(x):
        out[0] = op(x[0], first)
        op(x[1:], running[:-1], out=out[1:])
    return out


def _flow_trace(
    t: SegmentTable,
    idx: np.ndarray,
    e_src: np.ndarray,
    *,
    align: str,
    require_handshake: bool,
) -> tuple[int, Trace] | str:
    """Build one flow's trace, or return the reason it is skipped.

    A flow whose rows are one run of the table (a capture of one download: the usual case)
    reads its columns as views, not copies, and the per-row arrays are built in place and
    dropped once used: a million-row flow costs a few of its columns, not dozens."""
    n = len(idx)
    rows = _rows(idx)
    flags = t.flags[rows]
    src = e_src[rows]
    seq = t.seq[rows]

    # --- who is the server, and where does its sequence space start ---
    synack = np.flatnonzero((flags & (TCP_SYN | TCP_ACK)) == (TCP_SYN | TCP_ACK))
    handshake = t.flags_known and len(synack) > 0
    inferred = False
    if handshake:
        p_sa = int(synack[0])
        server = int(src[p_sa])
    elif require_handshake and t.flags_known:
        return NO_HANDSHAKE
    else:
        server = _server_by_payload(t, idx, src)
        srv_rows = np.flatnonzero(src == server)
        if len(srv_rows) == 0:
            return "no packets from the server"
        p_sa = int(srv_rows[0])
        if not t.flags_known:
            inferred = _infer_synack(t, idx, src == server, p_sa)
        if require_handshake and not inferred:
            return NO_HANDSHAKE
    is_srv = src == server
    del src

    if t.flags_known:  # RST ends the flow; packets after it belong to nothing we measure
        rst = np.flatnonzero((flags[p_sa:] & TCP_RST) != 0)
        if len(rst):
            n = p_sa + int(rst[0]) + 1
            idx, flags, seq, is_srv = idx[:n], flags[:n], seq[:n], is_srv[:n]
            rows = _rows(idx)

    plen = t.payload_len[rows]
    if len(plen) and plen.min() < 0:
        plen = np.maximum(plen, 0)
    # ISN: the SYN-ACK's seq; without a handshake, one below the first server byte seen
    isn = int(seq[p_sa]) if (handshake or inferred) else (int(seq[p_sa]) - 1) % _M32
    srv = is_srv.copy()
    srv[:p_sa] = False
    if t.flags_known:
        syn_f = (flags & TCP_SYN) != 0
        fin_f = (flags & TCP_FIN) != 0
        cli_ack = ~is_srv & ((flags & TCP_ACK) != 0) & t.ack_present[rows]
    else:
        syn_f = np.zeros(n, dtype=bool)
        if inferred:
            syn_f[p_sa] = True
        fin_f = np.zeros(n, dtype=bool)
        # a client ack before the server has spoken is the SYN's meaningless ack field
        cli_ack = ~is_srv & t.ack_present[rows]
        cli_ack[: p_sa + 1] = False

    srv_pos = np.flatnonzero(srv)
    s_rel = np.zeros(n, dtype=np.int64)
    s_rel[srv_pos] = unwrap32((seq[srv_pos] - isn) % _M32)
    del seq
    ack_pos = np.flatnonzero(cli_ack)
    a_rel = np.zeros(n, dtype=np.int64)
    a_rel[ack_pos] = unwrap32((t.ack[rows][ack_pos] - isn) % _M32)

    data_pos = srv_pos[plen[srv_pos] > 0]
    # one past the last payload byte (1 = nothing sent: sequence space starts after the SYN)
    data_end = int((s_rel[data_pos] + plen[data_pos]).max()) if len(data_pos) else 1
    mss_seen = int(plen[data_pos].max()) if len(data_pos) else None
    del data_pos
    if not t.flags_known and len(ack_pos):
        _infer_fin(fin_f, srv_pos, s_rel, plen, data_end, int(a_rel[ack_pos].max()))
    del srv_pos

    seg_end = s_rel + plen
    seg_end += syn_f
    seg_end += fin_f
    del syn_f
    # without a handshake the SYN is implicitly acknowledged: start the ACK count after it
    floor = 0 if (handshake or inferred) else 1
    mse, mack = _edges(seg_end, srv, a_rel, cli_ack, floor)
    bif = mse - mack
    np.maximum(bif, 0, out=bif)
    sack_at_ack = _sack_scoreboard(t, idx, cli_ack, a_rel, mack, mse)
    sacked = None if sack_at_ack is None else np.minimum(_ffill_acks(sack_at_ack), bif)

    # --- events (each against the running edges of the rows before it) ---
    retx = srv & (plen > 0) & _before(np.less, s_rel, mse, 0)
    if t.window_known:
        win = t.window[rows]
        cli_pos = np.flatnonzero(~is_srv)
        same_win = np.zeros(n, dtype=bool)
        same_win[cli_pos[1:]] = win[cli_pos[1:]] == win[cli_pos[:-1]]
        del cli_pos
    else:
        same_win = np.ones(n, dtype=bool)
    control = (flags & (TCP_SYN | TCP_FIN | TCP_RST)) != 0 if t.flags_known else fin_f
    del fin_f
    # RFC 5681 duplicate ACK; "data outstanding" keeps idle keep-alive ACKs out
    dup = cli_ack & (plen == 0) & ~control & same_win & _before(np.equal, a_rel, mack, floor)
    outstanding = np.empty(n, dtype=bool)
    outstanding[:1] = floor < 0  # before any row: nothing sent, nothing acknowledged
    np.greater(mse[:-1], mack[:-1], out=outstanding[1:])
    dup &= outstanding
    del control, same_win, outstanding

    ts = t.ts_ns[rows]
    # --- RTTs ---
    internet_ns: int | None = None
    if handshake or inferred:
        early = ~is_srv[:p_sa]
        if t.flags_known:
            syn_rows = np.flatnonzero(early & ((flags[:p_sa] & (TCP_SYN | TCP_ACK)) == TCP_SYN))
        else:
            syn_rows = np.flatnonzero(early & (plen[:p_sa] == 0))
        if len(syn_rows):
            internet_ns = int(ts[p_sa] - ts[syn_rows[-1]])
    visible_ns = _min_visible_rtt(ts, srv, retx, s_rel, plen, seg_end, ack_pos, a_rel)
    # before the sender alignment reorders the packets: ack_pos indexes capture order
    delivery_bps = _delivery_rate_bps(ts, mack, ack_pos, base_hint_ns=(visible_ns or 0) + (internet_ns or 0))

    payload = max(0, data_end - 1)
    bytes_acked = max(0, min(int(mack[-1]), data_end) - 1)

    flow = FlowKey(
        server=_addr(t, int(idx[p_sa]), src=True),
        server_port=int(t.sport[idx[p_sa]]),
        client=_addr(t, int(idx[p_sa]), src=False),
        client_port=int(t.dport[idx[p_sa]]),
    )

    # --- alignment ---
    alignment = "capture"
    note = None
    if align == "sender":
        if internet_ns is None:
            note = "no SYN/SYN-ACK pair: internet RTT unknown, kept capture alignment"
        else:
            half = internet_ns // 2
            ts = np.where(is_srv, ts - half, ts + half)  # data left earlier, ACKs arrive later
            order = np.argsort(ts, kind="stable")
            ts = ts[order]
            del mse, mack, bif
            mse, mack = _edges(seg_end, srv, a_rel, cli_ack, floor, order)
            bif = mse - mack
            np.maximum(bif, 0, out=bif)
            retx, dup = retx[order], dup[order]
            if sack_at_ack is not None:
                sacked = np.minimum(_ffill_acks(sack_at_ack[order]), bif)
            alignment = "sender"
    del mse, mack, s_rel, a_rel, seg_end

    t0 = int(ts[0])
    t_rel = (ts - t0) / 1e9
    internet_ms = None if internet_ns is None else internet_ns / 1e6
    visible_ms = None if visible_ns is None else visible_ns / 1e6
    base_ms = internet_ms if visible_ms is None else visible_ms + (internet_ms or 0.0)
    extra: dict[str, Any] = {
        # the largest payload the server sent: the MSS in use (the classifier counts windows in
        # segments), and the bottleneck rate the ACKs show (its BDP, when no profile says)
        "mss": mss_seen,
        "delivery_rate_bps": delivery_bps,
        "packets": int(n),
        "payload_bytes": payload,
        "retransmits": int(np.count_nonzero(retx)),
        "dupacks": int(np.count_nonzero(dup)),
        "visible_rtt_ms": visible_ms,
        "handshake": bool(handshake or inferred),
        "sack": sacked is not None,
    }
    if note:
        extra["alignment_note"] = note
    if internet_ns is None and visible_ms is not None:
        extra["base_rtt_note"] = "internet RTT unknown: base RTT covers the visible path only"
    trace = Trace(
        flow=flow,
        t=t_rel,
        bif=bif,
        start_time=t0 / 1e9,
        base_rtt_ms=base_ms,
        internet_rtt_ms=internet_ms,
        bytes_acked=bytes_acked,
        alignment=alignment,
        columns={} if sacked is None else {"sacked": sacked},
        events={
            "retransmit": t_rel[retx].tolist(),
            "dupack": t_rel[dup].tolist(),
        },
        extra=extra,
    )
    return payload, trace


def _sack_scoreboard(
    t: SegmentTable,
    idx: np.ndarray,
    cli_ack: np.ndarray,
    a_rel: np.ndarray,
    mack: np.ndarray,
    mse: np.ndarray,
) -> np.ndarray | None:
    """Bytes the client holds above its cumulative ACK, as its SACK blocks report them, at every
    client ACK row (-1 at other rows); None when the flow carries no SACK block.

    A receiver holding out-of-order data puts SACK blocks in every ACK (RFC 2018), so an ACK
    without them empties the scoreboard; an ACK reports at most 3-4 blocks, so blocks persist
    from earlier ACKs until the cumulative ACK passes them (the sender's scoreboard does the
    same). Blocks at or below the cumulative ACK (D-SACK) and beyond what the server has sent
    (a hostile or broken receiver) are ignored or clipped: SACKed bytes never exceed BiF."""
    k = t.sack_n[idx]
    has = cli_ack & (k > 0)
    if not has.any():
        return None
    out = np.where(cli_ack, 0, -1).astype(np.int64)
    rows = np.flatnonzero(has)
    src = idx[rows]  # the table rows of the ACKs that carry blocks
    raw_ack = t.ack[src][:, None]
    base, cum, top = a_rel[rows, None], mack[rows, None], mse[rows, None]
    # blocks as offsets from the cumulative ACK (signed, modulo 2^32), clipped to what is still
    # outstanding; all in numpy, so the loop below only splices Python lists
    le = np.maximum(base + (t.sack_le[src] - raw_ack + _H32) % _M32 - _H32, cum)
    re = np.minimum(base + (t.sack_re[src] - raw_ack + _H32) % _M32 - _H32, top)
    used = np.arange(le.shape[1])[None, :] < k[rows][:, None]
    re = np.where(used, re, le)  # unused slots: empty blocks
    resets = np.cumsum(cli_ack & ~has)[rows].tolist()  # an ACK without blocks empties the board
    board = _Scoreboard()
    prev_reset = -1
    totals = []
    for rs, c, les, res in zip(resets, cum[:, 0].tolist(), le.tolist(), re.tolist(), strict=True):
        if rs != prev_reset:
            board, prev_reset = _Scoreboard(), rs
        for a, b in zip(les, res, strict=True):
            board.add(a, b)
        board.drop_below(c)
        totals.append(board.total)
    out[rows] = totals
    return out


class _Scoreboard:
    """Disjoint SACKed ranges [start, end) in order, with their total length kept up to date:
    a block mostly repeats or extends a range already held, so adding one is a binary search
    and a small splice, not a pass over the board."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.total = 0

    def add(self, le: int, re: int) -> None:
        if re <= le:
            return
        st, en = self.starts, self.ends
        i = bisect.bisect_left(en, le)  # first range ending at or after le: touches or follows
        j = bisect.bisect_right(st, re)  # ranges starting at or before re: touch or precede
        if i < len(st) and st[i] <= le and en[i] >= re:
            return  # already held
        if i < j:
            le, re = min(le, st[i]), max(re, en[j - 1])
            self.total -= sum(en[i:j]) - sum(st[i:j])
        st[i:j], en[i:j] = [le], [re]
        self.total += re - le

    def drop_below(self, cum: int) -> None:
        """The cumulative ACK has reached `cum`: what lies below it is no longer SACKed."""
        st, en = self.starts, self.ends
        k = bisect.bisect_right(en, cum)
        if k:
            self.total -= sum(en[:k]) - sum(st[:k])
            del st[:k], en[:k]
        if st and st[0] < cum:
            self.total -= cum - st[0]
            st[0] = cum


def _ffill_acks(v: np.ndarray) -> np.ndarray:
    """Each row takes the value of the latest ACK row at or before it (-1 marks non-ACK rows;
    rows before the first ACK get 0)."""
    pos = np.where(v >= 0, np.arange(len(v)), -1)
    last = np.maximum.accumulate(pos)
    return np.where(last >= 0, v[np.maximum(last, 0)], 0)


def _server_by_payload(t: SegmentTable, idx: np.ndarray, src: np.ndarray) -> int:
    """Without a usable SYN-ACK: the side that sent more payload; ties go to a well-known port."""
    plen = np.maximum(t.payload_len[idx], 0)
    a = int(src[0])
    on_a = src == a
    pa, pb = int(plen[on_a].sum()), int(plen[~on_a].sum())
    b_rows = np.flatnonzero(~on_a)
    b = int(src[b_rows[0]]) if len(b_rows) else a
    if pa != pb:
        return a if pa > pb else b
    port_a = int(t.sport[idx[0]])
    port_b = int(t.dport[idx[0]])
    if port_b in WELL_KNOWN_SERVER_PORTS and port_a not in WELL_KNOWN_SERVER_PORTS:
        return b
    if port_a in WELL_KNOWN_SERVER_PORTS:
        return a
    return a if port_a < port_b else b


def _infer_synack(t: SegmentTable, idx: np.ndarray, is_srv: np.ndarray, p: int) -> bool:
    """Without flags: the server's first packet (at `p`) is its SYN-ACK if it is empty and the
    client's next ACK acknowledges exactly one sequence number past it."""
    if t.payload_len[idx[p]] != 0:
        return False
    later = np.flatnonzero(~is_srv[p + 1 :] & t.ack_present[idx[p + 1 :]])
    if len(later):
        q = p + 1 + int(later[0])
        return int(t.ack[idx[q]]) == (int(t.seq[idx[p]]) + 1) % _M32
    return False


def _infer_fin(
    fin_f: np.ndarray,
    srv_pos: np.ndarray,
    s_rel: np.ndarray,
    plen: np.ndarray,
    data_end: int,
    final_ack: int,
) -> None:
    """Without flags: if the client acknowledged one past the server's last byte, the server
    sent a FIN there. Mark it on the empty packets at that point, else on the last data ones."""
    if final_ack != data_end + 1:
        return
    ends = s_rel[srv_pos] + plen[srv_pos]
    at_end = srv_pos[ends == data_end]
    empty = at_end[plen[at_end] == 0]
    fin_f[empty if len(empty) else at_end] = True


MAX_RATE_WINDOWS = 100_000


def _delivery_rate_bps(
    ts: np.ndarray, mack: np.ndarray, ack_pos: np.ndarray, *, base_hint_ns: int | None
) -> float | None:
    """The rate at which the client's cumulative ACK advanced while the download kept the
    bottleneck busy, in payload bits per second: the 90th percentile over windows of
    max(1 s, 4 RTT). A saturating sender is ACK-clocked at the bottleneck rate; the percentile
    leaves out slow start, loss recoveries and BBR's ProbeRTT. None with under 3 windows."""
    if len(ack_pos) < 8:
        return None
    ta = ts[ack_pos].astype(np.float64) / 1e9
    acked = mack[ack_pos].astype(np.float64)
    win = max(1.0, 4.0 * (base_hint_ns or 0) / 1e9)
    if (ta[-1] - ta[0]) / win > MAX_RATE_WINDOWS:
        return None  # a capture spanning weeks (or a damaged timestamp) is no download's
    edges = np.arange(ta[0], ta[-1], win)
    if len(edges) < 4:
        return None
    at = acked[np.clip(np.searchsorted(ta, edges, side="right") - 1, 0, len(acked) - 1)]
    rates = np.diff(at) * 8.0 / win
    return float(np.percentile(rates, 90)) if len(rates) >= 3 else None


def _min_visible_rtt(
    ts: np.ndarray,
    srv: np.ndarray,
    retx: np.ndarray,
    s_rel: np.ndarray,
    plen: np.ndarray,
    seg_end: np.ndarray,
    ack_pos: np.ndarray,
    a_rel: np.ndarray,
) -> int | None:
    """Smallest time from a server data packet to the client ACK that first covers it.

    Karn's rule: segments whose bytes were ever retransmitted are ambiguous and skipped.
    """
    data = np.flatnonzero(srv & (plen > 0) & ~retx)
    if len(data) == 0 or len(ack_pos) == 0:
        return None
    starts, ends = s_rel[data], seg_end[data]
    rpos = np.flatnonzero(retx)
    if len(rpos):
        r_start = s_rel[rpos]
        r_end = s_rel[rpos] + plen[rpos]
        o = np.argsort(r_start, kind="stable")
        r_start, r_end = r_start[o], np.maximum.accumulate(r_end[o])
        # overlap exists if some retransmission starting before our end ends after our start
        k = np.searchsorted(r_start, ends, side="left")
        overlapped = (k > 0) & (r_end[np.maximum(k - 1, 0)] > starts)
        data, ends = data[~overlapped], ends[~overlapped]
        if len(data) == 0:
            return None
    cum = np.maximum.accumulate(a_rel[ack_pos])
    k = np.searchsorted(cum, ends, side="left")
    ok = k < len(ack_pos)
    data, k = data[ok], k[ok]
    ack_at = ack_pos[k]
    later = ack_at > data  # an ACK captured before the data it covers is a capture artefact
    if not later.any():
        return None
    return int((ts[ack_at[later]] - ts[data[later]]).min())
