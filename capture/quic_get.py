"""The HTTP/3 download client that runs inside the delay shell (QUIC's twin of fetch.py).

Run as `python -m ccscope.capture.quic_get URL ...`; prints one JSON line describing the
download. The target is resolved and vetted here, through the same policy as the TCP client
(ccscope.targets), and the quiche client (`ccscope-quic-get`, capture/quic) is handed the vetted
address, never a name: it cannot resolve anything itself. A redirect ends that connection; the
next hop is vetted again and fetched over a new one (at most MAX_REDIRECTS). The body is
discarded; the byte cap and the deadline hold across hops.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from ccscope.capture.binaries import find_built
from ccscope.capture.fetch import USER_AGENT
from ccscope.errors import CCScopeError, TargetRefused
from ccscope.targets import resolve_target

MAX_REDIRECTS = 5
_REPO_BINARY = Path(__file__).resolve().parent / "quic" / "target" / "release" / "ccscope-quic-get"


class QuicClientMissing(CCScopeError):
    pass


def client_binary() -> Path:
    """The quiche client: $CCSCOPE_QUIC_GET, the repository build, or one on PATH."""
    from ccscope.settings import settings

    found = find_built("ccscope-quic-get", settings().quic_get, _REPO_BINARY)
    if found is None:
        raise QuicClientMissing(
            "the QUIC client is not built: run `make setup` (deploy/install.sh builds capture/quic)"
        )
    return found


@dataclass
class QuicResult:
    url: str
    final_url: str = ""
    status: int = 0
    bytes: int = 0
    seconds: float = 0.0
    remote: str = ""
    remote_port: int = 0
    local_port: int = 0
    redirects: list[str] = field(default_factory=list)
    truncated: bool = False
    error: str | None = None
    error_kind: str | None = None  # version_negotiation, handshake_timeout, no_h3, tls, refused, ...
    transport: str = "quic"
    alt_svc: str | None = None
    quic: dict[str, Any] = field(default_factory=dict)  # the client's own report of the last hop


def quic_get(
    url: str,
    *,
    lab: bool = False,
    cafile: str | None = None,
    timeout: float = 60.0,
    handshake_timeout: float = 10.0,
    max_bytes: int = 16 * 1024 * 1024,
    run_id: str | None = None,
    qlog: str | None = None,
    user_agent: str = USER_AGENT,
    min_rounds: float = 0.0,
    cap_rtts: float = 0.0,
    cap_min_s: float = 0.0,
) -> QuicResult:
    res = QuicResult(url=url)
    binary = client_binary()
    start = time.monotonic()
    current = url
    for hop in range(MAX_REDIRECTS + 1):
        target = resolve_target(current, lab=lab)
        if target.scheme != "https":
            raise TargetRefused(f"HTTP/3 needs an https URL, not {target.scheme}://")
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            res.truncated = True
            res.error, res.error_kind = "deadline passed while following redirects", "timeout"
            return res
        addr = target.addresses[0]
        hostport = f"[{addr}]:{target.port}" if ":" in addr else f"{addr}:{target.port}"
        authority = target.host if target.port == 443 else f"{target.host}:{target.port}"
        cmd = [
            str(binary), "--connect", hostport, "--sni", target.host, "--authority", authority,
            "--path", target.path, "--timeout", f"{left:.3f}",
            "--handshake-timeout", f"{min(handshake_timeout, left):.3f}",
            "--max-bytes", str(max(1, max_bytes - res.bytes)), "--user-agent", user_agent,
        ]  # fmt: skip
        if cafile:
            cmd += ["--cafile", cafile]
        if min_rounds > 0:
            cmd += ["--min-rounds", f"{min_rounds:g}"]
        if cap_rtts > 0 or cap_min_s > 0:
            # the cap counts from the first request's start: later hops have what is left
            spent = time.monotonic() - start
            cmd += ["--cap-rtts", f"{cap_rtts:g}", "--cap-min-s", f"{max(0.0, cap_min_s - spent):.3f}"]
        if run_id:
            cmd += ["--run-id", run_id]
        if qlog:
            cmd += ["--qlog", qlog if hop == 0 else f"{qlog}.{hop}"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=left + 10, check=False)
        try:
            out = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            why = p.stderr.strip()[-300:] or f"exit {p.returncode}"
            raise CCScopeError(f"the QUIC client gave no report: {why}") from None
        res.quic = out
        res.status = int(out.get("status") or 0)
        res.bytes += int(out.get("bytes") or 0)
        res.remote, res.remote_port = str(out.get("remote", "")), int(out.get("remote_port") or 0)
        res.local_port = int(out.get("local_port") or 0)
        res.truncated = bool(out.get("truncated"))
        res.error, res.error_kind = out.get("error"), out.get("error_kind")
        res.alt_svc = out.get("alt_svc")
        loc = out.get("location")
        if res.error is None and res.status in (301, 302, 303, 307, 308) and loc:
            current = urljoin(current, str(loc))
            res.redirects.append(current)
            continue
        res.final_url = current
        res.seconds = time.monotonic() - start
        return res
    raise CCScopeError(f"more than {MAX_REDIRECTS} redirects")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ccscope-quic-get", description=__doc__)
    ap.add_argument("url")
    ap.add_argument("--lab", action="store_true", help="allow lab (private) targets")
    ap.add_argument("--cacert", help="CA bundle to verify the server with (default: the system store)")
    ap.add_argument(
        "--ca-pem", help="the CA certificate itself (PEM text), for a client that cannot read the file"
    )
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--handshake-timeout", type=float, default=10.0)
    ap.add_argument("--max-bytes", type=int, default=16 * 1024 * 1024)
    ap.add_argument("--run-id")
    ap.add_argument(
        "--min-rounds",
        type=float,
        default=0.0,
        help="fetch the object again over the same connection until the transfer has lasted "
        "this many round trips (0: one fetch)",
    )
    ap.add_argument(
        "--cap-rtts",
        type=float,
        default=0.0,
        help="the evidence cap: the transfer lasts max(--cap-min-s, this many of the path's minimum "
        "RTTs), a short object fetched again until then, a long one cut there (0: no RTT part)",
    )
    ap.add_argument("--cap-min-s", type=float, default=0.0, help="the evidence cap's floor in seconds")
    ap.add_argument("--qlog", help="write the client's own qlog here")
    ap.add_argument(
        "--qlog-private",
        action="store_true",
        help="write the qlog in a private temporary directory and name it in the report "
        "(`qlog_file`): the unprivileged client in a shell cannot write into the run's directory",
    )
    args = ap.parse_args(argv)
    if not (0 <= args.cap_rtts < float("inf") and 0 <= args.cap_min_s < float("inf")):
        ap.error("--cap-rtts and --cap-min-s must be non-negative numbers")
    with tempfile.TemporaryDirectory(prefix="ccscope-quic-ca-") as tmp:
        cafile = args.cacert
        if args.ca_pem:
            # the Rust client reads a file: the PEM goes to a private one of this (unprivileged) user
            cafile = str(Path(tmp) / "ca.pem")
            Path(cafile).write_text(args.ca_pem)
        if args.qlog_private:
            args.qlog = str(Path(tempfile.mkdtemp(prefix=QLOG_PREFIX)) / "client.sqlog")
        return _run(args, cafile)


QLOG_PREFIX = "ccscope-qlog-"


def _run(args: argparse.Namespace, cafile: str | None) -> int:
    try:
        r = quic_get(
            args.url,
            lab=args.lab,
            cafile=cafile,
            timeout=args.timeout,
            handshake_timeout=args.handshake_timeout,
            max_bytes=args.max_bytes,
            run_id=args.run_id,
            qlog=args.qlog,
            min_rounds=args.min_rounds,
            cap_rtts=args.cap_rtts,
            cap_min_s=args.cap_min_s,
        )
        code = 0 if r.error is None and 200 <= r.status < 300 else 4
    except TargetRefused as e:
        r, code = QuicResult(url=args.url, error=f"refused: {e}", error_kind="refused_target"), 3
    except (CCScopeError, OSError, subprocess.SubprocessError) as e:
        r, code = QuicResult(url=args.url, error=str(e) or type(e).__name__, error_kind="client"), 4
    doc = asdict(r)
    if args.qlog_private:
        doc["qlog_file"] = args.qlog
    print(json.dumps(doc), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
