"""The pcap/pcapng reader: formats, link types, truncation and corruption."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from ccscope.capture.pcap import (
    LINKTYPE_EN10MB,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
    PcapReader,
    PcapWriter,
    read_records,
)
from ccscope.capture.tcp_bif import flows_from_pcap
from ccscope.errors import CaptureError
from tests.capture.synth import (
    CLIENT6,
    PLAIN_BIF,
    SERVER6,
    ethernet,
    null_le,
    pcapng_bytes,
    plain_flow,
    sll,
    sll2,
    write_pcap,
)


def _null_be(ip: bytes) -> bytes:
    return struct.pack(">I", 24 if ip[0] >> 4 == 6 else 2) + ip


@pytest.mark.parametrize("nanosecond", [True, False])
@pytest.mark.parametrize("byteorder", ["<", ">"])
def test_classic_variants(tmp_path: Path, nanosecond: bool, byteorder: str) -> None:
    pk = plain_flow().packets()
    p = write_pcap(tmp_path / "a.pcap", pk, nanosecond=nanosecond, byteorder=byteorder)
    rd = PcapReader(p)
    got = list(rd)
    assert not rd.truncated and len(got) == len(pk)
    for (ts, ip, wire), (gts, gip, gwire) in zip(pk, got, strict=True):
        assert gip == ip and gwire == wire
        assert gts == (ts if nanosecond else ts // 1000 * 1000)
    assert flows_from_pcap(p).main.bif.tolist() == PLAIN_BIF


LINKS: list[tuple[int, Callable[[bytes], bytes]]] = [
    (LINKTYPE_RAW, lambda ip: ip),
    (LINKTYPE_EN10MB, ethernet),
    (LINKTYPE_EN10MB, lambda ip: ethernet(ip, vlan=42)),
    (LINKTYPE_LINUX_SLL, sll),
    (LINKTYPE_LINUX_SLL2, sll2),
    (LINKTYPE_NULL, null_le),
    (LINKTYPE_LOOP, _null_be),
]


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize(("linktype", "frame"), LINKS)
def test_link_types(tmp_path: Path, linktype: int, frame: Callable[[bytes], bytes], v6: bool) -> None:
    f = plain_flow(server=SERVER6, client=CLIENT6) if v6 else plain_flow()
    p = write_pcap(tmp_path / "l.pcap", f.packets(), linktype=linktype, frame=frame)
    res = flows_from_pcap(p)
    assert res.main.bif.tolist() == PLAIN_BIF
    assert res.stats["non_ip"] == 0
    assert [w for _, _, w in PcapReader(p)] == [w for _, _, w in f.packets()]


@pytest.mark.parametrize(("linktype", "v6"), [(LINKTYPE_IPV4, False), (LINKTYPE_IPV6, True)])
def test_ipv4_ipv6_linktypes(tmp_path: Path, linktype: int, v6: bool) -> None:
    f = plain_flow(server=SERVER6, client=CLIENT6) if v6 else plain_flow()
    p = write_pcap(tmp_path / "l.pcap", f.packets(), linktype=linktype)
    assert flows_from_pcap(p).main.bif.tolist() == PLAIN_BIF


@pytest.mark.parametrize("e", ["<", ">"])
@pytest.mark.parametrize("tsresol", [None, 6, 9, 0x80 | 30])
def test_pcapng(tmp_path: Path, e: str, tsresol: int | None) -> None:
    pk = plain_flow().packets()
    raw = pcapng_bytes(pk, tsresol=tsresol, e=e)
    p = tmp_path / "a.pcapng"
    p.write_bytes(raw)
    rec = read_records(p)
    assert rec.fmt == "pcapng" and len(rec.off) == len(pk) and not rec.truncated
    if tsresol in (None, 6):
        assert rec.ts_ns.tolist() == [ts // 1000 * 1000 for ts, _, _ in pk]
    elif tsresol == 9:
        assert rec.ts_ns.tolist() == [ts for ts, _, _ in pk]
    else:  # binary fractions: within a nanosecond
        assert all(abs(a - b) <= 1 for a, b in zip(rec.ts_ns.tolist(), [t for t, _, _ in pk], strict=True))
    assert flows_from_pcap(raw).main.bif.tolist() == PLAIN_BIF


def test_pcapng_per_interface_linktypes_and_spb(tmp_path: Path) -> None:
    pk = plain_flow().packets()
    raw = pcapng_bytes(pk, linktypes=(LINKTYPE_RAW, LINKTYPE_EN10MB), frames=(lambda i: i, ethernet))
    res = flows_from_pcap(raw)
    assert res.main.bif.tolist() == PLAIN_BIF
    # a Simple Packet Block after the last EPB takes interface 0 and the previous timestamp
    _, ip, wire = pk[-1]
    body = struct.pack("<I", wire) + ip
    body += b"\x00" * (-len(body) % 4)
    spb = struct.pack("<II", 3, len(body) + 12) + body + struct.pack("<I", len(body) + 12)
    rec = read_records(raw + spb)
    assert len(rec.off) == len(pk) + 1
    assert rec.ts_ns[-1] == rec.ts_ns[-2]
    assert rec.orig_len[-1] == wire and rec.caplen[-1] == len(ip)


def test_truncated_tail_stops_cleanly(tmp_path: Path) -> None:
    pk = plain_flow().packets()
    full = write_pcap(tmp_path / "a.pcap", pk).read_bytes()
    for cut in (1, 10, 16, 17, len(pk[-1][1]) + 15):
        rec = read_records(full[:-cut])
        assert rec.truncated
        assert len(rec.off) == len(pk) - 1
    ng = pcapng_bytes(pk)
    rec = read_records(ng[:-5])
    assert rec.truncated and len(rec.off) == len(pk) - 1


def test_corrupt_header_and_lengths(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="not a pcap or pcapng"):
        read_records(b"GET / HTTP/1.1\r\n\r\n" * 3)
    with pytest.raises(CaptureError, match="empty"):
        read_records(b"")
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\xd4\xc3\xb2\xa1\x02\x00")
    with pytest.raises(CaptureError, match=r"bad\.pcap.*global header truncated"):
        read_records(bad)
    # a record claiming 1 MiB: error names the offset
    good = write_pcap(tmp_path / "g.pcap", plain_flow().packets()).read_bytes()
    rec = read_records(good)
    off = int(rec.off[3]) - 16
    broken = bytearray(good)
    struct.pack_into("<I", broken, off + 8, 1 << 20)
    with pytest.raises(CaptureError, match=f"offset {off}"):
        read_records(bytes(broken))
    # above the declared snaplen (+ slack) is corrupt as well
    PcapWriter(tmp_path / "s.pcap", snaplen=64).close()
    raw = bytearray((tmp_path / "s.pcap").read_bytes())
    raw += struct.pack("<IIII", 1, 0, 1000, 1000) + bytes(1000)
    with pytest.raises(CaptureError, match="offset 24"):
        read_records(bytes(raw))
    with pytest.raises(CaptureError, match="link type"):
        read_records(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 147))
    with pytest.raises(CaptureError, match="cannot read"):
        read_records(tmp_path / "missing.pcap")


def test_pcapng_corruption() -> None:
    ng = bytearray(pcapng_bytes(plain_flow().packets()))
    with pytest.raises(CaptureError, match="byte-order magic"):
        read_records(bytes(ng[:8]) + b"\x00\x00\x00\x00" + bytes(ng[12:]))
    bad_len = bytearray(ng)
    struct.pack_into("<I", bad_len, 4, 13)  # not a multiple of 4
    with pytest.raises(CaptureError, match="invalid length 13"):
        read_records(bytes(bad_len))
    # EPB naming an interface that was never described
    body = struct.pack("<IIIII", 7, 0, 0, 4, 4) + b"\x45\x00\x00\x04"
    epb = struct.pack("<II", 6, len(body) + 12) + body + struct.pack("<I", len(body) + 12)
    with pytest.raises(CaptureError, match="undefined interface 7"):
        read_records(bytes(ng) + epb)


def _walk_reference(data: bytes) -> tuple[list[int], bool] | str:
    """The obvious record walk (no run speculation), for comparison."""
    if len(data) < 24:
        return "short"
    e = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    snap = struct.unpack_from(e + "I", data, 16)[0]
    limit = 262144 if snap == 0 else min(262144, snap + 256)
    off, out = 24, []
    while True:
        if off + 16 > len(data):
            return out, off != len(data)
        incl = struct.unpack_from(e + "I", data, off + 8)[0]
        if incl > limit:
            return f"offset {off}"
        if off + 16 + incl > len(data):
            return out, True
        out.append(off + 16)
        off += 16 + incl


def test_record_walk_matches_reference_on_varied_lengths(tmp_path: Path) -> None:
    import random

    rng = random.Random(3)
    for trial in range(60):
        buf = bytearray()
        w = PcapWriter(tmp_path / "v.pcap", byteorder="<>"[trial % 2], snaplen=300)
        w.close()
        buf += (tmp_path / "v.pcap").read_bytes()
        length = rng.choice((20, 52, 60))
        for _ in range(rng.randrange(0, 3000)):
            r = rng.random()
            if r < 0.05:
                length = rng.choice((20, 52, 60, 0, 1, 299))
            elif r < 0.06:
                length = rng.randrange(250, 700)  # some beyond snaplen + slack: corrupt
            e = "<>"[trial % 2]
            buf += struct.pack(e + "IIII", 1, 2, length, length) + bytes(length)
        cut = rng.choice((0, 0, 1, 7, 30))
        data = bytes(buf[: len(buf) - cut])
        want = _walk_reference(data)
        if isinstance(want, str):
            with pytest.raises(CaptureError, match=want):
                read_records(data)
        else:
            rec = read_records(data)
            assert rec.off.tolist() == want[0]
            assert rec.truncated == want[1]
