"""Import Nebby-style tshark CSV traces (`tshark -T fields -E header=y ...`).

Columns are found by header name, in any order; extra columns are ignored:

    required  frame.time_relative (or frame.time_epoch), tcp.srcport, tcp.dstport,
              tcp.seq (or tcp.seq_raw), tcp.ack (or tcp.ack_raw), tcp.len
    optional  ip.src/ip.dst and/or ipv6.src/ipv6.dst, tcp.flags, tcp.window_size_value
              (or tcp.window_size), frame.len, frame.time_epoch

Comma or tab separated (sniffed from the header), quoted or not. Sequence numbers may be
tshark's relative ones (the default) or raw: the state machine works modulo 2^32 from the ISN
either way. Rows are handed to the same per-flow state machine as the pcap path; without a
tcp.flags column the SYN-ACK and FIN are inferred from the sequence/ack arithmetic and the
server is the side that sent more payload.
"""

from __future__ import annotations

import csv
import io
import ipaddress
import math
import os
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ccscope.capture.packets import MAX_SACK_BLOCKS, SegmentTable
from ccscope.capture.tcp_bif import CaptureResult, traces_from_table
from ccscope.errors import CaptureError, TraceFormatError
from ccscope.profile import Profile

MAX_CSV_BYTES = 1024**3

_TIME = ("frame.time_relative", "frame.time_epoch")
_SEQ = ("tcp.seq", "tcp.seq_raw")
_ACK = ("tcp.ack", "tcp.ack_raw")
_WINDOW = ("tcp.window_size_value", "tcp.window_size")
_REQUIRED = ("tcp.srcport", "tcp.dstport", "tcp.len")
_M32 = 1 << 32


def traces_from_csv(
    path: str | os.PathLike[str] | bytes,
    *,
    align: str = "capture",
    min_payload_bytes: int = 1,
    object_url: str | None = None,
    profile: Profile | dict[str, Any] | None = None,
) -> CaptureResult:
    """Read a tshark CSV (path or raw bytes) into one BiF trace per TCP flow."""
    text, name = _load(path)
    try:
        table, stats = parse_csv(text, name)
    finally:
        if not isinstance(text, str):
            text.close()
    try:
        return traces_from_table(
            table,
            stats=stats,
            align=align,
            min_payload_bytes=min_payload_bytes,
            object_url=object_url,
            profile=profile,
            source="nebby-csv",
            require_handshake=False,
        )
    except CaptureError as e:
        raise TraceFormatError(f"{name}: {e}") from e


def _load(path: str | os.PathLike[str] | bytes) -> tuple[str | io.TextIOBase, str]:
    """The CSV as text (bytes given) or as an open text stream (a file: read line by line, so
    the file's size is never held twice); binary data is refused from its first 4 KiB."""
    if isinstance(path, bytes | bytearray):
        raw, name = bytes(path), "<memory>"
        if len(raw) > MAX_CSV_BYTES:
            raise TraceFormatError(f"{name}: CSV larger than {MAX_CSV_BYTES} bytes")
        if b"\x00" in raw[:4096]:
            raise TraceFormatError(f"{name}: binary data, not a CSV (is this a pcap?)")
        return raw.decode("utf-8-sig", errors="replace"), name
    p = Path(path)
    name = str(p)
    try:
        f = p.open("rb")
    except OSError as e:
        raise TraceFormatError(f"{name}: cannot read CSV: {e.strerror or e}") from e
    try:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_CSV_BYTES:
            raise TraceFormatError(f"{name}: CSV larger than {MAX_CSV_BYTES} bytes")
        if b"\x00" in f.read(4096):
            raise TraceFormatError(f"{name}: binary data, not a CSV (is this a pcap?)")
        f.seek(0)
    except BaseException:
        f.close()
        raise
    return io.TextIOWrapper(f, encoding="utf-8-sig", errors="replace", newline=""), name


MAX_LINE_CHARS = 64 * 1024  # a tshark row is ~100 characters; a longer line is not a row


def _capped_lines(f: io.TextIOBase) -> Iterator[str]:
    """The stream's lines, none longer than MAX_LINE_CHARS: an overlong one (a file of zeros
    without a newline, say) is skipped in chunks and stands as one NUL line, which the CSV
    reader rejects as malformed, instead of being built in memory whole."""
    while True:
        line = f.readline(MAX_LINE_CHARS)
        if not line:
            return
        if len(line) >= MAX_LINE_CHARS and not line.endswith("\n"):
            while True:
                more = f.readline(MAX_LINE_CHARS)
                if not more or more.endswith("\n"):
                    break
            yield "\x00\n"
            continue
        yield line


