"""The HTTP(S) download client that runs inside the delay shell.

Run as `python -m ccscope.capture.fetch URL ...`; prints one JSON line describing the download.
It is deliberately small and strict: it resolves and vets the target itself (the shell may see
different DNS than the caller), connects to the vetted address, follows a bounded number of
redirects (each vetted again), caps the body size and the wall time, and discards the body.
The connection's source port is reported so the capture can be matched to this download.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import resource
import signal
import socket
import ssl
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urljoin

from ccscope.errors import CCScopeError, TargetRefused
from ccscope.identity import USER_AGENT
from ccscope.lab.tcpinfo import TCP_INFO, TCP_INFO_LEN, parse_tcp_info
from ccscope.targets import Target, TargetPolicy

MAX_REDIRECTS = 5
# After a stop, the process stays this long after closing its socket: the close sends the
# server a reset (unread data), which must cross the shell's delay line before the shell, seeing
# its command exit, tears the link down. Else the server sends on into the void until its
# retransmissions give up, and the lab's ground truth of the connection waits for that.
STOP_LINGER_S = 1.0
MAX_HEADER_BYTES = 64 * 1024
CHUNK = 64 * 1024
# The body is read once this much is queued (or the peer has closed, or the deadline comes):
# at a profile's 100-byte MTU every packet would otherwise wake the client for a poll and a TLS
# read of part of a record, most of the client's CPU. The kernel ACKs each packet as it comes
# whatever the client does, and 8 KB held back is a small part of the receive buffer (128 KB
# at least): the window the server sees is not narrowed enough to limit it.
BODY_LOWAT = 8 * 1024


@dataclass
class FetchResult:
    url: str
    final_url: str = ""
    status: int = 0
    bytes: int = 0
    seconds: float = 0.0
    remote: str = ""
    remote_port: int = 0
    local_port: int = 0
    redirects: list[str] = field(default_factory=list)
    truncated: bool = False  # stopped at max_bytes or the deadline, or the body ended short
    stopped: bool = False  # ended early on SIGTERM (adaptive stopping): the body so far counts
    # The evidence cap (adaptive stopping's StoppingRule.cap_s), when asked for: the path's RTT
    # as this connection measured it and the seconds the download was then allowed.
    rtt_ms: float | None = None
    cap_s: float | None = None
    error: str | None = None
    # What kind of failure, for whoever decides to retry: target_refused, dns_temporary,
    # connection_refused, timeout, unreachable, network, tls, protocol, redirects (None when
    # there was no error).
    error_kind: str | None = None


class StopDownload(CCScopeError):
    """SIGTERM arrived: the measurement has seen enough (adaptive stopping)."""

    kind = "stopped"


def _on_sigterm(_signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the report must still get out
    raise StopDownload("stopped on request before the body")


class FetchError(CCScopeError):
    def __init__(self, message: str, kind: str = "protocol") -> None:
        super().__init__(message)
        self.kind = kind


def os_error_kind(e: BaseException) -> str:
    """The retry-relevant kind of a socket error."""
    if isinstance(e, ssl.SSLError):
        return "tls"
    if isinstance(e, ConnectionRefusedError):
        return "connection_refused"
    if isinstance(e, TimeoutError):
        return "timeout"
    if isinstance(e, OSError) and e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return "unreachable"
    return "network"


def _connect(target: Target, deadline: float, cafile: str | None, cadata: str | None = None) -> socket.socket:
    last: Exception | None = None
    for addr in target.addresses:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(max(0.1, min(10.0, deadline - time.monotonic())))
        try:
            sock.connect((addr, target.port))
        except OSError as e:
            sock.close()
            last = e
            continue
        if target.scheme == "https":
            ctx = ssl.create_default_context(cafile=cafile, cadata=cadata)
            try:
                return ctx.wrap_socket(sock, server_hostname=target.host)
            except (OSError, ssl.SSLError) as e:
                sock.close()
                kind = "tls" if isinstance(e, ssl.SSLError) else os_error_kind(e)
                raise FetchError(f"TLS handshake with {target.host} failed: {e}", kind) from None
        return sock
    kind = os_error_kind(last) if last is not None else "network"
    raise FetchError(f"cannot connect to {target.host}:{target.port}: {last}", kind)


def path_rtt_s(sock: socket.socket) -> float | None:
    """The connection's round-trip time as the kernel measured it (the handshake's and the
    request's samples): its minimum where the kernel reports one, else the smoothed one."""
    try:
        info = parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, TCP_INFO_LEN))
    except (OSError, ValueError):
        return None
    for us in (info.min_rtt_us, info.rtt_us):
        if 0 < us < 0xFFFFFFFF:  # ~0U: no sample yet
            return us / 1e6
    return None


