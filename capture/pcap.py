"""Defensive reader for classic pcap and pcapng captures, plus a tiny classic-pcap writer.

The reader never trusts a length field: every record is bounds-checked against the file image,
absurd lengths raise `CaptureError` naming the file and offset, and a record cut short at the end
of the file stops the walk with `truncated=True` (a capture killed mid-write is still useful).

Only the record walk is a Python loop (it is inherently sequential: each length says where the
next record starts). Timestamps and link-layer headers are then decoded for all records at once
with numpy, which keeps a 10k-packet capture well under a few milliseconds.
"""

from __future__ import annotations

import gzip
import io
import mmap
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import numpy as np

from ccscope.errors import CaptureError

LINKTYPE_NULL = 0
LINKTYPE_EN10MB = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
SUPPORTED_LINKTYPES = frozenset(
    {
        LINKTYPE_NULL,
        LINKTYPE_EN10MB,
        LINKTYPE_RAW,
        LINKTYPE_LOOP,
        LINKTYPE_LINUX_SLL,
        LINKTYPE_IPV4,
        LINKTYPE_IPV6,
        LINKTYPE_LINUX_SLL2,
    }
)

_ZERO_RECORD = bytes(16)
MAX_FILE_BYTES = 2 * 1024**3  # mapped, not read: only the pages the walk touches are resident
MAX_CAPLEN = 256 * 1024  # larger than any real snaplen; beyond this a length field is garbage
SNAPLEN_SLACK = 256  # some writers put caplen slightly above their declared snaplen
MAX_BLOCK_BYTES = 16 * 1024 * 1024  # pcapng non-packet blocks (name resolution, comments...)
MAX_TS_NS = 1 << 62  # ~146 years from the epoch: anything beyond is a corrupt timestamp

_CLASSIC_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", False),
    b"\xa1\xb2\xc3\xd4": (">", False),
    b"\x4d\x3c\xb2\xa1": ("<", True),
    b"\xa1\xb2\x3c\x4d": (">", True),
}
_PCAPNG_SHB = 0x0A0D0D0A
_PCAPNG_BOM = 0x1A2B3C4D

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
_ETHERTYPE_VLAN = (0x8100, 0x88A8, 0x9100)
# Address-family values in DLT_NULL/LOOP headers: AF_INET is 2 everywhere; AF_INET6 differs by OS.
_AF_INET = (2,)
_AF_INET6 = (10, 24, 28, 30)


@dataclass
class Records:
    """Where each captured frame lies in the file image (one row per packet record)."""

    data: bytes
    ts_ns: np.ndarray  # int64, absolute capture time in ns
    off: np.ndarray  # int64, offset of the link-layer frame in `data`
    caplen: np.ndarray  # int64
    orig_len: np.ndarray  # int64, length on the wire
    linktype: np.ndarray  # int64 per record (pcapng interfaces may differ)
    truncated: bool
    fmt: str  # "pcap" or "pcapng"
    name: str


@dataclass
class IPFrames:
    """The IP packet inside each record whose link layer carried IPv4 or IPv6."""

    data: bytes
    ts_ns: np.ndarray
    ip_off: np.ndarray
    ip_caplen: np.ndarray
    ip_orig_len: np.ndarray  # wire length minus the link header
    non_ip: int  # records whose link layer carried something else (ARP, LLDP...)
    malformed: int  # records too short for their own link header
    truncated: bool
    records: int


GZIP_MAGIC = b"\x1f\x8b"


def _check_magic(head: bytes, name: str) -> None:
    """Refuse what is not a pcap or pcapng file from its first bytes, before reading the rest."""
    if len(head) == 0:
        raise CaptureError(f"{name}: capture file is empty")
    if len(head) < 4:
        raise CaptureError(f"{name}: too short to be a capture ({len(head)} bytes)")
    if head[:4] not in _CLASSIC_MAGICS and struct.unpack_from("<I", head, 0)[0] != _PCAPNG_SHB:
        raise CaptureError(f"{name}: not a pcap or pcapng file (magic {head[:4].hex()} at offset 0)")


