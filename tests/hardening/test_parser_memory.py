"""Finding 4: hostile or oversized inputs cost memory in proportion to what is parsed, not to
what they claim or inflate to. Each load runs in its own process under `prlimit --as` and its
peak RSS (the kernel's ru_maxrss) is checked: <= 300 MB for any rejected input."""

from __future__ import annotations

import gzip
import os
import struct
import sys
from pathlib import Path

import pytest

from tests.hardening.kit import rss_of

pytestmark = pytest.mark.slow

GB = 1024**3
REJECT_MB = 300
AS_LIMIT_MB = 3072  # address space: a 1 GB map of the input plus the interpreter's own

LOAD = {
    "trace": "from ccscope.trace import Trace; Trace.load({p!r})",
    "pcap": "from ccscope.capture.tcp_bif import flows_from_pcap; flows_from_pcap({p!r})",
    "csv": "from ccscope.capture.nebby_csv import traces_from_csv; traces_from_csv({p!r})",
}


def _load(kind: str, path: Path) -> tuple[int, float, str]:
    code = (
        "import sys\nfrom ccscope.errors import CCScopeError\n"
        f"try:\n    {LOAD[kind].format(p=str(path))}\nexcept CCScopeError as e:\n"
        "    print(e, file=sys.stderr); sys.exit(3)\n"
    )
    return rss_of([sys.executable, "-c", code], as_limit_mb=AS_LIMIT_MB)


def _sparse(path: Path, head: bytes, size: int = GB) -> Path:
    with path.open("wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def _pcap_header() -> bytes:
    return struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)


def _csv_header() -> bytes:
    return b"frame.time_relative,ip.src,ip.dst,tcp.srcport,tcp.dstport,tcp.seq,tcp.ack,tcp.len,tcp.flags\n"


@pytest.mark.parametrize(
    "kind,name,head",
    [
        ("pcap", "zeros.pcap", b""),
        ("pcap", "header-then-zeros.pcap", _pcap_header()),
        ("csv", "zeros.csv", b""),
        ("csv", "header-then-zeros.csv", _csv_header()),
        ("trace", "zeros.trace.json", b""),
        ("trace", "brace-then-zeros.trace.json", b'{"format": "ccscope-trace/1", "series": {"t": ['),
    ],
)
def test_sparse_gigabyte_is_refused_cheaply(tmp_path: Path, kind: str, name: str, head: bytes) -> None:
    code, rss, err = _load(kind, _sparse(tmp_path / name, head))
    assert code == 3, err  # a clean CCScopeError, not a MemoryError or a crash
    assert rss <= REJECT_MB, f"{name}: {rss:.0f} MB to refuse it"


def test_gzip_bomb_is_refused_at_the_cap(tmp_path: Path) -> None:
    p = tmp_path / "bomb.trace.json.gz"
    with gzip.open(p, "wb", compresslevel=9) as gz:
        gz.write(b'{"format": "ccscope-trace/1", "meta": {}, "series": {"t": [')
        chunk = b"0.000001, " * 100_000
        for _ in range(250 * 1024 * 1024 // len(chunk)):
            gz.write(chunk)
        gz.write(b"0]}}")
    assert p.stat().st_size < 5 * 1024 * 1024
    code, rss, err = _load("trace", p)
    assert code == 3 and "inflates beyond" in err, err
    assert rss <= REJECT_MB, f"{rss:.0f} MB"


def test_million_row_csv_within_four_times_its_size(tmp_path: Path) -> None:
    """A real (if long) Nebby CSV: one flow, 1e6 rows (57 MB), within 4x its size (the target;
    217 MB measured). The file is streamed into typed arrays that become the table's columns,
    and the BiF step reads a one-run flow's columns as views and builds its arrays in place."""
    p = tmp_path / "long.csv"
    with p.open("wb") as f:
        f.write(_csv_header())
        f.write(b"0.000000,10.0.0.2,10.0.0.1,40000,80,0,0,0,0x0002\n")
        f.write(b"0.010000,10.0.0.1,10.0.0.2,80,40000,0,1,0,0x0012\n")
        rows = []
        for i in range(1, 1_000_000 - 1):
            t = 0.02 + i * 0.0001
            if i % 2:
                rows.append(f"{t:.6f},10.0.0.1,10.0.0.2,80,40000,{1 + (i // 2) * 48},1,48,0x0010\n")
            else:
                rows.append(f"{t:.6f},10.0.0.2,10.0.0.1,40000,80,1,{1 + (i // 2) * 48},0,0x0010\n")
            if len(rows) == 10000:
                f.write("".join(rows).encode())
                rows = []
        f.write("".join(rows).encode())
    size_mb = p.stat().st_size / 1e6
    code = (
        "from ccscope.capture.nebby_csv import traces_from_csv\n"
        f"r = traces_from_csv({str(p)!r})\nassert len(r.traces) == 1, r.traces\n"
    )
    rc, rss, err = rss_of([sys.executable, "-c", code], as_limit_mb=AS_LIMIT_MB)
    assert rc == 0, err
    assert rss <= 4 * size_mb, f"{rss:.0f} MB for a {size_mb:.0f} MB CSV"
    os.unlink(p)
