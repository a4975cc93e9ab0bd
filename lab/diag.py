"""TCP_INFO of another program's sockets, through the kernel's sock_diag netlink interface.

The lab server samples its own connections with getsockopt; a second server program (nginx)
cannot be asked. `dump()` returns every TCP socket of the calling thread's network namespace with
its `struct tcp_info` and congestion control name, the same bytes getsockopt returns, so the
ground-truth records of both programs have one format. `python -m ccscope.lab.diag sample ...`
runs a sampler for the sockets of given local ports: 1 ms ticks, one record per connection when
it closes, matched to the server's access log for the request's run id.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ccscope.lab import tcpinfo

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO, INET_DIAG_CONG = 2, 4
# every state but LISTEN (10) and TIME_WAIT (6): connections that may still carry data
_STATES = 0xFFF & ~(1 << 10) & ~(1 << 6)
_NLH = struct.Struct("=IHHII")
_REQ = struct.Struct("=BBBBI48s")
_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")  # inet_diag_msg with its sockid unpacked
_RTA = struct.Struct("=HH")


@dataclass
class SockInfo:
    local: tuple[str, int]
    remote: tuple[str, int]
    cookie: bytes
    state: int
    info: bytes  # raw struct tcp_info, padded to tcpinfo.TCP_INFO_LEN
    cca: str | None


def dump(sock: socket.socket | None = None, *, family: int = socket.AF_INET) -> list[SockInfo]:
    """Every TCP socket (not listening, not TIME_WAIT) of this namespace with its tcp_info.

    A dump walks the kernel's whole established-socket hash (shared by every namespace): ~1 ms
    on this VM however few sockets the namespace has. `lookup()` of a known socket is cheap."""
    return _request(sock, family, bytes(48), NLM_F_REQUEST | NLM_F_DUMP)


def lookup(
    si: SockInfo, sock: socket.socket | None = None, *, family: int = socket.AF_INET
) -> SockInfo | None:
    """The current state of one socket (by its addresses, ports and cookie); None once it is gone."""
    alen = 4 if family == socket.AF_INET else 16
    sid = (
        struct.pack(">HH", si.local[1], si.remote[1])
        + ipaddress.ip_address(si.local[0]).packed.ljust(16, b"\0")[:16]
        + ipaddress.ip_address(si.remote[0]).packed.ljust(16, b"\0")[:16]
        + b"\0\0\0\0"
        + si.cookie
    )
    del alen
    try:
        got = _request(sock, family, sid, NLM_F_REQUEST)
    except FileNotFoundError:
        return None
    return got[0] if got else None


def _request(sock: socket.socket | None, family: int, sockid: bytes, flags: int) -> list[SockInfo]:
    own = sock is None
    s = sock or socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
    try:
        ext = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1))
        req = _REQ.pack(family, socket.IPPROTO_TCP, ext, 0, _STATES, sockid)
        s.send(_NLH.pack(_NLH.size + len(req), SOCK_DIAG_BY_FAMILY, flags, 1, 0) + req)
        out: list[SockInfo] = []
        single = not flags & NLM_F_DUMP
        while True:
            data = s.recv(1 << 20)
            off = 0
            while off + _NLH.size <= len(data):
                ln, typ, _, _, _ = _NLH.unpack_from(data, off)
                if ln < _NLH.size or off + ln > len(data):
                    return out  # a truncated message: keep what parsed
                if typ == NLMSG_DONE:
                    return out
                if typ == NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", data, off + _NLH.size)
                    if err == 0:  # an ACK
                        return out
                    raise OSError(-err, f"sock_diag: {os.strerror(-err)}")
                if typ == SOCK_DIAG_BY_FAMILY:
                    si = _parse(data[off + _NLH.size : off + ln], family)
                    if si is not None:
                        out.append(si)
                    if single:
                        return out
                off += (ln + 3) & ~3
    finally:
        if own:
            s.close()


def _parse(msg: bytes, family: int) -> SockInfo | None:
    if len(msg) < _MSG.size:
        return None
    fam, state, _, _, sport, dport, src, dst, _, cookie, *_ = _MSG.unpack_from(msg, 0)
    if fam != family:
        return None
    alen = 4 if family == socket.AF_INET else 16
    local = (str(ipaddress.ip_address(src[:alen])), struct.unpack(">H", sport)[0])
    remote = (str(ipaddress.ip_address(dst[:alen])), struct.unpack(">H", dport)[0])
    info, cca = b"", None
    off = _MSG.size
    while off + _RTA.size <= len(msg):
        ln, typ = _RTA.unpack_from(msg, off)
        if ln < _RTA.size:
            break
        payload = msg[off + _RTA.size : off + ln]
        if typ == INET_DIAG_INFO:
            info = payload[: tcpinfo.TCP_INFO_LEN].ljust(tcpinfo.TCP_INFO_LEN, b"\0")
        elif typ == INET_DIAG_CONG:
            cca = payload.split(b"\0", 1)[0].decode(errors="replace")
        off += (ln + 3) & ~3
    if not info:
        return None
    return SockInfo(local, remote, cookie, state, info, cca)


# --- the sampler for a second server program -----------------------------------------------

_ESTABLISHED, _CLOSE_WAIT = 1, 8


def _over(si: SockInfo) -> bool:
    """The server closed and everything it sent is acknowledged: the transfer is over (the
    socket may linger in FIN_WAIT2 until the client closes)."""
    if si.state in (_ESTABLISHED, _CLOSE_WAIT):
        return False
    i = tcpinfo.parse_tcp_info(si.info)
    return i.unacked == 0 and i.notsent_bytes == 0


@dataclass
class _Conn:
    si: SockInfo
    start_ns: int
    samples: list[tuple[int, bytes]] = field(default_factory=list)
    last_seen: int = 0


IDLE_PERIOD_NS = 10_000_000


class DiagSampler:
    """Samples the connections of `ports` on the lab's addresses every `interval_ms` and writes a
    ground-truth record per connection once it is gone (server.write_record's format)."""

    def __init__(
        self,
        gt_dir: Path,
        ports: Iterable[int],
        cca_of_addr: dict[str, str],
        access_log: Path | None,
        *,
        interval_ms: float = 1.0,
        scheme: str = "http",
        max_samples: int = 600_000,
    ) -> None:
        self.gt_dir = gt_dir
        self.ports = set(ports)
        self.cca_of_addr = cca_of_addr
        self.access_log = access_log
        self.period_ns = max(100_000, int(interval_ms * 1e6))
        self.scheme = scheme
        self.max_samples = max_samples
        self.conns: dict[bytes, _Conn] = {}
        self.records_written = 0
        self._log_pos = 0
        self._log_rows: list[dict[str, str]] = []
        self.done: dict[bytes, None] = {}  # cookies already recorded (insertion-ordered, bounded)
        self.discover_every = 10  # ticks between dumps (a dump costs ~1 ms; a lookup ~20 us)
        self.stop = threading.Event()

    def tick(self, nl: socket.socket, discover: bool = True) -> None:
        """One sample of every known connection; with `discover`, a dump finds new ones."""
        now = time.time_ns()
        current: dict[bytes, SockInfo | None] = {}
        if discover:
            for si in dump(nl):
                if (
                    si.local[1] in self.ports
                    and si.local[0] in self.cca_of_addr
                    and si.cookie not in self.done
                ):
                    current[si.cookie] = si
            for k in self.conns:
                current.setdefault(k, None)
        else:
            current = {k: lookup(c.si, nl) for k, c in self.conns.items()}
        for k, si in current.items():
            c = self.conns.get(k)
            if si is None:
                if c is not None:
                    self._finish(self.conns.pop(k))
                continue
            if c is None:
                c = self.conns[k] = _Conn(si, now)
            c.si, c.last_seen = si, now
            if len(c.samples) < self.max_samples:
                c.samples.append((now, si.info))
            if _over(si):
                self._finish(self.conns.pop(k))

    def run(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(5))
        nl = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
        next_t = time.monotonic_ns()
        n = 0
        try:
            while not self.stop.is_set():
                n += 1
                try:
                    self.tick(nl, discover=n % self.discover_every == 1 or not self.conns)
                except OSError as e:
                    print(f"diag sampler: {e}", file=sys.stderr)
                    time.sleep(0.1)
                # idle (no lab connection open): look for new ones every IDLE_PERIOD_NS only; a
                # dump every tick cost ~30 % of a core per lab for nothing, and a connection found
                # 10 ms late misses only its first flight
                next_t += self.period_ns if self.conns else max(self.period_ns, IDLE_PERIOD_NS)
                now = time.monotonic_ns()
                if now >= next_t:
                    next_t += ((now - next_t) // self.period_ns + 1) * self.period_ns
                time.sleep((next_t - now) / 1e9)
        finally:
            for c in list(self.conns.values()):
                self._finish(c)
            nl.close()

    def _requests(self, c: _Conn) -> list[dict[str, str]]:
        """The access-log rows of this connection (by client address and port), read once the
        server has logged them (nginx logs when the response is sent)."""
        if self.access_log is None:
            return []
        deadline = time.monotonic() + 1.0
        key = (c.si.remote[0], str(c.si.remote[1]), c.si.local[0])
        while True:
            self._read_log()
            rows = [r for r in self._log_rows if (r.get("remote_addr"), r.get("remote_port"),
                    r.get("server_addr")) == key]  # fmt: skip
            if rows or time.monotonic() > deadline:
                return rows
            time.sleep(0.05)

    def _read_log(self) -> None:
        assert self.access_log is not None
        try:
            with self.access_log.open("rb") as f:
                f.seek(self._log_pos)
                chunk = f.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1
        self._log_pos += end
        for line in chunk[:end].splitlines():
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                if isinstance(row, dict):
                    self._log_rows.append({k: str(v) for k, v in row.items()})
        del self._log_rows[:-2000]  # a bounded memory of recent requests

    def _finish(self, c: _Conn) -> None:
        from ccscope.lab.server import Request, write_record

        self.done[c.si.cookie] = None
        while len(self.done) > 10_000:
            del self.done[next(iter(self.done))]
        if not c.samples:
            return
        reqs = []
        for r in self._requests(c):
            run = r.get("run") or None
            size = int(r.get("bytes") or 0)
            reqs.append(Request(method="GET", path=r.get("uri", ""), status=int(r.get("status") or 0),
                                bytes=size, run_id=run, start_ns=c.start_ns, acked=True))  # fmt: skip
        if reqs and all(q.path == "/health" for q in reqs):
            return
        cca = self.cca_of_addr[c.si.local[0]]
        with contextlib.suppress(OSError):
            write_record(
                self.gt_dir, cca=cca, kernel_cca=c.si.cca, scheme=self.scheme, server=c.si.local,
                client=c.si.remote, start_ns=c.start_ns, samples=c.samples, requests=reqs,
                end_reason="client closed", sample_interval_ms=self.period_ns / 1e6,
                truncated=len(c.samples) >= self.max_samples,
            )  # fmt: skip
            self.records_written += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccscope.lab.diag")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("sample", help="record the connections of a second server program")
    p.add_argument("--groundtruth", required=True, type=Path)
    p.add_argument("--ports", required=True, help="local ports, comma-separated")
    p.add_argument("--map", required=True, help="addr=cca,... (lab names)")
    p.add_argument("--access-log", type=Path)
    p.add_argument("--scheme", default="http")
    p = sub.add_parser("show", help="print this namespace's TCP sockets with their CCA")
    args = ap.parse_args(argv)
    if args.cmd == "show":
        for si in dump():
            i = tcpinfo.parse_tcp_info(si.info)
            print(f"{si.local[0]}:{si.local[1]} {si.remote[0]}:{si.remote[1]} cca={si.cca} "
                  f"cwnd={i.snd_cwnd} mss={i.snd_mss} unacked={i.unacked}")  # fmt: skip
        return 0
    cmap = dict(kv.split("=", 1) for kv in args.map.split(",") if kv)
    smp = DiagSampler(args.groundtruth, [int(x) for x in args.ports.split(",")], cmap, args.access_log,
                      scheme=args.scheme)  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: smp.stop.set())
    signal.signal(signal.SIGINT, lambda *_: smp.stop.set())
    smp.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
