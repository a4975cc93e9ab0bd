"""Constant-rate UDP cross traffic across the lab's emulated path.

The sender runs inside the server namespace (a thread of the lab server) and sends to a sink in
the root namespace, so its packets queue at the same emulated rate limit as the servers'
downloads. UDP is unresponsive on purpose: it takes a fixed share of the bottleneck that the
CCA under test has to live with.

`python -m ccscope.lab.crosstraffic sink --bind ADDR --port N --stats FILE` runs the sink.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

PAYLOAD = 1200  # bytes per datagram: fits any MTU >= 1280 without fragmenting


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
    args = ap.parse_args(argv)
    if args.cmd == "sink":
        return run_sink(args.bind, args.port, Path(args.stats) if args.stats else None)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        send_udp(args.host, args.port, args.kbit, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
