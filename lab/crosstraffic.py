"""Cross traffic across an emulated path: constant-rate UDP and elastic TCP flows.

Two arrangements:

* the lab's own (`ccscope lab up --cross-traffic KBIT`): a sender thread of the lab server sends
  UDP to a sink in the root namespace, so it queues at the lab path's rate limit;
* the condition space's (classifier/conditions.py): `serve` runs in the lab's namespace, on its
  infrastructure address, a TCP source per CCA (reno/cubic/bbr: it sends until the client
  closes) and a UDP source (it streams to whoever asked, at the rate asked, while they keep
  asking). `CrossTraffic` runs the clients inside a draw's Internet-path shell: elastic flows
  that switch on and off with exponentially distributed durations, and one UDP stream, so both
  share that shell's bottleneck with the measured download. Every random duration comes from
  the job's seed.

UDP is unresponsive on purpose: it takes a fixed share of the bottleneck.

`python -m ccscope.lab.crosstraffic sink --bind ADDR --port N --stats FILE` runs the sink;
`python -m ccscope.lab.crosstraffic serve --addr A --udp-port N --tcp reno=9001,...` the sources.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PAYLOAD = 1200  # bytes per datagram: fits any MTU >= 1280 without fragmenting
UDP_HOLD_S = 3.0  # a UDP stream stops this long after its client's last request
_REQ = struct.Struct("!4sd")  # b"ccsx", rate in kbit/s


def send_udp(
    host: str,
    port: int,
    kbit: float,
    stop: threading.Event,
    on_sent: Callable[[int], None] | None = None,
) -> None:
    """Send PAYLOAD-byte datagrams at `kbit` kbit/s (IP+UDP headers included) until `stop`."""
    wire = PAYLOAD + 28
    period = wire * 8 / (kbit * 1000.0)
    data = bytes(PAYLOAD)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        next_t = time.monotonic()
        while not stop.is_set():
            with contextlib.suppress(OSError):  # sink not up yet, queue full: keep the schedule
                s.sendto(data, (host, port))
                if on_sent:
                    on_sent(PAYLOAD)
            next_t += period
            now = time.monotonic()
            if now - next_t > 0.1:  # fell far behind: restart the schedule instead of bursting
                next_t = now
            elif next_t > now:
                stop.wait(next_t - now)
    finally:
        s.close()


def run_sink(bind: str, port: int, stats: Path | None) -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.bind((bind, port))
    s.settimeout(0.5)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    total_bytes = total_pkts = 0
    window_bytes = 0
    t0 = last = time.monotonic()
    rate_kbit = 0.0
    while not done.is_set():
        try:
            n = s.recv(65536)
            total_bytes += len(n)
            total_pkts += 1
            window_bytes += len(n)
        except TimeoutError:
            pass
        now = time.monotonic()
        if now - last >= 1.0:
            rate_kbit = window_bytes * 8 / 1000.0 / (now - last)  # payload rate
            window_bytes, last = 0, now
            if stats is not None:
                doc = {
                    "bytes": total_bytes,
                    "packets": total_pkts,
                    "rate_kbit": round(rate_kbit, 1),
                    "uptime_s": round(now - t0, 1),
                    "updated": time.time(),
                }
                tmp = stats.with_name(stats.name + ".tmp")
                tmp.write_text(json.dumps(doc))
                tmp.replace(stats)
    s.close()
    return 0


# --- sources (in the lab's namespace) ---------------------------------------------------


def serve(addr: str, udp_port: int, tcp: dict[str, int], stop: threading.Event) -> None:
    """TCP sources (one listener per CCA: each connection gets bytes until it closes) and the
    UDP source, until `stop`."""
    from ccscope.lab.tcpinfo import set_cca

    threads = []
    for cca, port in tcp.items():
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        set_cca(ls, cca)
        ls.bind((addr, port))
        ls.listen(64)
        ls.settimeout(0.5)
        threads.append(threading.Thread(target=_tcp_accept, args=(ls, stop), daemon=True))
    if udp_port:
        us = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        us.bind((addr, udp_port))
        us.settimeout(0.5)
        threads.append(threading.Thread(target=_udp_source, args=(us, stop), daemon=True))
    for t in threads:
        t.start()
    stop.wait()


def _tcp_accept(ls: socket.socket, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            c, _ = ls.accept()
        except TimeoutError:
            continue
        except OSError:
            time.sleep(0.05)
            continue
        threading.Thread(target=_tcp_send, args=(c, stop), daemon=True).start()


def _tcp_send(c: socket.socket, stop: threading.Event) -> None:
    data = bytes(256 * 1024)
    c.settimeout(30.0)
    with c, contextlib.suppress(OSError):
        while not stop.is_set():
            c.sendall(data)


def _udp_source(us: socket.socket, stop: threading.Event) -> None:
    streams: dict[tuple[str, int], list[float]] = {}  # client -> [kbit, last request]
    lock = threading.Lock()
    while not stop.is_set():
        try:
            msg, peer = us.recvfrom(64)
        except TimeoutError:
            continue
        except OSError:
            continue
        if len(msg) != _REQ.size:
            continue
        magic, kbit = _REQ.unpack(msg)
        if magic != b"ccsx" or not 0 < kbit <= 1e6:
            continue
        with lock:
            new = peer not in streams
            streams[peer] = [kbit, time.monotonic()]
        if new:
            threading.Thread(target=_udp_stream, args=(us, peer, streams, lock, stop), daemon=True).start()


def _udp_stream(us: socket.socket, peer: tuple[str, int], streams: dict[tuple[str, int], list[float]],
                lock: threading.Lock, stop: threading.Event) -> None:  # fmt: skip
    data = bytes(PAYLOAD)
    next_t = time.monotonic()
    while not stop.is_set():
        with lock:
            kbit, last = streams[peer]
            if time.monotonic() - last > UDP_HOLD_S:
                del streams[peer]
                return
        with contextlib.suppress(OSError):
            us.sendto(data, peer)
        next_t += (PAYLOAD + 28) * 8 / (kbit * 1000.0)
        now = time.monotonic()
        if now - next_t > 0.1:
            next_t = now
        elif next_t > now:
            stop.wait(next_t - now)


# --- clients (inside a draw's Internet-path shell) ----------------------------------------


@dataclass(frozen=True)
class FlowSpec:
    cca: str
    on_mean_s: float
    off_mean_s: float


@dataclass
class CrossTraffic:
    """The clients of one job's cross traffic; `start()` launches them, `stop()` ends them and
    returns what they received."""

    addr: str
    tcp_ports: dict[str, int]
    udp_port: int
    udp_kbit: float
    flows: Sequence[FlowSpec]
    seed: int
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=lambda: {"tcp_bytes": 0, "tcp_on_periods": 0,
                                                              "udp_bytes": 0, "errors": 0})  # fmt: skip

    def start(self) -> None:
        for i, f in enumerate(self.flows):
            rng = random.Random(self.seed * 1000 + i)
            self._threads.append(threading.Thread(target=self._elastic, args=(f, rng), daemon=True))
        if self.udp_kbit > 0:
            self._threads.append(threading.Thread(target=self._udp, daemon=True))
        for t in self._threads:
            t.start()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        return dict(self.stats)

    def _elastic(self, f: FlowSpec, rng: random.Random) -> None:
        def exp(mean: float) -> float:
            return -mean * math.log(1.0 - rng.random())

        # start anywhere in the cycle: a flow is on at t=0 with its long-run probability
        on = rng.random() < f.on_mean_s / (f.on_mean_s + f.off_mean_s)
        while not self._stop.is_set():
            if not on:
                self._stop.wait(exp(f.off_mean_s))
                on = True
                continue
            until = time.monotonic() + exp(f.on_mean_s)
            try:
                with socket.create_connection((self.addr, self.tcp_ports[f.cca]), timeout=5) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                    self.stats["tcp_on_periods"] += 1
                    while not self._stop.is_set():
                        left = until - time.monotonic()
                        if left <= 0:
                            break
                        s.settimeout(min(left, 1.0))
                        try:
                            n = len(s.recv(1 << 16))
                        except TimeoutError:
                            continue
                        if n == 0:
                            break
                        self.stats["tcp_bytes"] += n
            except OSError:
                self.stats["errors"] += 1
                self._stop.wait(1.0)
            on = False

    def _udp(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        s.settimeout(0.2)
        req = _REQ.pack(b"ccsx", self.udp_kbit)
        last = 0.0
        with s:
            while not self._stop.is_set():
                now = time.monotonic()
                if now - last > 1.0:  # keep asking, or the source stops after UDP_HOLD_S
                    with contextlib.suppress(OSError):
                        s.sendto(req, (self.addr, self.udp_port))
                    last = now
                try:
                    self.stats["udp_bytes"] += len(s.recv(2048))
                except (TimeoutError, OSError):
                    continue


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccscope.lab.crosstraffic")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("sink", help="receive and count cross traffic")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--stats", help="JSON file updated every second")
    p = sub.add_parser("send", help="send cross traffic (for manual use)")
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--kbit", type=float, required=True)
    p = sub.add_parser("serve", help="TCP and UDP cross-traffic sources (in the lab's namespace)")
    p.add_argument("--addr", required=True)
    p.add_argument("--udp-port", type=int, default=0)
    p.add_argument("--tcp", default="", help="cca=port,... (one TCP source per CCA)")
    args = ap.parse_args(argv)
    if args.cmd == "serve":
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        tcp = {k: int(v) for k, v in (kv.split("=", 1) for kv in args.tcp.split(",") if kv)}
        serve(args.addr, args.udp_port, tcp, stop)
        return 0
    if args.cmd == "sink":
        return run_sink(args.bind, args.port, Path(args.stats) if args.stats else None)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        send_udp(args.host, args.port, args.kbit, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