def load_image(source: str | os.PathLike[str] | bytes) -> tuple[bytes, str]:
    """The capture as one buffer (a read-only map of a file: pages are read as the walk
    touches them, so a big or sparse file costs what is parsed, not its size), plus a name for
    error messages. The magic number is checked before anything else is read."""
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        name = "<memory>"
    else:
        path = Path(source)
        name = str(path)
        try:
            with path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > MAX_FILE_BYTES:
                    raise CaptureError(
                        f"{name}: capture is {size} bytes, above the {MAX_FILE_BYTES}-byte limit; "
                        "split it (editcap -c) first"
                    )
                head = f.read(4)
                if head[:2] != GZIP_MAGIC:  # a gzip'd capture's magic is checked once inflated
                    _check_magic(head, name)
                if size < 1 << 20:
                    f.seek(0)
                    data = f.read()
                else:
                    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # type: ignore[assignment]
        except OSError as e:
            raise CaptureError(f"{name}: cannot read capture: {e.strerror or e}") from e
    if data[:2] == GZIP_MAGIC:  # .pcap.gz / .pcapng.gz: inflate, bounded like a plain file
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
                head = gz.read(4)
                _check_magic(head, name)  # refuse a gzip'd non-capture before inflating the rest
                data = head + gz.read(MAX_FILE_BYTES + 1 - len(head))
        except (OSError, EOFError, zlib.error) as e:
            raise CaptureError(f"{name}: cannot decompress capture: {e}") from e
    if len(data) > MAX_FILE_BYTES:
        raise CaptureError(f"{name}: capture exceeds {MAX_FILE_BYTES} bytes")
    return data, name


def read_records(source: str | os.PathLike[str] | bytes) -> Records:
    """Walk a classic pcap or pcapng image and locate every packet record."""
    data, name = load_image(source)
    if len(data) == 0:
        raise CaptureError(f"{name}: capture file is empty")
    if len(data) < 4:
        raise CaptureError(f"{name}: too short to be a capture ({len(data)} bytes)")
    magic = data[:4]
    if magic in _CLASSIC_MAGICS:
        endian, ns = _CLASSIC_MAGICS[magic]
        return _read_classic(data, name, endian, ns)
    if struct.unpack_from("<I", data, 0)[0] == _PCAPNG_SHB:
        return _read_pcapng(data, name)
    raise CaptureError(f"{name}: not a pcap or pcapng file (magic {magic.hex()} at offset 0)")


def _read_classic(data: bytes, name: str, endian: str, ns: bool) -> Records:
    if len(data) < 24:
        raise CaptureError(f"{name}: pcap global header truncated ({len(data)} of 24 bytes)")
    major, _minor, _zone, _sigfigs, snaplen, network = struct.unpack_from(endian + "HHiIII", data, 4)
    if major != 2:
        raise CaptureError(f"{name}: unsupported pcap version {major} at offset 4")
    linktype = network & 0x03FFFFFF  # upper bits carry FCS metadata (pcap spec, LinkType field)
    if linktype not in SUPPORTED_LINKTYPES:
        raise CaptureError(f"{name}: unsupported link type {linktype} at offset 20")
    limit = MAX_CAPLEN if snaplen == 0 else min(MAX_CAPLEN, snaplen + SNAPLEN_SLACK)
    offa, truncated = _walk_classic(data, name, endian, 24, limit, snaplen)
    if len(offa):
        u8 = np.frombuffer(data, dtype=np.uint8)
        hdr = u8[offa[:, None] + np.arange(16, dtype=np.int64)]
        fields = hdr.view(np.dtype(endian + "u4")).astype(np.int64)
        frac_scale = 1 if ns else 1000
        ts_ns = fields[:, 0] * 1_000_000_000 + fields[:, 1] * frac_scale
        caplen = fields[:, 2]
        orig = np.maximum(fields[:, 3], caplen)  # orig_len < caplen is a writer bug; trust caplen
    else:
        ts_ns = caplen = orig = np.zeros(0, dtype=np.int64)
    return Records(
        data=data,
        ts_ns=ts_ns,
        off=offa + 16,
        caplen=caplen,
        orig_len=orig,
        linktype=np.full(len(offa), linktype, dtype=np.int64),
        truncated=truncated,
        fmt="pcap",
        name=name,
    )


