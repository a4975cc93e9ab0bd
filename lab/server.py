"""The lab web server: one HTTP + HTTPS listener per congestion control, with TCP_INFO ground truth.

Run as `python -m ccscope.lab.server --config FILE` (normally inside the lab's `ccscope-link`
shell, which provides the addresses). Every accepted connection is sampled with
getsockopt(TCP_INFO) every millisecond from accept until its last response is fully
acknowledged; the samples become `groundtruth/<cca>/<start_ns>_<client>_<port>.csv` plus a
JSON sidecar, written once the connection is over.

Routes: `/obj/<bytes>` (deterministic content, see content.py; `?rate=B&after=N` caps the send
rate at B bytes/s after the first N bytes: application-limited sends), `/large`, `/`, `/health`.
HTTP/1.1 with keep-alive, one thread per connection, written for clients that vanish mid-way.

Server settings of the condition space are applied here, in the lab's namespace, before the
listeners open: the initial window (`initcwnd` on the namespace's routes), GSO on the
namespace's device (its TUN has no TSO: checksum offload is fixed off, so GSO is what can change)
and the MSS (TCP_MAXSEG on every listener). The server also starts, as its children in the same
namespace, nginx (lab/nginx.py) with its ground-truth sampler (lab/diag.py) and the cross-traffic
sources (lab/crosstraffic.py) when the config asks for them.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ccscope.lab import tcpinfo
from ccscope.lab.content import MAX_OBJECT_BYTES, block, iter_object

GROUNDTRUTH_FORMAT = "ccscope-groundtruth/1"
CSV_COLUMNS = (
    "t_ns", "state", "ca_state", "snd_cwnd", "unacked", "snd_mss", "pacing_rate", "rtt_us",
    "min_rtt_us", "bytes_sent", "bytes_retrans", "bytes_acked", "notsent_bytes",
    "total_retrans", "delivery_rate", "snd_ssthresh", "sacked", "lost", "retrans",
    "bif", "bif_unacked",
)  # fmt: skip
DEFAULT_LARGE_BYTES = 1_000_000
MAX_CONNECTIONS = 256
_TS = struct.Struct("=q")
_SAMPLE_SIZE = _TS.size + tcpinfo.TCP_INFO_LEN
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_OBJ_RE = re.compile(r"^/obj/(\d{1,9})$")


def log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} lab-server: {msg}\n")
    sys.stderr.flush()


# --- configuration ------------------------------------------------------------------------


@dataclass(frozen=True)
class ListenerSpec:
    cca: str  # the lab's name (ground-truth directory, label)
    addr: str
    http_port: int = 80
    https_port: int | None = 443
    kernel_cca: str | None = None  # TCP_CONGESTION name when it differs (BPF zoo: cc_<name>)

    @property
    def kernel(self) -> str:
        return self.kernel_cca or self.cca


@dataclass
class ServerConfig:
    servers: list[ListenerSpec]
    groundtruth_dir: str
    cert_file: str | None = None  # leaf + chain, PEM; None disables HTTPS
    key_file: str | None = None
    large_bytes: int = DEFAULT_LARGE_BYTES
    sample_interval_ms: float = 1.0  # 0: no periodic samples (a stand-in for an Internet server)
    ack_stall_s: float = 10.0  # give up waiting for ACKs after this long without progress
    idle_timeout_s: float = 15.0  # keep-alive idle limit
    io_timeout_s: float = 60.0
    max_samples: int = 600_000  # per connection: 10 min at 1 ms, ~150 MB at most
    record_health: bool = False  # connections that only asked /health are not ground truth
    cross_traffic_kbit: float = 0.0
    cross_traffic_port: int = 0
    cross_traffic_target: str | None = None  # default: $CCSCOPE_SHELL_OUTER_ADDR
    initcwnd: int | None = None  # initial window (segments) on the namespace's default route
    gso: bool | None = None  # GSO on the namespace's device; None leaves the kernel's default
    mss: int | None = None  # TCP_MAXSEG on every listener (the MSS the server sends with)
    nginx_port: int = 0  # >0: nginx listens on every server address at this port (HTTP)
    nginx_dir: str | None = None  # its config, logs and pid
    nginx_root: str | None = None  # the directory holding obj/<N>
    cross_addr: str | None = None  # cross-traffic sources' address (in the lab's prefix)
    cross_udp_port: int = 0
    cross_tcp_ports: dict[str, int] | None = None  # cca -> port

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServerConfig:
        d = dict(d)
        d["servers"] = [ListenerSpec(**s) for s in d["servers"]]
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> ServerConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))


# --- TCP_INFO sampling --------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    status: int
    bytes: int
    run_id: str | None
    start_ns: int
    end_ns: int = 0
    acked: bool = False


class Recorder:
    """TCP_INFO samples of one connection, kept raw in one bytearray (8-byte timestamp + the
    struct per sample, ~240 B) and decoded at the end: a tick costs one getsockopt and one
    append, and no per-sample Python objects pile up during a long download."""

    def __init__(self, sock: socket.socket, max_samples: int = 600_000) -> None:
        # A private duplicate of the fd: TLS wrapping detaches the original socket object.
        self._sock = socket.socket(fileno=os.dup(sock.fileno()))
        self._lock = threading.Lock()
        self._buf = bytearray()
        self.count = 0
        self.max_samples = max_samples
        self.truncated = False  # hit max_samples: the record covers only the start
        self.active = True
        self.closed = False

    def sample(self) -> None:
        with self._lock:
            if self.closed:
                return
            if self.count >= self.max_samples:
                self.truncated = True
                return
            t = time.time_ns()
            try:
                raw = self._sock.getsockopt(socket.IPPROTO_TCP, tcpinfo.TCP_INFO, tcpinfo.TCP_INFO_LEN)
            except OSError:
                return
            if len(raw) != tcpinfo.TCP_INFO_LEN:  # older kernels: a shorter struct
                raw = raw[: tcpinfo.TCP_INFO_LEN].ljust(tcpinfo.TCP_INFO_LEN, b"\0")
            self._buf += _TS.pack(t)
            self._buf += raw
            self.count += 1

    def samples(self) -> Iterator[tuple[int, memoryview]]:
        mv = memoryview(self._buf)
        for off in range(0, len(mv), _SAMPLE_SIZE):
            yield _TS.unpack_from(mv, off)[0], mv[off + _TS.size : off + _SAMPLE_SIZE]

    def info(self) -> tcpinfo.TcpInfo:
        return tcpinfo.read_tcp_info(self._sock)

    def finish(self) -> None:
        """Last sample, then release the duplicate fd (so the real close sends the FIN)."""
        self.sample()
        with self._lock:
            if not self.closed:
                self.closed = True
                self._sock.close()

    def abort(self) -> None:
        """Cut the connection from another thread (server shutdown); blocked I/O then fails."""
        with self._lock:
            if not self.closed:
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)


class SamplerHub:
    """One thread samples every active connection on an absolute 1 ms schedule.

    One thread instead of one per connection: a browser opens many connections and the server
    has two cores; the ticks stay aligned and the GIL sees one waker instead of dozens.
    """

    def __init__(self, interval_ms: float) -> None:
        # 0 turns sampling off: a lab standing in for the Internet's servers (a census, the
        # scale bench) keeps no ground truth, and the 1 ms schedule costs it ~50 ms of CPU per
        # second per open connection; records then hold the first and last sample only.
        self.enabled = interval_ms > 0
        self.period_ns = max(100_000, int(interval_ms * 1e6))
        self._recs: set[Recorder] = set()
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> None:
        if self.enabled:
            self._thread.start()

    def stop(self) -> None:
        if not self.enabled:
            return
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=2)

    def add(self, rec: Recorder) -> None:
        if not self.enabled:
            return
        with self._cond:
            self._recs.add(rec)
            self._cond.notify_all()

    def remove(self, rec: Recorder) -> None:
        with self._cond:
            self._recs.discard(rec)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _run(self) -> None:
        _tighten_timer_slack()
        # Real-time priority for this thread alone (pid 0 = the calling thread on Linux): busy
        # machines otherwise delay ticks by milliseconds, and ground truth goes stale exactly
        # when the BiF jumps. It sleeps 1 ms between short polls, so it cannot starve anyone.
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(5))
        period = self.period_ns
        next_t = time.monotonic_ns()
        while True:
            with self._cond:
                if self._stop:
                    return
                recs = [r for r in self._recs if r.active]
                if not recs:
                    self._cond.wait(timeout=0.5)
                    next_t = time.monotonic_ns()
                    continue
            for r in recs:
                r.sample()
            next_t += period
            now = time.monotonic_ns()
            if now >= next_t:  # fell behind (GC, busy CPU): skip missed ticks, never burst
                next_t += ((now - next_t) // period + 1) * period
            time.sleep((next_t - now) / 1e9)


def _tighten_timer_slack() -> None:
    # The default 50 us timer slack would smear a 1 ms schedule; ask for 1 us on this thread.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(29, ctypes.c_ulong(1000), 0, 0, 0)  # PR_SET_TIMERSLACK, in ns


# --- ground-truth files -------------------------------------------------------------------


def samples_to_rows(
    samples: Iterable[tuple[int, bytes | memoryview]],
) -> Iterator[tuple[int, ...]]:
    for t, raw in samples:
        i = tcpinfo.parse_tcp_info(raw)
        bif = max(0, i.bytes_sent - i.bytes_retrans - i.bytes_acked)
        yield (
            t, i.state, i.ca_state, i.snd_cwnd, i.unacked, i.snd_mss, i.pacing_rate, i.rtt_us,
            i.min_rtt_us, i.bytes_sent, i.bytes_retrans, i.bytes_acked, i.notsent_bytes,
            i.total_retrans, i.delivery_rate, i.snd_ssthresh, i.sacked, i.lost, i.retrans,
            bif, i.unacked * i.snd_mss,
        )  # fmt: skip


def _atomic_write(path: Path, data: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(data)
    tmp.replace(path)


def write_record(
    gt_dir: Path,
    *,
    cca: str,
    scheme: str,
    kernel_cca: str | None = None,
    server: tuple[str, int],
    client: tuple[str, int],
    start_ns: int,
    samples: Iterable[tuple[int, bytes | memoryview]],
    requests: list[Request],
    end_reason: str,
    sample_interval_ms: float,
    truncated: bool = False,
) -> Path:
    """Write the CSV, then the sidecar: a sidecar's presence means the record is complete."""
    d = gt_dir / cca
    d.mkdir(parents=True, exist_ok=True)
    stem = f"{start_ns}_{client[0].replace(':', '-')}_{client[1]}"
    csv_path = d / f"{stem}.csv"
    tmp = csv_path.with_name(csv_path.name + ".tmp")
    n = 0
    last: tuple[int, ...] | None = None
    with tmp.open("w", buffering=1 << 20) as f:
        f.write(",".join(CSV_COLUMNS) + "\n")
        for row in samples_to_rows(samples):
            f.write(",".join(map(str, row)) + "\n")
            n, last = n + 1, row
    tmp.replace(csv_path)
    main = max(requests, key=lambda r: r.bytes) if requests else None
    run_ids = [r.run_id for r in requests if r.run_id]
    meta = {
        "format": GROUNDTRUTH_FORMAT,
        "cca": cca,
        "kernel_cca": kernel_cca or cca,
        "scheme": scheme,
        "server": {"addr": server[0], "port": server[1]},
        "client": {"addr": client[0], "port": client[1]},
        "run_id": run_ids[0] if run_ids else None,
        "object_path": main.path if main else None,
        "object_bytes": main.bytes if main else 0,
        "start_ns": start_ns,
        "end_ns": last[0] if last else start_ns,
        "samples": n,
        "sample_interval_ms": sample_interval_ms,
        "truncated": truncated,
        "end_reason": end_reason,
        "bytes_sent": last[9] if last else 0,
        "bytes_retrans": last[10] if last else 0,
        "bytes_acked": last[11] if last else 0,
        "total_retrans": last[13] if last else 0,
        "requests": [asdict(r) for r in requests],
        "csv": csv_path.name,
    }
    path = d / f"{stem}.json"
    _atomic_write(path, json.dumps(meta, indent=1))
    return path