def _set_lowat(sock: socket.socket, n: int) -> None:
    # where the option is refused, every byte wakes the reader, as without it
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, n)


def _drain(sock: socket.socket, limit: int) -> int:
    """The bytes already here when the deadline came (fewer than the low-water mark): counted,
    not left unread in the socket."""
    _set_lowat(sock, 1)
    sock.settimeout(0.0)
    got = 0
    while got < limit:
        try:
            chunk = sock.recv(min(CHUNK, limit - got))
        except OSError:  # nothing more is here (SSL's want-read and a timeout are OSErrors too)
            break
        if not chunk:
            break
        got += len(chunk)
    return got


def _content_length(headers: dict[str, str]) -> int | None:
    """The declared body length; None when absent or not a plain non-negative integer."""
    v = headers.get("content-length", "")
    return int(v) if v.isdigit() else None


def _read_head(sock: socket.socket, deadline: float) -> tuple[int, dict[str, str], bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEADER_BYTES:
            raise FetchError("response headers exceed 64 KiB")
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = sock.recv(8192)
        if not chunk:
            raise FetchError("connection closed before the response headers", "network")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise FetchError(f"malformed status line {lines[0][:80]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        k, sep, v = line.partition(":")
        if sep:
            headers[k.strip().lower()] = v.strip()
    return status, headers, rest


def fetch(
    url: str,
    *,
    lab: bool = False,
    cafile: str | None = None,
    cadata: str | None = None,
    timeout: float = 60.0,
    max_bytes: int = 16 * 1024 * 1024,
    run_id: str | None = None,
    user_agent: str = USER_AGENT,
    policy: TargetPolicy | None = None,
    cap_rtts: float | None = None,
    cap_min_s: float = 0.0,
) -> FetchResult:
    """Download `url` once, following up to MAX_REDIRECTS redirects, each hop vetted by
    `policy` (default: lab mode's if `lab` or CCSCOPE_LAB=1, else public addresses only).
    `cap_rtts`: the evidence cap; once the response head is in, the download may run no longer
    than max(`cap_min_s`, `cap_rtts` x the connection's RTT) from the start (nor `timeout`)."""
    pol = policy or TargetPolicy.from_mode(lab)
    res = FetchResult(url=url)
    start = time.monotonic()
    deadline = start + timeout
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        target = pol.resolve(current)
        sock = _connect(target, deadline, cafile, cadata)
        try:
            res.remote, res.remote_port = sock.getpeername()[:2]
            res.local_port = sock.getsockname()[1]
            host_hdr = target.host if target.port in (80, 443) else f"{target.host}:{target.port}"
            req = [
                f"GET {target.path} HTTP/1.1",
                f"Host: {host_hdr}",
                f"User-Agent: {user_agent}",
                "Accept: */*",
                "Accept-Encoding: identity",  # compression would shrink the transfer
                "Connection: close",
            ]
            if run_id:
                req.append(f"X-CCScope-Run: {run_id}")
            sock.sendall(("\r\n".join(req) + "\r\n\r\n").encode())
            status, headers, body = _read_head(sock, deadline)
            res.status = status
            if cap_rtts is not None:
                rtt = path_rtt_s(sock)
                cap = max(cap_min_s, cap_rtts * rtt) if rtt is not None else cap_min_s
                res.rtt_ms = round(rtt * 1e3, 3) if rtt is not None else None
                res.cap_s = round(min(cap, timeout), 3)
                deadline = min(deadline, start + cap)
            if status in (301, 302, 303, 307, 308) and "location" in headers:
                current = urljoin(current, headers["location"])
                res.redirects.append(current)
                continue
            res.bytes = len(body)
            _set_lowat(sock, BODY_LOWAT)
            try:
                while res.bytes < max_bytes:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        res.truncated = True
                        res.bytes += _drain(sock, max_bytes - res.bytes)
                        break
                    sock.settimeout(left)
                    try:
                        chunk = sock.recv(CHUNK)
                    except TimeoutError:
                        res.truncated = True
                        res.bytes += _drain(sock, max_bytes - res.bytes)
                        break
                    if not chunk:
                        break
                    res.bytes += len(chunk)
                else:
                    res.truncated = True
            except StopDownload:
                res.truncated = res.stopped = True
            expected = _content_length(headers)
            if expected is not None and res.bytes < expected:
                # the server closed before the body was complete (a send timeout in a long loss
                # recovery, say): the trace is a cut download, not a whole one
                res.truncated = True
            res.final_url = current
            res.seconds = time.monotonic() - start
            return res
        finally:
            sock.close()
    raise FetchError(f"more than {MAX_REDIRECTS} redirects", "redirects")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ccscope-fetch", description=__doc__)
    ap.add_argument("url")
    ap.add_argument("--lab", action="store_true", help="also allow the lab's own prefixes (198.18.0.0/16)")
    ap.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="CIDR",
        help="also allow this network (repeatable; test servers on loopback)",
    )
    ap.add_argument("--cacert", help="CA bundle file to trust instead of the system's (the lab CA)")
    ap.add_argument("--ca-pem", help="the same, as PEM text (a client that cannot read the file)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--max-bytes", type=int, default=16 * 1024 * 1024)
    ap.add_argument("--run-id")
    ap.add_argument(
        "--cap-rtts",
        type=float,
        help="the evidence cap: stop after this many of the connection's RTTs (at least --cap-min-s)",
    )
    ap.add_argument("--cap-min-s", type=float, default=0.0)
    args = ap.parse_args(argv)
    if args.cap_rtts is not None and not 0 < args.cap_rtts < float("inf"):
        ap.error("--cap-rtts must be a positive number of round trips")
    if not 0 <= args.cap_min_s < float("inf"):
        ap.error("--cap-min-s must be a non-negative number of seconds")
    out: dict[str, Any]
    # A SIGTERM mid-body ends the download as a cut one (exit 0, `stopped`), not as a failure.
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        r = fetch(
            args.url,
            lab=args.lab,
            cafile=args.cacert,
            cadata=args.ca_pem,
            timeout=args.timeout,
            max_bytes=args.max_bytes,
            run_id=args.run_id,
            policy=TargetPolicy.from_mode(args.lab).widened(*args.allow),
            cap_rtts=args.cap_rtts,
            cap_min_s=args.cap_min_s,
        )
        out = asdict(r)
        code = 0 if 200 <= r.status < 300 else 4
    except StopDownload as e:
        out = asdict(FetchResult(url=args.url, error=str(e), error_kind=e.kind, stopped=True))
        code = 4
    except TargetRefused as e:
        out, code = asdict(FetchResult(url=args.url, error=f"refused: {e}", error_kind=e.kind)), 3
    except FetchError as e:
        out, code = asdict(FetchResult(url=args.url, error=str(e), error_kind=e.kind)), 4
    except (CCScopeError, OSError, ssl.SSLError) as e:
        kind = os_error_kind(e) if isinstance(e, OSError) else "protocol"
        out, code = asdict(FetchResult(url=args.url, error=str(e) or type(e).__name__, error_kind=kind)), 4
    # The client's own CPU (interpreter start-up and imports included): what one download costs
    # the measuring host beyond the shell, read by bench/scale's CPU breakdown.
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out["cpu_s"] = round(ru.ru_utime + ru.ru_stime, 4)
    print(json.dumps(out), flush=True)
    if out.get("stopped"):
        time.sleep(STOP_LINGER_S)
    return code


if __name__ == "__main__":
    sys.exit(main())