def _pick(cols: dict[str, int], names: tuple[str, ...]) -> int | None:
    for n in names:
        if n in cols:
            return cols[n]
    return None


def parse_csv(text: str | io.TextIOBase, name: str = "<memory>") -> tuple[SegmentTable, dict[str, int]]:
    """Rows of a tshark CSV (text, or a text stream read line by line) as a SegmentTable plus
    counts (packets, malformed, non_tcp). Columns collect in typed arrays (8 bytes a value, not
    a Python int each) and the addresses as indexes into the few distinct address pairs."""
    lines = _capped_lines(io.StringIO(text, newline="") if isinstance(text, str) else text)
    header_line = ""
    while True:
        header_line = next(lines, "")
        if not header_line or header_line.strip():
            break
    if not header_line.strip():
        raise TraceFormatError(f"{name}: empty CSV (no header line)")
    # tshark writes either separator; a header has no quoted commas/tabs in practice
    delim = "\t" if header_line.count("\t") > header_line.count(",") else ","
    header = next(csv.reader([header_line], delimiter=delim))
    cols: dict[str, int] = {}
    for i, h in enumerate(header):
        key = h.strip().strip('"').strip().lower()
        cols.setdefault(key, i)

    i_time = _pick(cols, _TIME)
    i_seq = _pick(cols, _SEQ)
    i_ack = _pick(cols, _ACK)
    missing = [n for n in _REQUIRED if n not in cols]
    if i_time is None:
        missing.insert(0, _TIME[0])
    if i_seq is None:
        missing.append(_SEQ[0])
    if i_ack is None:
        missing.append(_ACK[0])
    if missing:
        found = ", ".join(h.strip() for h in header[:12]) or "nothing"
        raise TraceFormatError(
            f"{name}: not a tshark/Nebby CSV: missing column(s) {', '.join(missing)} (header has: {found})"
        )
    assert i_time is not None and i_seq is not None and i_ack is not None
    epoch = i_time == cols.get("frame.time_epoch")
    if "frame.time_epoch" in cols:  # absolute times give the trace a real start_time
        i_time, epoch = cols["frame.time_epoch"], True
    i_sp, i_dp, i_len = cols["tcp.srcport"], cols["tcp.dstport"], cols["tcp.len"]
    i_flags = cols.get("tcp.flags")
    i_win = _pick(cols, _WINDOW)
    addr_pairs = [
        (cols[a], cols[b]) for a, b in (("ip.src", "ip.dst"), ("ipv6.src", "ipv6.dst"))
        if a in cols and b in cols
    ]  # fmt: skip
    ncols = len(header)
    need = max([i_time, i_seq, i_ack, i_sp, i_dp, i_len, i_flags or 0, i_win or 0]
               + [max(p) for p in addr_pairs]) + 1  # fmt: skip

    ts, sp, dp, sq, ak, ln, fl, wn = (array("q") for _ in range(8))
    akp = array("b")
    addrs = array("q")  # index into pairs, -1: no address on that row
    pairs: dict[tuple[bool, int, int, bool, int, int], int] = {}
    cache: dict[str, tuple[bool, int, int] | None] = {}
    rows = malformed = non_tcp = 0
    reader = csv.reader(lines, delimiter=delim)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error:  # NUL bytes, oversized fields: skip the line, keep going
            rows += 1
            malformed += 1
            continue
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        rows += 1
        if len(row) < need or len(row) > ncols:
            malformed += 1  # e.g. an unquoted multi-value field shifted the columns
            continue
        if not row[i_sp].strip():
            non_tcp += 1
            continue
        try:
            t = _ns(row[i_time])
            s_port, d_port = int(row[i_sp]), int(row[i_dp])
            seq = int(row[i_seq])
            a_txt = row[i_ack].strip()
            ack = int(a_txt) if a_txt else 0
            plen = int(row[i_len])
            flags = _flags(row[i_flags]) if i_flags is not None else 0
            win = int(row[i_win]) if i_win is not None and row[i_win].strip() else 0
        except ValueError:
            malformed += 1
            continue
        if (
            not (0 <= s_port < 65536 and 0 <= d_port < 65536)
            or seq < 0 or ack < 0 or plen < 0 or plen > 1 << 20 or not 0 <= win < 1 << 32
        ):  # fmt: skip
            malformed += 1
            continue
        a = None
        bad_addr = False
        for i_s, i_d in addr_pairs:
            s_txt, d_txt = row[i_s].strip(), row[i_d].strip()
            if s_txt and d_txt:
                sa, da = _addr(cache, s_txt), _addr(cache, d_txt)
                bad_addr = sa is None or da is None or sa[0] != da[0]
                if sa is not None and da is not None and not bad_addr:
                    a = (*sa, *da)
                break
        if bad_addr:
            malformed += 1
            continue
        ts.append(t)
        sp.append(s_port)
        dp.append(d_port)
        sq.append(seq % _M32)
        ak.append(ack % _M32)
        akp.append(1 if a_txt else 0)
        ln.append(plen)
        fl.append(flags)
        wn.append(win)
        addrs.append(-1 if a is None else pairs.setdefault(a, len(pairs)))

    n = len(ts)
    # The arrays become the table's columns without a copy; columns the CSV lacks are
    # np.zeros, whose pages the kernel maps only when written (they cost no memory here).
    idx = np.frombuffer(addrs, dtype=np.int64) if n else np.zeros(0, dtype=np.int64)
    has_addresses = n > 0 and bool((idx >= 0).all())  # mixing would split one flow in two
    uniq = list(pairs)  # insertion order = index order

    def col(a: array[int]) -> np.ndarray:
        return np.frombuffer(a, dtype=np.int64) if n else np.zeros(0, dtype=np.int64)

    def addr_col(j: int) -> np.ndarray:
        words = np.array([u[j] for u in uniq], dtype=np.uint64)
        return words[idx] if has_addresses and words.any() else np.zeros(n, dtype=np.uint64)

    table = SegmentTable(
        ts_ns=col(ts),
        v6=np.array([u[0] for u in uniq], dtype=bool)[idx] if has_addresses else np.zeros(n, dtype=bool),
        src_hi=addr_col(1),
        src_lo=addr_col(2),
        dst_hi=addr_col(4),
        dst_lo=addr_col(5),
        sport=col(sp),
        dport=col(dp),
        seq=col(sq),
        ack=col(ak),
        flags=col(fl),
        window=col(wn),
        payload_len=col(ln),
        ack_present=(np.frombuffer(akp, dtype=np.int8) if n else np.zeros(0, dtype=np.int8)).astype(bool),
        sack_n=np.zeros(n, dtype=np.int8),
        sack_le=np.zeros((n, MAX_SACK_BLOCKS), dtype=np.int64),
        sack_re=np.zeros((n, MAX_SACK_BLOCKS), dtype=np.int64),
        flags_known=i_flags is not None,
        window_known=i_win is not None,
        has_addresses=has_addresses,
    )
    stats = {
        "packets": rows,
        "non_ip": 0,
        "non_tcp": non_tcp,
        "fragments": 0,
        "malformed": malformed,
        "truncated": 0,
        "epoch_times": int(epoch),
    }
    if n == 0:
        raise TraceFormatError(
            f"{name}: no usable TCP rows ({rows} rows, {malformed} malformed, {non_tcp} non-TCP)"
        )
    return table, stats