# --- HTTP ---------------------------------------------------------------------------------


class ClientGone(Exception):
    """The peer closed, reset or stalled; finish the record and move on."""


class LabServer:
    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.gt_dir = Path(cfg.groundtruth_dir)
        self.hub = SamplerHub(cfg.sample_interval_ms)
        self.started = time.time()
        self._listeners: list[tuple[socket.socket, ListenerSpec, str]] = []
        self._conns: set[Recorder] = set()
        self._conn_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.records_written = 0
        self.cross_sent_bytes = 0
        self._tls: ssl.SSLContext | None = None
        if cfg.cert_file and cfg.key_file:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
            ctx.set_alpn_protocols(["http/1.1"])
            self._tls = ctx

    # -- setup --

    def bind(self) -> None:
        """Open every listener; any CCA that cannot be set is fatal (OSError with the reason)."""
        for spec in self.cfg.servers:
            ports = [(spec.http_port, "http")]
            if spec.https_port and self._tls is not None:
                ports.append((spec.https_port, "https"))
            for port, scheme in ports:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                tcpinfo.set_cca(s, spec.kernel)  # accepted sockets inherit it; checked again there
                if self.cfg.mss:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, self.cfg.mss)
                try:
                    s.bind((spec.addr, port))
                except OSError as e:
                    s.close()
                    raise OSError(e.errno, f"cannot listen on {spec.addr}:{port}: {e.strerror}") from e
                s.listen(128)
                self._listeners.append((s, spec, scheme))
                log(f"{spec.cca:>8} {scheme}://{spec.addr}:{port}/ (TCP_CONGESTION={tcpinfo.get_cca(s)})")

    def start(self) -> None:
        self.hub.start()
        for s, spec, scheme in self._listeners:
            t = threading.Thread(target=self._accept_loop, args=(s, spec, scheme), daemon=True,
                                 name=f"accept-{spec.cca}-{scheme}")  # fmt: skip
            t.start()
            self._threads.append(t)
        if self.cfg.cross_traffic_kbit > 0:
            t = threading.Thread(target=self._cross_traffic, daemon=True, name="cross-traffic")
            t.start()

    def stop(self) -> None:
        """Stop accepting, cut open connections (their records are still written), wait briefly."""
        self._stopping.set()
        for s, _, _ in self._listeners:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        with self._conn_lock:
            for rec in self._conns:
                rec.abort()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            with self._conn_lock:
                if not self._conns:
                    break
            time.sleep(0.02)
        self.hub.stop()

    # -- connections --

    def _accept_loop(self, lsock: socket.socket, spec: ListenerSpec, scheme: str) -> None:
        while not self._stopping.is_set():
            try:
                conn, addr = lsock.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.01)  # EMFILE and friends: back off instead of spinning
                continue
            if not self._slots.acquire(blocking=False):
                conn.close()
                continue
            t = threading.Thread(target=self._connection, args=(conn, addr, spec, scheme),
                                 daemon=True)  # fmt: skip
            t.start()

    def _connection(self, conn: socket.socket, addr: tuple[str, int], spec: ListenerSpec,
                    scheme: str) -> None:  # fmt: skip
        start_ns = time.time_ns()
        rec: Recorder | None = None
        requests: list[Request] = []
        end_reason = "closed"
        try:
            tcpinfo.set_cca(conn, spec.kernel)
            rec = Recorder(conn, self.cfg.max_samples)
            with self._conn_lock:
                self._conns.add(rec)
            self.hub.add(rec)
            rec.sample()  # the accept instant itself
            conn.settimeout(self.cfg.io_timeout_s)
            end_reason = self._serve(conn, spec, scheme, rec, requests)
        except OSError as e:
            end_reason = f"error: {e}"
        finally:
            if rec is not None:
                rec.finish()
                self.hub.remove(rec)
                with self._conn_lock:
                    self._conns.discard(rec)
            with contextlib.suppress(OSError):
                conn.close()
            self._slots.release()
        if rec is None:
            log(f"{spec.cca} {addr[0]}:{addr[1]}: {end_reason}")  # e.g. the CCA vanished
            return
        if not self._worth_recording(requests):
            return
        try:
            path = write_record(
                self.gt_dir, cca=spec.cca, kernel_cca=spec.kernel, scheme=scheme,
                server=(spec.addr, (spec.https_port or 443) if scheme == "https" else spec.http_port),
                client=(addr[0], addr[1]), start_ns=start_ns, samples=rec.samples(),
                requests=requests, end_reason=end_reason,
                sample_interval_ms=self.cfg.sample_interval_ms, truncated=rec.truncated,
            )  # fmt: skip
            self.records_written += 1
            total = sum(r.bytes for r in requests)
            log(f"{spec.cca} {addr[0]}:{addr[1]} {len(requests)} req {total} B "
                f"{rec.count} samples ({end_reason}) -> {path.name}")  # fmt: skip
        except OSError as e:
            log(f"cannot write ground truth for {addr[0]}:{addr[1]}: {e}")

    def _worth_recording(self, requests: list[Request]) -> bool:
        if self.cfg.record_health:
            return bool(requests)
        return any(r.path != "/health" for r in requests)

    def _serve(self, conn: socket.socket, spec: ListenerSpec, scheme: str, rec: Recorder,
               requests: list[Request]) -> str:  # fmt: skip
        sock: socket.socket = conn
        if scheme == "https":
            assert self._tls is not None
            try:
                sock = self._tls.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError) as e:
                return f"tls handshake failed: {e}"
        rfile = sock.makefile("rb", buffering=16384)
        try:
            while True:
                try:
                    req_line, headers = _read_request(rfile)
                except ClientGone as e:
                    return str(e)
                except ValueError as e:
                    _send_simple(sock, 400, str(e), close=True)
                    return f"bad request: {e}"
                rec.active = True
                self.hub.wake()
                req, keep = self._respond(sock, spec, scheme, req_line, headers)
                requests.append(req)
                if req.status == 0:
                    return "client gone while sending"
                req.acked = self._wait_acked(rec)
                req.end_ns = time.time_ns()
                if not req.acked:
                    return "acks stalled"
                if not keep or self._stopping.is_set():
                    return "server closed"
                # Idle keep-alive time is not part of any transfer: pause sampling until the
                # next request line arrives.
                rec.sample()
                rec.active = False
                sock.settimeout(self.cfg.idle_timeout_s)
                try:
                    if not rfile.peek(1):
                        return "client closed"
                except TimeoutError:
                    return "idle timeout"
                except OSError as e:
                    return f"client gone: {e}"
                finally:
                    sock.settimeout(self.cfg.io_timeout_s)
        finally:
            rec.finish()  # the last sample is taken before the socket goes away
            rfile.close()
            if sock is not conn:  # the TLS wrapper took over the fd from `conn`
                with contextlib.suppress(OSError):
                    sock.close()

    def _respond(self, sock: socket.socket, spec: ListenerSpec, scheme: str, req_line: str,
                 headers: dict[str, str]) -> tuple[Request, bool]:  # fmt: skip
        method, target, version = req_line.split(" ", 2)
        path, _, query = target.partition("?")
        rate, after = _app_limit(query)
        run_id = headers.get("x-ccscope-run")
        if run_id is not None and not _RUN_ID_RE.match(run_id):
            run_id = None
        conn_hdr = headers.get("connection", "").lower()
        keep = (version == "HTTP/1.1" and "close" not in conn_hdr) or (
            version == "HTTP/1.0" and "keep-alive" in conn_hdr
        )
        req = Request(method=method, path=path, status=200, bytes=0, run_id=run_id,
                      start_ns=time.time_ns())  # fmt: skip
        ctype = "application/octet-stream"
        body: bytes | None = None
        size = 0
        if method not in ("GET", "HEAD"):
            req.status, body, keep = 405, b"only GET and HEAD\n", False
        elif (m := _OBJ_RE.match(path)) is not None:
            size = int(m[1])
            if size > MAX_OBJECT_BYTES:
                req.status, body = 404, f"objects are at most {MAX_OBJECT_BYTES} bytes\n".encode()
        elif path == "/large":
            size = self.cfg.large_bytes
        elif path == "/health":
            ctype, body = "application/json", self._health(sock, spec, scheme).encode()
        elif path in ("/", "/index.html"):
            ctype, body = "text/html; charset=utf-8", self._index(spec).encode()
        else:
            req.status, body = 404, b"not found\n"
        if body is not None:
            size = len(body)
            if req.status != 200:
                ctype = "text/plain; charset=utf-8"
        head = (
            f"HTTP/1.1 {req.status} {_REASONS.get(req.status, 'OK')}\r\n"
            f"Server: ccscope-lab\r\nX-CCScope-CCA: {spec.cca}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {size}\r\nCache-Control: no-store\r\n"
            f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
        ).encode()
        try:
            sock.sendall(head)
            if method != "HEAD":
                if body is not None:
                    sock.sendall(body)
                else:
                    for chunk in _paced(iter_object(size), rate, after):
                        if self._stopping.is_set():
                            raise ClientGone("server stopping")
                        sock.sendall(chunk)
                req.bytes = size  # body bytes handed to the kernel
        except (OSError, ClientGone):
            req.status = 0  # marks "not delivered": the peer vanished or we are shutting down
            keep = False
        return req, keep

    def _wait_acked(self, rec: Recorder) -> bool:
        """Until every byte written is acknowledged; give up after ack_stall_s without progress."""
        last_acked = -1
        last_progress = time.monotonic()
        while not self._stopping.is_set():
            try:
                info = rec.info()
            except OSError:
                return False
            if info.state not in (1, 8):
                # Not ESTABLISHED / CLOSE_WAIT: reset or dying, and a reset empties the queue,
                # so unacked == 0 would be a lie here.
                return False
            if info.unacked == 0 and info.notsent_bytes == 0:
                return True
            if info.bytes_acked != last_acked:
                last_acked, last_progress = info.bytes_acked, time.monotonic()
            elif time.monotonic() - last_progress > self.cfg.ack_stall_s:
                return False
            time.sleep(0.002)
        return False

    def _health(self, sock: socket.socket, spec: ListenerSpec, scheme: str) -> str:
        with self._conn_lock:
            active = len(self._conns)
        return json.dumps({
            "ok": True,
            "cca": tcpinfo.get_cca(sock),
            "expected_cca": spec.kernel,
            "name": spec.cca,
            "addr": spec.addr,
            "scheme": scheme,
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started, 3),
            "active_connections": active,
            "records_written": self.records_written,
            "cross_traffic_kbit": self.cfg.cross_traffic_kbit,
            "cross_traffic_sent_bytes": self.cross_sent_bytes,
        })  # fmt: skip

    def _index(self, spec: ListenerSpec) -> str:
        n = self.cfg.large_bytes
        return (
            '<!doctype html>\n<html><head><meta charset="utf-8">'
            f"<title>ccscope lab: {spec.cca}</title></head><body>\n"
            f"<h1>ccscope lab server ({spec.cca})</h1>\n<ul>\n"
            f'<li><a href="/large">/large</a> ({n} bytes)</li>\n'
            # Smaller objects beside it, none larger: a crawler picking the site's largest object
            # then downloads /large, so large_bytes decides how long a census measurement takes.
            + "".join(f'<li><a href="/obj/{k}">/obj/{k}</a></li>\n' for k in (100_000, 400_000) if k < n)
            + '<li><a href="/health">/health</a></li>\n</ul>\n</body></html>\n'
        )

    # -- cross traffic --

    def _cross_traffic(self) -> None:
        target = self.cfg.cross_traffic_target or os.environ.get("CCSCOPE_SHELL_OUTER_ADDR")
        if not target or not self.cfg.cross_traffic_port:
            log("cross traffic requested but no target address/port; not sending")
            return
        from ccscope.lab.crosstraffic import send_udp

        log(f"cross traffic: {self.cfg.cross_traffic_kbit:g} kbit/s UDP to "
            f"{target}:{self.cfg.cross_traffic_port}")  # fmt: skip

        def count(n: int) -> None:
            self.cross_sent_bytes += n

        send_udp(target, self.cfg.cross_traffic_port, self.cfg.cross_traffic_kbit,
                 self._stopping, on_sent=count)  # fmt: skip


