"""The transports ccscope measures over: one catalogue, everything else derived from it.

The catalogue is import-light on purpose: the API, the store and the trace format need the
names, and must not load the measuring side (capture/). Each row names the module in
capture/transports/ that implements the transport (its client command, its pcap -> trace step,
its lab ground truth) as a module-level `TRANSPORT`; `get_transport` imports it on first use.
A new transport is one row here and one module there.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ccscope.errors import CCScopeError

if TYPE_CHECKING:
    from ccscope.capture.transports import Transport


class UnknownTransport(CCScopeError):
    exit_code = 2


@dataclass(frozen=True)
class TransportInfo:
    name: str
    summary: str
    module: str  # implements it as `TRANSPORT`


# Append only: stored measurements and verdicts name their transport.
CATALOGUE: tuple[TransportInfo, ...] = (
    TransportInfo("tcp", "HTTP/1.1 over TCP (TLS for https); BiF from sequence and ACK numbers",
                  "ccscope.capture.transports.tcp"),
    TransportInfo("quic", "HTTP/3 over QUIC (quiche client); BiF estimated from encrypted packets",
                  "ccscope.capture.transports.quic"),
)  # fmt: skip
TRANSPORTS: tuple[str, ...] = tuple(t.name for t in CATALOGUE)
_BY_NAME = {t.name: t for t in CATALOGUE}


def transport_names() -> tuple[str, ...]:
    return TRANSPORTS


def transport_info(name: str) -> TransportInfo:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownTransport(
            f"unknown transport {name!r} (known: {', '.join(TRANSPORTS)}; a new one is a row in "
            "ccscope/transports.py and a module in ccscope/capture/transports/)"
        ) from None


def get_transport(name: str) -> Transport:
    """The implementation of a transport (imports the measuring side)."""
    info = transport_info(name)
    mod = importlib.import_module(info.module)
    t: Transport = mod.TRANSPORT
    if t.name != name:
        raise UnknownTransport(f"{info.module} implements {t.name!r}, not {name!r}")
    return t
