"""What a transport implementation provides (one module per transport in this folder).

A transport says how to download inside the shell (the client command), what the profile looks
like for it (QUIC cannot send 100-byte packets), how a capture becomes the download's traces,
and how a lab run is scored against the server's own record. Each module builds one `Transport`
as its `TRANSPORT`; the catalogue of names is ccscope/transports.py, which `capture.measure`,
the workers, the store and the API look transports up in.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccscope.errors import CaptureError

if TYPE_CHECKING:
    from ccscope.profile import Profile
    from ccscope.trace import Trace


@dataclass(frozen=True)
class ClientRequest:
    """One download, as the measurement asks a transport's client for it."""

    url: str
    run_id: str
    out_dir: Path  # where the client may leave files of its own (QUIC: its qlog)
    stem: str  # file-name stem of this run inside out_dir (the profile name)
    lab: bool = False
    cafile: Path | None = None
    timeout: float = 60.0
    max_bytes: int = 16 * 1024 * 1024
    # The evidence cap (StoppingRule.cap_s), kept by the client from its connection's RTT:
    # at most max(cap_min_s, cap_rtts x RTT) seconds (QUIC: also at least, repeating a short
    # object). None: TCP keeps only `timeout`; QUIC keeps the default rule's cap.
    cap_rtts: float | None = None
    cap_min_s: float = 0.0


@dataclass
class Flows:
    """The download's flow out of one capture: as seen at the bottleneck and shifted to the
    sender, plus whatever the transport wants kept beside them (estimator diagnostics)."""

    capture: Trace
    sender: Trace
    partial: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Transport:
    name: str
    # The command that downloads inside the shell; it prints one JSON line (FetchResult-shaped:
    # status, bytes, local_port, truncated, error, ...) as its last line of output.
    client_command: Callable[[ClientRequest], list[str]]
    # pcap + the client's report -> the download's flows; raises CaptureError when there is none.
    flows: Callable[..., Flows]
    # The profile this transport is measured through when the caller names a standard one.
    adapt_profile: Callable[[Profile], Profile] = field(default=lambda p: p)
    # Lab mode: the download scored against the server's own record (None: no record found).
    groundtruth: Callable[..., dict[str, Any] | None] | None = None
    # None when usable here, else why not (a client binary that is not built).
    unavailable: Callable[[], str | None] = field(default=lambda: None)
    # Adaptive stopping's reader of a capture still being written: (pcap, object_url=,
    # profile=) -> a callable giving the download's sender-aligned trace so far (CaptureError
    # when there is none yet). None: each check parses a snapshot of the whole file (`flows`).
    live: Callable[..., Callable[[], Trace]] | None = None


def client_args(req: ClientRequest, *extra: str) -> list[str]:
    """The URL and the options every client takes (Python or compiled); `extra` goes before the
    lab options."""
    args = [
        req.url,
        "--run-id", req.run_id, "--timeout", f"{req.timeout:g}", "--max-bytes", str(req.max_bytes),
        *extra,
    ]  # fmt: skip
    if req.lab:
        args.append("--lab")
    if req.cafile is not None:
        # The client runs unprivileged and may not reach the lab's state directory: hand it the
        # (public) CA certificate itself.
        try:
            args += ["--ca-pem", Path(req.cafile).read_text()]
        except OSError as e:
            raise CaptureError(f"cannot read the lab CA {req.cafile}: {e}") from None
    return args


def python_client(module: str, req: ClientRequest, *extra: str) -> list[str]:
    """The command line of a client written as a Python module (`python -m MODULE URL ...`)."""
    return [sys.executable, "-m", module, *client_args(req, *extra)]


def pick_flow(traces: list[Trace], local_port: int, none_why: str) -> Trace:
    """The download's flow by its client port; the first (largest) flow when the port is
    unknown; CaptureError(`none_why`) when the capture holds none."""
    for t in traces:
        if t.flow.client_port == local_port:
            return t
    if not traces:
        raise CaptureError(none_why)
    return traces[0]


def client_result(stdout: str) -> dict[str, Any]:
    """The client's report: the last line of its output, a JSON object ({} when absent)."""
    import json

    lines = stdout.strip().splitlines()
    if not lines:
        return {}
    try:
        doc = json.loads(lines[-1])
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


__all__ = [
    "ClientRequest", "Flows", "Transport", "client_args", "client_result", "pick_flow", "python_client",
]  # fmt: skip
