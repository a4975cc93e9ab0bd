"""Shared by the hardening tests and `bench/hardening`: a network namespace holding a hostile
lab host and the internal listeners it points at; the hostile and oversized input files and
`peak_rss`, which loads one in a process of its own and measures its peak RSS.

The namespace is private to one test (its own name, no routes out): every address in it lives on
its loopback device, and the client under test runs inside it too (`run_in_ns`), so no packet
of an SSRF attempt can leave it. A listener on every "internal" address records each request it
gets; a refused attack is one whose listener log stays empty.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import struct
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PY = sys.executable
# 198.18.24.0/24 is lab instance 24's prefix (lab mode allows it); the rest must stay unreachable.
LAB_HOST = "198.18.24.2"
INTERNAL = {
    "loopback": "127.0.0.1",
    "private": "10.18.24.2",
    "link-local": "169.254.24.2",
    "cgnat": "100.64.24.2",
}
LISTEN_PORT = 8080

_SERVER = textwrap.dedent(
    """
    import http.server, json, sys, threading
    log_path, port, lab_host = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    targets = json.loads(sys.argv[4])
    lock = threading.Lock()

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def log_message(self, *a): pass
        def do_GET(self):
            here = self.connection.getsockname()[0]
            with lock, open(log_path, "a") as f:
                f.write(json.dumps({"addr": here, "path": self.path}) + "\\n")
            if here == lab_host and self.path.startswith("/to/"):
                # /to/<kind>/<rest>: redirect to that internal listener
                kind, _, rest = self.path[4:].partition("/")
                loc = f"http://{targets[kind]}:{port}/{rest}"
                self.send_response(302)
                self.send_header("Location", loc)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if here == lab_host and self.path == "/robots.txt":
                # a robots.txt that redirects to the loopback listener (the API's pre-fetch)
                self.send_response(301)
                self.send_header("Location", f"http://127.0.0.1:{port}/robots.txt")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = b"internal secret" if here != lab_host else b"x" * 1000
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        do_HEAD = do_GET

    srv = http.server.ThreadingHTTPServer(("0.0.0.0", port), H)
    srv.daemon_threads = True
    print("ready", flush=True)
    srv.serve_forever()
    """
)


@dataclass
class HostileNet:
    name: str
    log: Path

    def hits(self) -> list[dict[str, str]]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text().splitlines() if x.strip()]

    def internal_hits(self) -> list[dict[str, str]]:
        return [h for h in self.hits() if h["addr"] != LAB_HOST]

    def clear(self) -> None:
        self.log.write_text("")

    def url(self, path: str) -> str:
        return f"http://{LAB_HOST}:{LISTEN_PORT}{path}"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextlib.contextmanager
def hostile_net(tmp: Path) -> Iterator[HostileNet]:
    """A namespace with a lab host at LAB_HOST that redirects to listeners on INTERNAL."""
    name = f"ccs-ssrf-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    _ip("netns", "add", name)
    server = None
    try:
        _ip("-n", name, "link", "set", "lo", "up")
        for a in [LAB_HOST, *INTERNAL.values()]:
            if a != "127.0.0.1":
                _ip("-n", name, "addr", "add", f"{a}/32", "dev", "lo")
        # The v6 listeners: loopback exists; a site-local one is added.
        _ip("-n", name, "addr", "add", "fec0::2/128", "dev", "lo")
        log = tmp / f"{name}.log"
        log.write_text("")
        server = subprocess.Popen(
            ["ip", "netns", "exec", name, PY, "-c", _SERVER, str(log), str(LISTEN_PORT), LAB_HOST,
             json.dumps(INTERNAL)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            err = server.stderr.read() if server.stderr else ""
            raise RuntimeError(f"hostile server did not start: {err}")
        yield HostileNet(name, log)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def run_in_ns(net: HostileNet, code: str, *, env: dict[str, str] | None = None, timeout: float = 60) -> str:
    """Run Python `code` inside the namespace; returns its stdout (its last line is usually JSON)."""
    e = {**os.environ, **(env or {})}
    p = subprocess.run(
        ["ip", "netns", "exec", net.name, PY, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout, env=e,
    )  # fmt: skip
    if p.returncode != 0:
        raise RuntimeError(f"in-namespace client failed ({p.returncode}): {p.stderr[-2000:]}")
    return p.stdout


# ---- memory: hostile and oversized inputs -------------------------------------------------------

GB = 1024**3
REJECT_MB = 300  # the most a rejected input may cost
AS_LIMIT_MB = 3072  # address space: a 1 GB map of the input plus the interpreter's own
PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
CSV_HEADER = b"frame.time_relative,ip.src,ip.dst,tcp.srcport,tcp.dstport,tcp.seq,tcp.ack,tcp.len,tcp.flags\n"
TRACE_PREFIX = b'{"format": "ccscope-trace/1", "series": {"t": ['
# What loads a file of each input kind, as a user's command would.
LOADERS = {
    "trace": "from ccscope.trace import Trace; Trace.load({p!r})",
    "pcap": "from ccscope.capture.tcp_bif import flows_from_pcap; flows_from_pcap({p!r})",
    "csv": "from ccscope.capture.nebby_csv import traces_from_csv; traces_from_csv({p!r})",
}
# 1 GB sparse files, each a head and then zeros: (kind, file name, head, what it is).
SPARSE_INPUTS = (
    ("pcap", "zeros.pcap", b"", "1 GB of zeros (.pcap)"),
    ("pcap", "header-then-zeros.pcap", PCAP_HEADER, "pcap header then 1 GB of zeros"),
    ("csv", "zeros.csv", b"", "1 GB of zeros (.csv)"),
    ("csv", "header-then-zeros.csv", CSV_HEADER, "CSV header then 1 GB of zeros"),
    ("trace", "zeros.trace.json", b"", "1 GB of zeros (.trace.json)"),
    ("trace", "brace-then-zeros.trace.json", TRACE_PREFIX, "trace prefix then 1 GB of zeros"),
)


def peak_rss(
    cmd: list[str], *, as_limit_mb: int | None = AS_LIMIT_MB, timeout: float = 300
) -> tuple[int, float, str]:
    """(exit code, peak RSS in MB, stderr's tail) of `cmd` alone under `prlimit --as`, measured
    by a fresh wrapper process so earlier, bigger children of this process do not mask it."""
    wrapper = (
        "import json, resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "r = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps({'rc': p.returncode, 'rss_kb': r, 'err': p.stderr[-600:]}))\n"
    )
    argv = list(cmd)
    if as_limit_mb is not None:
        argv = ["prlimit", f"--as={as_limit_mb * 1024 * 1024}", "--", *argv]
    out = subprocess.run([PY, "-c", wrapper, *argv], capture_output=True, text=True, timeout=timeout)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    return int(d["rc"]), d["rss_kb"] / 1024, str(d["err"])


def load_cmd(kind: str, path: Path) -> list[str]:
    """A fresh interpreter loading `path` as a `kind` input; exit 3 on a clean CCScopeError."""
    code = (
        "import sys\nfrom ccscope.errors import CCScopeError\n"
        f"try:\n    {LOADERS[kind].format(p=str(path))}\nexcept CCScopeError as e:\n"
        "    print(e, file=sys.stderr); sys.exit(3)\n"
    )
    return [PY, "-c", code]


def sparse(path: Path, head: bytes, size: int = GB) -> Path:
    with path.open("wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def gzip_bomb(path: Path) -> Path:
    """A gzipped trace under 5 MB that inflates to 250 MB."""
    with gzip.open(path, "wb", compresslevel=9) as gz:
        gz.write(b'{"format": "ccscope-trace/1", "meta": {}, "series": {"t": [')
        chunk = b"0.000001, " * 100_000
        for _ in range(250 * 1024 * 1024 // len(chunk)):
            gz.write(chunk)
        gz.write(b"0]}}")
    return path


def million_row_csv(path: Path) -> Path:
    """A real (if long) Nebby CSV: one flow's handshake and 1e6 - 2 rows of data and ACKs (57 MB)."""
    with path.open("wb") as f:
        f.write(CSV_HEADER)
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
    return path
