"""TCP: the HTTP(S) client (the compiled capture/tcpget, or capture/fetch.py), BiF from
sequence and ACK numbers (tcp_bif.py), ground truth from the lab server's TCP_INFO samples."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ccscope.capture.transports import ClientRequest, Flows, Transport, client_args, python_client
from ccscope.capture.transports import pick_flow as pick_transport_flow
from ccscope.profile import Profile
from ccscope.trace import Trace

_REPO_BINARY = Path(__file__).resolve().parents[1] / "tcpget" / "target" / "release" / "ccscope-tcp-get"


def tcp_get_built() -> Path | None:
    """The compiled client: $CCSCOPE_TCP_GET, the repository build, or one on PATH (None when
    not built), whatever the settings ask for."""
    from ccscope.capture.binaries import find_built
    from ccscope.settings import settings

    override = settings().tcp_get
    return find_built("ccscope-tcp-get", str(override) if override else None, _REPO_BINARY)


def tcp_get_binary() -> Path | None:
    """The compiled client unless the settings ask for Python (CCSCOPE_TCP_CLIENT=python) or it is
    not built; else None (the Python client)."""
    from ccscope.settings import settings

    return tcp_get_built() if settings().tcp_client == "compiled" else None


def client_command(req: ClientRequest) -> list[str]:
    """The compiled client where it is built and the settings do not ask for Python (its
    start-up is a few ms of CPU, the interpreter's some 50: twice a measurement on the measuring
    host); both take the same options, read alike and print the same report."""
    from ccscope.identity import USER_AGENT

    cap: tuple[str, ...] = ()
    if req.cap_rtts is not None:
        cap = ("--cap-rtts", f"{req.cap_rtts:g}", "--cap-min-s", f"{req.cap_min_s:g}")
    binary = tcp_get_binary()
    if binary is None:
        return python_client("ccscope.capture.fetch", req, *cap)
    return [str(binary), *client_args(req, *cap), "--user-agent", USER_AGENT]


def pick_flow(traces: list[Trace], local_port: int) -> Trace:
    """The download's flow by its client port; the largest flow when the port is unknown."""
    return pick_transport_flow(traces, local_port, "the capture holds no TCP flow with a handshake")


def flows(pcap: Path, *, fetch: dict[str, Any], object_url: str, profile: Profile, **_: Any) -> Flows:
    from ccscope.capture.tcp_bif import flows_from_pcap_aligned

    both = flows_from_pcap_aligned(pcap, ("capture", "sender"), object_url=object_url, profile=profile)
    cap = both["capture"]
    flow = pick_flow(cap.traces, int(fetch.get("local_port") or 0))
    sender = pick_flow(both["sender"].traces, flow.flow.client_port)
    return Flows(capture=flow, sender=sender, partial=cap.partial)


def live(pcap: Path, *, object_url: str, profile: Profile) -> Callable[[], Trace]:
    """The growing capture's sender-aligned trace, parsing only what is new at each call."""
    from ccscope.capture.tcp_bif import LiveCapture, live_sender_trace

    cap = LiveCapture(pcap)
    return lambda: live_sender_trace(cap, object_url=object_url, profile=profile)


def groundtruth(flow: Trace, sender: Trace, profile: Profile, run_id: str, **_: Any) -> dict[str, Any] | None:
    from ccscope.lab.groundtruth import compare_bif, compare_pipe, find_groundtruth

    truth = find_groundtruth(run_id=run_id, trace=flow, wait_s=5.0)
    if truth is None:
        return None
    bdp = profile.bdp_bytes(flow.internet_rtt_ms or 0.0) or 1.0
    out = {
        "cca": truth.extra.get("cca"),
        "capture": compare_bif(flow, truth, bdp_bytes=bdp),
        "sender": compare_bif(sender, truth, bdp_bytes=bdp),
    }
    if "sacked" in sender.columns:  # with SACK the pipe is measured too: score it
        out["sender_pipe"] = compare_pipe(sender, truth, bdp_bytes=bdp)
    return out


TRANSPORT = Transport(
    name="tcp",
    client_command=client_command,
    flows=flows,
    groundtruth=groundtruth,
    live=live,
)
