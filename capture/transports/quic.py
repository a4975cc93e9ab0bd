"""QUIC: HTTP/3 through the quiche client (capture/quic, wrapped by capture/quic_get.py), bytes
in flight estimated from encrypted packets (capture/quic_bif.py), ground truth from the lab QUIC
servers' own qlog."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from ccscope.capture.transports import ClientRequest, Flows, Transport, python_client
from ccscope.capture.transports import pick_flow as pick_transport_flow
from ccscope.errors import CCScopeError
from ccscope.profile import Profile, quic_profile
from ccscope.trace import Trace

# The classifier needs 20 base round trips after slow start (MIN_CA_RTTS), and on a deep buffer
# slow start alone can take most of 30 smoothed round trips. So the client keeps the evidence
# cap the TCP client keeps (StoppingRule.cap_s: max(cap_min_s, cap_rtts x the path's minimum
# RTT), at most the timeout): it fetches a short object again over the same connection until
# then and cuts a long one there. A request without a cap of its own gets the default rule's,
# the length of every reference draw. MIN_ROUNDS stays as a floor in smoothed round trips.
MIN_ROUNDS = 30


def client_command(req: ClientRequest) -> list[str]:
    from ccscope.classifier.stopping import StoppingRule

    rule = StoppingRule()
    rtts, min_s = (
        (req.cap_rtts, req.cap_min_s) if req.cap_rtts is not None else (rule.cap_rtts, rule.cap_min_s)
    )
    cap = ("--cap-rtts", f"{rtts:g}", "--cap-min-s", f"{min_s:g}")
    return python_client(
        "ccscope.capture.quic_get", req, "--qlog-private", "--min-rounds", str(MIN_ROUNDS), *cap
    )


def pick_flow(traces: list[Trace], local_port: int) -> Trace:
    return pick_transport_flow(traces, local_port, "the capture holds no QUIC flow with data from the server")


def flows(
    pcap: Path,
    *,
    fetch: dict[str, Any],
    object_url: str,
    profile: Profile,
    link_stats: dict[str, Any] | None = None,
    out_dir: Path | None = None,
    stem: str | None = None,
    **_: Any,
) -> Flows:
    from ccscope.capture.quic_bif import quic_flows_from_pcap

    log = out_dir / f"{stem}.client.sqlog" if out_dir is not None and stem else None
    if log is not None:
        take_client_qlog(fetch.get("qlog_file"), log)
    both = quic_flows_from_pcap(
        pcap,
        ("capture", "sender"),
        object_url=object_url,
        profile=profile,
        link_stats=link_stats,
        client_log=log if log is not None and log.is_file() else None,
        client_port=int(fetch.get("local_port") or 0) or None,
    )
    cap = both["capture"]
    flow = pick_flow(cap.traces, int(fetch.get("local_port") or 0))
    sender = pick_flow(both["sender"].traces, flow.flow.client_port)
    return Flows(capture=flow, sender=sender, partial=cap.partial, info=dict(flow.extra.get("quic") or {}))


MAX_QLOG_BYTES = 256 << 20


def take_client_qlog(reported: object, dest: Path) -> Path | None:
    """Copy the qlog the unprivileged client wrote (the path its report names) to `dest`, and
    remove the client's temporary directory. The path comes from a process that talked to an
    untrusted server, so only a regular file, not a link, directly in a `ccscope-qlog-*`
    directory of the system's temporary directory, owned by the same user as that directory,
    and of a bounded size is taken."""
    from ccscope.capture.quic_get import QLOG_PREFIX

    if not isinstance(reported, str) or not reported:
        return None
    src = Path(reported)
    parent = src.parent
    if (
        src.name != "client.sqlog"
        or parent.parent != Path(tempfile.gettempdir())
        or not parent.name.startswith(QLOG_PREFIX)
    ):
        return None
    try:
        pst, fst = os.lstat(parent), os.lstat(src)
        if not (stat.S_ISDIR(pst.st_mode) and stat.S_ISREG(fst.st_mode)) or fst.st_uid != pst.st_uid:
            return None
        if fst.st_size > MAX_QLOG_BYTES:
            return None
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f, dest.open("wb") as out:
            shutil.copyfileobj(f, out)
        return dest
    except OSError:
        return None
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def groundtruth(flow: Trace, sender: Trace, profile: Profile, run_id: str, **_: Any) -> dict[str, Any] | None:
    from ccscope.lab.quic.groundtruth import score_quic_run

    return score_quic_run(flow, sender, profile, run_id)


def unavailable() -> str | None:
    from ccscope.capture.quic_get import client_binary

    try:
        client_binary()
    except CCScopeError as e:
        return str(e)
    return None


TRANSPORT = Transport(
    name="quic",
    client_command=client_command,
    flows=flows,
    adapt_profile=quic_profile,
    groundtruth=groundtruth,
    unavailable=unavailable,
)
