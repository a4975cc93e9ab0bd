"""The lab's HTTP/3 server on aioquic (reno or cubic), writing a qlog per connection.

Same routes and flags as the quiche server (lab/quic/quiche-server): `/obj/<bytes>`, `/large`,
`/health`, `/`; `--cc`, `--qlog-dir`, `--runs-dir`. aioquic's QuicFileLogger writes
`<odcid>.qlog` when a connection ends; its `recovery:metrics_updated` events (bytes_in_flight,
cwnd) are the ground truth. A request carrying `x-ccscope-run: ID` leaves `<runs-dir>/<ID>.json`
naming that qlog.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ProtocolNegotiated, QuicEvent
from aioquic.quic.logger import QuicFileLogger

MAX_OBJECT = 1 << 30
CHUNK = 16384
_PATTERN = bytes(ord("a") + i % 26 for i in range(CHUNK))
_RUN_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_OBJ = re.compile(r"^/obj/(\d{1,10})$")


def log(msg: str) -> None:
    sys.stderr.write(f"{time.time():.3f} aioquic-server: {msg}\n")
    sys.stderr.flush()


class Options:
    def __init__(self, a: argparse.Namespace) -> None:
        self.cc: str = a.cc
        self.label: str = a.label or f"aioquic:{a.cc}"
        self.qlog_dir: str | None = a.qlog_dir
        self.runs_dir: str | None = a.runs_dir
        self.large: int = a.large


class H3Server(QuicConnectionProtocol):
    opts: Options

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._h3: H3Connection | None = None
        self._started = time.time()

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ProtocolNegotiated) and event.alpn_protocol in H3_ALPN:
            self._h3 = H3Connection(self._quic)
        if self._h3 is not None:
            for ev in self._h3.handle_event(event):
                self._h3_event(ev)

    def _h3_event(self, ev: H3Event) -> None:
        if not isinstance(ev, HeadersReceived) or self._h3 is None:
            return
        hdrs = {k.decode("latin-1"): v.decode("latin-1") for k, v in ev.headers}
        path = hdrs.get(":path", "/").split("?", 1)[0]
        run_id = hdrs.get("x-ccscope-run", "")
        if run_id and _RUN_ID.match(run_id):
            self._record(run_id)
        status, length, body = self._route(path)
        out = [(b":status", str(status).encode()), (b"server", b"ccscope-aioquic-server"),
               (b"content-length", str(length).encode())]  # fmt: skip
        self._h3.send_headers(ev.stream_id, out, end_stream=length == 0)
        if body is not None:
            self._h3.send_data(ev.stream_id, body, end_stream=True)
        else:
            # aioquic buffers what it is given and sends as its congestion window allows
            left = length
            while left > 0:
                n = min(left, CHUNK)
                left -= n
                self._h3.send_data(ev.stream_id, _PATTERN[:n], end_stream=left == 0)
        self.transmit()

    def _route(self, path: str) -> tuple[int, int, bytes | None]:
        m = _OBJ.match(path)
        if m and int(m.group(1)) <= MAX_OBJECT:
            return 200, int(m.group(1)), None
        if path == "/large":
            return 200, self.opts.large, None
        if path == "/health":
            b = json.dumps({"stack": "aioquic", "cca": self.opts.cc, "label": self.opts.label,
                            "pid": os.getpid()}).encode() + b"\n"  # fmt: skip
            return 200, len(b), b
        if path == "/":
            b = f'<html><body><h1>{self.opts.label}</h1><a href="/large">large</a></body></html>\n'.encode()
            return 200, len(b), b
        return 404, 10, b"not found\n"

    def _record(self, run_id: str) -> None:
        if not self.opts.runs_dir:
            return
        odcid = self._quic.original_destination_connection_id.hex()
        qlog = str(Path(self.opts.qlog_dir) / f"{odcid}.qlog") if self.opts.qlog_dir else None
        peer = self._quic._network_paths[0].addr if self._quic._network_paths else ("?", 0)
        doc = {"run_id": run_id, "stack": "aioquic", "cca": self.opts.cc, "label": self.opts.label,
               "qlog": qlog, "peer": f"{peer[0]}:{peer[1]}", "started": self._started}  # fmt: skip
        path = Path(self.opts.runs_dir) / f"{run_id}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(path)


async def run(a: argparse.Namespace) -> None:
    host, _, port = a.listen.rpartition(":")
    cfg = QuicConfiguration(
        is_client=False,
        alpn_protocols=H3_ALPN,
        congestion_control_algorithm=a.cc,
        max_datagram_size=1200,
        idle_timeout=30.0,
    )
    cfg.load_cert_chain(a.cert, a.key)
    if a.qlog_dir:
        cfg.quic_logger = QuicFileLogger(a.qlog_dir)
    H3Server.opts = Options(a)
    server = await serve(host.strip("[]"), int(port), configuration=cfg, create_protocol=H3Server)
    log(f"listening on {a.listen} ({H3Server.opts.label}, cc {a.cc})")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccscope.lab.quic.aioquic_server")
    ap.add_argument("--listen", required=True, help="ADDR:PORT")
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--cc", default="cubic", choices=["reno", "cubic"])
    ap.add_argument("--label")
    ap.add_argument("--qlog-dir")
    ap.add_argument("--runs-dir")
    ap.add_argument("--large", type=int, default=1_000_000)
    asyncio.run(run(ap.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
