"""Real HTTP servers on 127.0.0.1 for crawler and API tests (reached through LOOPBACK)."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ccscope.targets import TargetPolicy

# Neither public nor lab mode reaches loopback: tests let their local servers in by name.
LOOPBACK = TargetPolicy.public().widened("127.0.0.0/8")


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    size: int | None = None  # served as `size` bytes of b"x" (big objects without holding them twice)
    content_type: str = "application/octet-stream"
    headers: dict[str, str] = field(default_factory=dict)
    head_allowed: bool = True
    endless: bool = False


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, Route]
    log: list[tuple[str, str, str]]

    def log_message(self, *_a: object) -> None:
        pass

    def _serve(self, head: bool) -> None:
        self.log.append((self.command, self.path, self.headers.get("User-Agent", "")))
        r = self.routes.get(self.path.split("?")[0])
        if r is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if head and not r.head_allowed:
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = r.body if r.size is None else b"x" * r.size
        rng = self.headers.get("Range", "")
        status = r.status
        if rng == "bytes=0-0" and status == 200 and not r.endless:
            status, sent = 206, body[:1]
        else:
            sent = body
        self.send_response(status)
        self.send_header("Content-Type", r.content_type)
        for k, v in r.headers.items():
            self.send_header(k, v)
        if status == 206:
            self.send_header("Content-Range", f"bytes 0-0/{len(body)}")
        if not r.endless:
            self.send_header("Content-Length", str(len(sent)))
        self.end_headers()
        if head:
            return
        try:
            if r.endless:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    self.wfile.write(b"<p>" + b"y" * 8192)
            else:
                self.wfile.write(sent)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)


@dataclass
class Site:
    base: str
    port: int
    log: list[tuple[str, str, str]]
    routes: dict[str, Route]


@contextmanager
def serve(routes: dict[str, Route], tls: ssl.SSLContext | None = None) -> Iterator[Site]:
    log: list[tuple[str, str, str]] = []
    handler = type("H", (_Handler,), {"routes": routes, "log": log})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    if tls is not None:
        srv.socket = tls.wrap_socket(srv.socket, server_side=True)
    port = int(srv.server_address[1])
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        scheme = "https" if tls is not None else "http"
        yield Site(f"{scheme}://127.0.0.1:{port}/", port, log, routes)
    finally:
        srv.shutdown()
        srv.server_close()