def _walk_classic(
    data: bytes, name: str, endian: str, start: int, limit: int, snaplen: int
) -> tuple[np.ndarray, bool]:
    """Offsets of complete records, and whether the file ends inside a record.

    Header-only captures are long runs of records of identical length (IP+TCP headers), so
    after two equal lengths in a row we speculate a run and verify all its length fields at
    once through a strided numpy view; the Python loop only handles the changes.
    """
    n = len(data)
    get_len = struct.Struct(endian + "I").unpack_from
    u32 = np.dtype(endian + "u4")
    parts: list[np.ndarray] = []
    offs: list[int] = []
    off = start
    prev = -1
    run_k = 16
    streak = 0
    need = 2  # equal lengths in a row before speculating
    truncated = False
    while True:
        if off + 16 > n:
            truncated = off != n
            break
        incl = get_len(data, off + 8)[0]
        if incl == 0 and data[off : off + 16] == _ZERO_RECORD:
            # An all-zero record header (no time, no length): zeros where records should be, a
            # sparse or zero-filled file. Walking on would index every 16 bytes of it.
            raise CaptureError(
                f"{name}: record at offset {off} is empty (zero lengths); the capture is corrupt"
            )
        if incl > limit:
            raise CaptureError(
                f"{name}: record at offset {off} claims {incl} captured bytes "
                f"(snaplen {snaplen}, limit {limit}); the capture is corrupt"
            )
        end = off + 16 + incl
        if end > n:
            truncated = True
            break
        offs.append(off)
        off = end
        if incl != prev:
            prev = incl
            streak = 1
            continue
        streak += 1
        if streak < need:
            continue
        step = 16 + incl
        k = min(run_k, (n - off) // step)  # only records that lie wholly inside the file
        if k < 4:
            continue
        lens = np.ndarray((k,), dtype=u32, buffer=data, offset=off + 8, strides=(step,))
        same = lens == incl
        m = k if bool(same.all()) else int(np.argmin(same))
        if m:
            parts.append(np.asarray(offs, dtype=np.int64))
            offs = []
            parts.append(off + step * np.arange(m, dtype=np.int64))
            off += m * step
        run_k = min(run_k * 4, 1 << 20) if m == k else 16
        # short runs: back off so varied-length captures do not pay for failed guesses
        need = 2 if m >= 8 else min(need * 2, 256)
        streak = 0
    parts.append(np.asarray(offs, dtype=np.int64))
    return np.concatenate(parts), truncated


@dataclass
class _Iface:
    linktype: int
    snaplen: int
    # timestamp units: value * num // den nanoseconds (exact integer arithmetic)
    num: int = 1000
    den: int = 1
    offset_ns: int = 0


def _read_pcapng(data: bytes, name: str) -> Records:
    n = len(data)
    off = 0
    endian = "<"
    ifaces: list[_Iface] = []
    ts_l: list[int] = []
    off_l: list[int] = []
    cap_l: list[int] = []
    orig_l: list[int] = []
    lt_l: list[int] = []
    last_ts = 0
    truncated = False
    seen_shb = False
    while off < n:
        if off + 12 > n:
            truncated = True
            break
        btype_le = struct.unpack_from("<I", data, off)[0]
        if btype_le == _PCAPNG_SHB:
            # The SHB fixes the byte order of everything up to the next SHB.
            if off + 12 > n:
                truncated = True
                break
            bom = data[off + 8 : off + 12]
            if bom == b"\x4d\x3c\x2b\x1a":
                endian = "<"
            elif bom == b"\x1a\x2b\x3c\x4d":
                endian = ">"
            else:
                raise CaptureError(
                    f"{name}: pcapng section header at offset {off} has bad byte-order magic {bom.hex()}"
                )
            ifaces = []  # interface ids are per section
            seen_shb = True
        elif not seen_shb:
            raise CaptureError(f"{name}: pcapng file does not start with a section header")
        btype, blen = struct.unpack_from(endian + "II", data, off)
        if blen < 12 or blen % 4:
            raise CaptureError(f"{name}: pcapng block at offset {off} has invalid length {blen}")
        if blen > MAX_BLOCK_BYTES:
            raise CaptureError(
                f"{name}: pcapng block at offset {off} claims {blen} bytes; the capture is corrupt"
            )
        if off + blen > n:
            truncated = True
            break
        trailer = struct.unpack_from(endian + "I", data, off + blen - 4)[0]
        if trailer != blen:
            raise CaptureError(f"{name}: pcapng block at offset {off}: trailing length {trailer} != {blen}")
        body = off + 8
        body_end = off + blen - 4
        if btype == _PCAPNG_SHB:
            pass
        elif btype == 1:  # Interface Description Block
            if body + 8 > body_end:
                raise CaptureError(f"{name}: interface block at offset {off} too short")
            lt, _res, snap = struct.unpack_from(endian + "HHI", data, body)
            iface = _Iface(linktype=lt, snaplen=snap)
            _idb_options(data, body + 8, body_end, endian, iface)
            ifaces.append(iface)
        elif btype in (6, 2):  # Enhanced Packet Block / obsolete Packet Block
            if body + 20 > body_end:
                raise CaptureError(f"{name}: packet block at offset {off} too short")
            if btype == 6:
                if_id, ts_hi, ts_lo, cap, orig = struct.unpack_from(endian + "IIIII", data, body)
            else:
                if_id, _drops, ts_hi, ts_lo, cap, orig = struct.unpack_from(endian + "HHIIII", data, body)
            if if_id >= len(ifaces):
                raise CaptureError(f"{name}: packet block at offset {off} names undefined interface {if_id}")
            iface = ifaces[if_id]
            _check_caplen(name, off, cap, iface.snaplen)
            if body + 20 + cap > body_end:
                raise CaptureError(
                    f"{name}: packet block at offset {off}: captured length {cap} overruns the block"
                )
            last_ts = ((ts_hi << 32) | ts_lo) * iface.num // iface.den + iface.offset_ns
            if not -MAX_TS_NS <= last_ts <= MAX_TS_NS:
                raise CaptureError(f"{name}: packet block at offset {off} has an impossible timestamp")
            ts_l.append(last_ts)
            off_l.append(body + 20)
            cap_l.append(cap)
            orig_l.append(max(orig, cap))
            lt_l.append(iface.linktype)
        elif btype == 3:  # Simple Packet Block: interface 0, no timestamp
            if not ifaces:
                raise CaptureError(f"{name}: simple packet block at offset {off} before any interface")
            if body + 4 > body_end:
                raise CaptureError(f"{name}: simple packet block at offset {off} too short")
            orig = struct.unpack_from(endian + "I", data, body)[0]
            cap = min(orig, body_end - body - 4)
            if ifaces[0].snaplen:
                cap = min(cap, ifaces[0].snaplen)
            _check_caplen(name, off, cap, ifaces[0].snaplen)
            ts_l.append(last_ts)  # no timestamp of its own: reuse the previous one
            off_l.append(body + 4)
            cap_l.append(cap)
            orig_l.append(max(orig, cap))
            lt_l.append(ifaces[0].linktype)
        # any other block type (name resolution, statistics, custom, DSB...) is skipped
        off += blen

    return Records(
        data=data,
        ts_ns=np.asarray(ts_l, dtype=np.int64) if ts_l else np.zeros(0, dtype=np.int64),
        off=np.asarray(off_l, dtype=np.int64),
        caplen=np.asarray(cap_l, dtype=np.int64),
        orig_len=np.asarray(orig_l, dtype=np.int64),
        linktype=np.asarray(lt_l, dtype=np.int64),
        truncated=truncated,
        fmt="pcapng",
        name=name,
    )


def _check_caplen(name: str, off: int, cap: int, snaplen: int) -> None:
    limit = MAX_CAPLEN if snaplen == 0 else min(MAX_CAPLEN, snaplen + SNAPLEN_SLACK)
    if cap > limit:
        raise CaptureError(
            f"{name}: packet block at offset {off} claims {cap} captured bytes "
            f"(snaplen {snaplen}, limit {limit}); the capture is corrupt"
        )


def _idb_options(data: bytes, p: int, end: int, endian: str, iface: _Iface) -> None:
    """Read if_tsresol (9) and if_tsoffset (14); malformed options are ignored, not fatal."""
    while p + 4 <= end:
        code, olen = struct.unpack_from(endian + "HH", data, p)
        p += 4
        if code == 0 or p + olen > end:
            return
        if code == 9 and olen >= 1:
            r = data[p]
            if r & 0x80:
                e = r & 0x7F
                if e > 64:
                    e = 64  # beyond any real clock; keep arithmetic bounded
                iface.num, iface.den = 1_000_000_000, 1 << e
            else:
                e = min(r, 30)
                if e <= 9:
                    iface.num, iface.den = 10 ** (9 - e), 1
                else:
                    iface.num, iface.den = 1, 10 ** (e - 9)
        elif code == 14 and olen >= 8:
            secs = struct.unpack_from(endian + "q", data, p)[0]
            iface.offset_ns = secs * 1_000_000_000
        p += (olen + 3) & ~3


def _be16(u8: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return (u8[idx].astype(np.int64) << 8) | u8[idx + 1]


def ip_frames(rec: Records) -> IPFrames:
    """Strip link-layer headers (vectorised per link type) and keep IPv4/IPv6 payloads."""
    n = len(rec.off)
    data = rec.data
    u8 = np.frombuffer(data, dtype=np.uint8)
    if n == 0 or len(u8) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return IPFrames(data, empty, empty, empty, empty, 0, 0, rec.truncated, n)
    last = len(u8) - 2  # clamp for gathers; rows that need the clamp are masked out anyway
    l2 = np.full(n, -1, dtype=np.int64)  # -1: not IP
    short = np.zeros(n, dtype=bool)
    for lt in np.unique(rec.linktype):
        sel = rec.linktype == lt
        off, cap = rec.off[sel], rec.caplen[sel]
        res = np.full(len(off), -1, dtype=np.int64)
        bad = np.zeros(len(off), dtype=bool)
        if lt in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
            res[:] = 0
        elif lt == LINKTYPE_EN10MB:
            bad = cap < 14
            et = _be16(u8, np.minimum(off + 12, last))
            vlan = np.isin(et, _ETHERTYPE_VLAN)
            bad |= vlan & (cap < 18)
            et = np.where(vlan, _be16(u8, np.minimum(off + 16, last)), et)
            ip = (et == ETHERTYPE_IPV4) | (et == ETHERTYPE_IPV6)
            res = np.where(ip, np.where(vlan, 18, 14), -1)
        elif lt == LINKTYPE_LINUX_SLL:
            bad = cap < 16
            et = _be16(u8, np.minimum(off + 14, last))
            res = np.where((et == ETHERTYPE_IPV4) | (et == ETHERTYPE_IPV6), 16, -1)
        elif lt == LINKTYPE_LINUX_SLL2:
            bad = cap < 20
            et = _be16(u8, np.minimum(off, last))
            res = np.where((et == ETHERTYPE_IPV4) | (et == ETHERTYPE_IPV6), 20, -1)
        elif lt in (LINKTYPE_NULL, LINKTYPE_LOOP):
            bad = cap < 4
            idx = np.minimum(off, last - 2)
            b = [u8[idx + k].astype(np.int64) for k in range(4)]
            fam_le = b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24)
            fam_be = b[3] | (b[2] << 8) | (b[1] << 16) | (b[0] << 24)
            fams = _AF_INET + _AF_INET6
            # NULL is host byte order of the capturing machine, LOOP network order: accept either
            res = np.where(np.isin(fam_le, fams) | np.isin(fam_be, fams), 4, -1)
        # unsupported link types in pcapng interfaces: every record counts as non-IP
        res = np.where(bad, -1, res)
        l2[sel] = res
        short[sel] = bad
    ok = l2 >= 0
    ip_off = rec.off + l2
    ip_cap = rec.caplen - l2
    return IPFrames(
        data=data,
        ts_ns=rec.ts_ns[ok],
        ip_off=ip_off[ok],
        ip_caplen=ip_cap[ok],
        ip_orig_len=(rec.orig_len - l2)[ok],
        non_ip=int(np.count_nonzero(~ok & ~short)),
        malformed=int(np.count_nonzero(short)),
        truncated=rec.truncated,
        records=n,
    )


class PcapReader:
    """Iterate (timestamp_ns, ip_packet_bytes, orig_ip_len) over a capture.

    `orig_ip_len` is the IP packet's length on the wire (record orig_len minus the link header),
    which matters for header-only captures. After iteration, `truncated` says whether the last
    record was cut short and `non_ip`/`malformed` count link-layer frames that were skipped.
    """

    def __init__(self, source: str | os.PathLike[str] | bytes) -> None:
        self.frames = ip_frames(read_records(source))
        self.truncated = self.frames.truncated
        self.non_ip = self.frames.non_ip
        self.malformed = self.frames.malformed

    def __len__(self) -> int:
        return len(self.frames.ts_ns)

    def __iter__(self) -> Iterator[tuple[int, bytes, int]]:
        f = self.frames
        data = f.data
        for ts, off, cap, orig in zip(
            f.ts_ns.tolist(),
            f.ip_off.tolist(),
            f.ip_caplen.tolist(),
            f.ip_orig_len.tolist(),
            strict=True,
        ):
            yield ts, data[off : off + cap], orig


def iter_ip_packets(source: str | os.PathLike[str] | bytes) -> PcapReader:
    return PcapReader(source)


class PcapWriter:
    """Write a classic pcap (ns timestamps by default, link type RAW): synthetic test captures."""

    def __init__(
        self,
        dest: str | os.PathLike[str] | BinaryIO,
        *,
        linktype: int = LINKTYPE_RAW,
        snaplen: int = 65535,
        nanosecond: bool = True,
        byteorder: str = "<",
    ) -> None:
        if byteorder not in ("<", ">"):
            raise ValueError("byteorder must be '<' or '>'")
        self._own = not hasattr(dest, "write")
        self._f: BinaryIO = (
            open(dest, "wb") if self._own else dest  # type: ignore[arg-type, assignment]  # noqa: SIM115
        )
        self._e = byteorder
        self._ns = nanosecond
        self.snaplen = snaplen
        magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
        self._f.write(struct.pack(byteorder + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))

    def write(self, ts_ns: int, frame: bytes, orig_len: int | None = None) -> None:
        """Append one record; `frame` is cut to snaplen, `orig_len` defaults to len(frame)."""
        orig = len(frame) if orig_len is None else orig_len
        cap = frame[: self.snaplen]
        sec, frac = divmod(int(ts_ns), 1_000_000_000)
        if not self._ns:
            frac //= 1000
        self._f.write(struct.pack(self._e + "IIII", sec, frac, len(cap), orig) + cap)

    def close(self) -> None:
        if self._own:
            self._f.close()
        else:
            self._f.flush()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