def _app_limit(query: str) -> tuple[int, int]:
    """`rate` (bytes/s, 0 = no cap) and `after` (bytes sent before the cap starts) of a query."""
    q = urllib.parse.parse_qs(query)

    def num(k: str) -> int:
        v = q.get(k, ["0"])[0]
        return int(v) if v.isdigit() and len(v) < 12 else 0

    return num("rate"), num("after")


def _paced(chunks: Iterable[memoryview], rate: int, after: int) -> Iterator[memoryview]:
    """The chunks as they are, up to byte `after`; from there in 10 ms slices no faster than
    `rate` bytes/s (the application, not the CCA, decides how fast data leaves)."""
    if rate <= 0:
        yield from chunks
        return
    step = max(1, rate // 100)
    sent = 0
    t0: float | None = None
    limited = 0
    for chunk in chunks:
        off = 0
        while off < len(chunk):
            if sent < after:
                n = min(len(chunk) - off, after - sent)
            else:
                if t0 is None:
                    t0 = time.monotonic()
                n = min(len(chunk) - off, step)
                ahead = t0 + (limited + n) / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                limited += n
            yield chunk[off : off + n]
            off += n
            sent += n


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def _read_request(rfile: BinaryIO) -> tuple[str, dict[str, str]]:
    """Request line and headers (lower-cased names); ClientGone on EOF, ValueError if malformed."""
    try:
        line = rfile.readline(8193)
        while line in (b"\r\n", b"\n"):  # tolerate stray CRLF between requests (RFC 9112 2.2)
            line = rfile.readline(8193)
        if not line:
            raise ClientGone("client closed")
        if not line.endswith(b"\n"):
            raise ValueError("request line too long")
        req_line = line.decode("latin-1").strip()
        parts = req_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
            raise ValueError("malformed request line")
        headers: dict[str, str] = {}
        for _ in range(101):
            h = rfile.readline(8193)
            if not h:
                raise ClientGone("client closed mid-request")
            if h in (b"\r\n", b"\n"):
                return req_line, headers
            name, sep, value = h.decode("latin-1").partition(":")
            if not sep:
                raise ValueError("malformed header line")
            headers[name.strip().lower()] = value.strip()
        raise ValueError("too many headers")
    except TimeoutError:
        raise ClientGone("client timed out") from None
    except OSError as e:  # includes ssl.SSLError
        raise ClientGone(f"client gone: {e}") from None


def _send_simple(sock: socket.socket, status: int, text: str, *, close: bool) -> None:
    body = (text + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: {'close' if close else 'keep-alive'}\r\n\r\n"
    ).encode()
    with contextlib.suppress(OSError):
        sock.sendall(head + body)


# --- the namespace's server settings and the other programs in it ------------------------


def _sh(argv: list[str]) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {(r.stderr or r.stdout).strip()}")
    return r.stdout


def shell_device() -> str | None:
    """The lab shell's inner device (the servers' way out), from the emulator's environment."""
    idx = os.environ.get("CCSCOPE_SHELL_INDEX")
    return f"ccs{idx}i" if idx and idx.isdigit() else None


def apply_namespace_settings(cfg: ServerConfig) -> list[str]:
    """initcwnd on the namespace's routes and GSO on its device; raises RuntimeError if the kernel
    refuses (a lab must not run with settings it did not get)."""
    notes = []
    if cfg.initcwnd is not None:
        # Every route: clients reach the servers through the shell's NAT, so replies go to the
        # shell's outer address over the connected route, not the default one.
        routes = json.loads(_sh(["ip", "-j", "route", "show"]) or "[]")
        if not routes:
            raise RuntimeError("initcwnd: the namespace has no routes")
        for r in routes:
            argv = ["ip", "route", "change", r["dst"]]
            for key, opt in (("gateway", "via"), ("dev", "dev"), ("protocol", "proto"), ("scope", "scope"),
                             ("prefsrc", "src")):  # fmt: skip
                if r.get(key):
                    argv += [opt, str(r[key])]
            _sh([*argv, "initcwnd", str(cfg.initcwnd)])
        shown = "; ".join(_sh(["ip", "route", "show"]).strip().splitlines())
        notes.append(f"initcwnd {cfg.initcwnd} on every route: {shown}")
    if cfg.gso is not None:
        dev = shell_device()
        if dev is None:
            raise RuntimeError("gso: not inside a ccscope-link shell (no CCSCOPE_SHELL_INDEX)")
        _sh(["ethtool", "-K", dev, "gso", "on" if cfg.gso else "off"])
        state = [ln.strip() for ln in _sh(["ethtool", "-k", dev]).splitlines()
                 if ln.startswith(("generic-segmentation", "tcp-segmentation"))]  # fmt: skip
        notes.append(f"{dev}: {'; '.join(state)}")
    return notes


def start_children(cfg: ServerConfig) -> list[subprocess.Popen[bytes]]:
    """nginx and its ground-truth sampler, and the cross-traffic sources, as configured."""
    out: list[subprocess.Popen[bytes]] = []
    here = Path(cfg.nginx_dir or cfg.groundtruth_dir).parent
    if cfg.nginx_port:
        from ccscope.lab import nginx

        ndir = Path(cfg.nginx_dir or here / "nginx")
        addrs = [sp.addr for sp in cfg.servers]
        conf, access = nginx.write_conf(ndir, addrs, Path(cfg.nginx_root or nginx.DEFAULT_OBJECT_ROOT),
                                        port=cfg.nginx_port)  # fmt: skip
        access.unlink(missing_ok=True)
        out.append(nginx.start(conf, {sp.addr: sp.kernel for sp in cfg.servers}, mss=cfg.mss,
                               log=ndir / "nginx.out"))  # fmt: skip
        cmap = ",".join(f"{sp.addr}={sp.cca}" for sp in cfg.servers)
        out.append(_child([sys.executable, "-m", "ccscope.lab.diag", "sample", "--groundtruth",
                           cfg.groundtruth_dir, "--ports", str(cfg.nginx_port), "--map", cmap,
                           "--access-log", str(access)], ndir / "diag.log"))  # fmt: skip
    if cfg.cross_addr and (cfg.cross_udp_port or cfg.cross_tcp_ports):
        tcp = ",".join(f"{c}={p}" for c, p in (cfg.cross_tcp_ports or {}).items())
        out.append(_child([sys.executable, "-m", "ccscope.lab.crosstraffic", "serve", "--addr",
                           cfg.cross_addr, "--udp-port", str(cfg.cross_udp_port), "--tcp", tcp],
                          here / "cross-sources.log"))  # fmt: skip
    time.sleep(0.3)
    for p in out:
        if p.poll() is not None:
            raise RuntimeError(f"{p.args[0] if isinstance(p.args, list) else p.args} exited at start "
                               f"(status {p.returncode}); see the logs in {here}")  # fmt: skip
    return out


def _child(argv: list[str], logf: Path) -> subprocess.Popen[bytes]:
    logf.parent.mkdir(parents=True, exist_ok=True)
    with logf.open("ab") as f:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)


def _stop_children(children: list[subprocess.Popen[bytes]]) -> None:
    for p in children:
        with contextlib.suppress(OSError):
            p.terminate()
    for p in children:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccscope.lab.server")
    ap.add_argument("--config", required=True, help="server config JSON (written by `lab up`)")
    args = ap.parse_args(argv)
    try:
        cfg = ServerConfig.load(args.config)
    except (OSError, ValueError, TypeError, KeyError) as e:
        log(f"error: unreadable config {args.config}: {e}")
        return 2
    # The sampler must not wait a whole 5 ms GIL switch interval behind a busy handler thread.
    sys.setswitchinterval(0.0005)
    block()  # build the content block now, not while the first connection is being sampled
    children: list[subprocess.Popen[bytes]] = []
    try:
        for note in apply_namespace_settings(cfg):
            log(note)
        server = LabServer(cfg)
        server.bind()
        children = start_children(cfg)
    except (OSError, ssl.SSLError, RuntimeError) as e:
        log(f"error: {e}")
        _stop_children(children)
        return 2
    done = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    log(f"ready: {len(cfg.servers)} servers, ground truth in {cfg.groundtruth_dir}")
    while not done.wait(1.0):
        pass
    log("stopping")
    _stop_children(children)
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