def _ns(s: str) -> int:
    """Seconds text -> integer nanoseconds, exactly for plain decimals."""
    s = s.strip().strip('"')
    if "e" in s or "E" in s or not s:
        x = float(s)
        if not math.isfinite(x) or abs(x) > 4e9:
            raise ValueError("time out of range")
        return round(x * 1e9)
    whole, _, frac = s.partition(".")
    if len(whole) > 11 or not (whole.lstrip("-").isdigit() or whole in ("", "-")):
        raise ValueError("bad time")
    if frac and not frac.isdigit():
        raise ValueError("bad time")
    neg = whole.startswith("-")
    w = int(whole.lstrip("-") or "0")
    f = int((frac[:9]).ljust(9, "0")) if frac else 0
    v = w * 1_000_000_000 + f
    if v > 1 << 62:  # far beyond any capture; keeps int64 arithmetic safe
        raise ValueError("time out of range")
    return -v if neg else v


def _flags(s: str) -> int:
    s = s.strip().strip('"').lower()
    v = int(s, 16) if s.startswith("0x") else int(s)
    if not 0 <= v < 1 << 12:
        raise ValueError("bad flags")
    return v


def _addr(cache: dict[str, tuple[bool, int, int] | None], s: str) -> tuple[bool, int, int] | None:
    if s in cache:
        return cache[s]
    try:
        a = ipaddress.ip_address(s)
    except ValueError:
        r = None
    else:
        v = int(a)
        r = (True, v >> 64, v & 0xFFFFFFFFFFFFFFFF) if a.version == 6 else (False, 0, v)
    if len(cache) < 100_000:  # bound memory on hostile input
        cache[s] = r
    return r
