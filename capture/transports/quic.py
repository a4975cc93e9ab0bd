"""QUIC: HTTP/3 through the quiche client (capture/quic), BiF estimated from encrypted packets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ccscope.capture.transports import ClientRequest, Flows, Transport
from ccscope.errors import CaptureError
from ccscope.profile import Profile, quic_profile


def client_command(req: ClientRequest) -> list[str]:
    raise CaptureError("no QUIC client yet")


def flows(pcap: Path, *, fetch: dict[str, Any], object_url: str, profile: Profile, **_: Any) -> Flows:
    raise CaptureError("no QUIC client yet")


TRANSPORT = Transport(
    name="quic",
    client_command=client_command,
    flows=flows,
    adapt_profile=quic_profile,
    unavailable=lambda: "no QUIC client yet",
)
