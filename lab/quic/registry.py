"""Which QUIC stack runs which congestion control, and where, in the lab.

Every (stack, CCA) gets a fixed host number in the lab's /24 (from .150 on, clear of the TCP
servers in lab/registry.py) and a name `<cca>.<stack>.lab.test`; its label `<stack>:<cca>` is
the class a classifier learns (a stack's CUBIC is not the kernel's). Append only: an address
once given stays with its server so old ground truth keeps its meaning.

A stack is one way to start a server process; `unavailable()` says why a stack cannot run here
(a binary that is not built), so `ccscope lab up --quic` brings up what it can and names the rest.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ccscope.lab.registry import LAB_DOMAIN, lab_prefix

_REPO = Path(__file__).resolve().parents[2]
# capture/quic and lab/quic/quiche-server share one cargo target directory (one quiche build).
QUIC_TARGET = _REPO / "capture" / "quic" / "target" / "release"
QUICHE_SERVER = QUIC_TARGET / "ccscope-quiche-server"
QUICGO_SERVER = _REPO / "lab" / "quic" / "quicgo-server" / "ccscope-quicgo-server"
FIRST_HOST = 150


@dataclass(frozen=True)
class QuicServerArgs:
    listen: str  # addr:port
    cert: str
    key: str
    qlog_dir: str
    runs_dir: str
    large: int


@dataclass(frozen=True)
class Stack:
    name: str
    command: Callable[[QuicServerArgs, str, str], list[str]]  # (args, stack's cca name, label)
    unavailable: Callable[[], str | None]


def _binary_missing(p: Path, how: str) -> Callable[[], str | None]:
    def check() -> str | None:
        return None if p.is_file() and os.access(p, os.X_OK) else f"{p} is not built ({how})"

    return check


def _flags(a: QuicServerArgs, cca: str, label: str) -> list[str]:
    return ["--listen", a.listen, "--cert", a.cert, "--key", a.key, "--cc", cca, "--label", label,
            "--qlog-dir", a.qlog_dir, "--runs-dir", a.runs_dir, "--large", str(a.large)]  # fmt: skip


def _aioquic_missing() -> str | None:
    return None if importlib.util.find_spec("aioquic") else "aioquic is not installed (pip install aioquic)"


STACKS: dict[str, Stack] = {
    "quiche": Stack(
        "quiche",
        lambda a, cca, label: [str(QUICHE_SERVER), *_flags(a, cca, label)],
        _binary_missing(QUICHE_SERVER, "make setup builds lab/quic/quiche-server"),
    ),
    "aioquic": Stack(
        "aioquic",
        lambda a, cca, label: [
            sys.executable,
            "-m",
            "ccscope.lab.quic.aioquic_server",
            *_flags(a, cca, label),
        ],
        _aioquic_missing,
    ),
    "quicgo": Stack(
        "quicgo",
        lambda a, cca, label: [str(QUICGO_SERVER), *_flags(a, cca, label)],
        _binary_missing(QUICGO_SERVER, "make setup builds lab/quic/quicgo-server with Go"),
    ),
}


@dataclass(frozen=True)
class QuicServer:
    stack: str
    cca: str  # the stack's own name for it (what its server's --cc takes)
    short: str  # the lab's name: host label and class label
    host: int  # host number in the lab /24

    @property
    def label(self) -> str:
        return f"{self.stack}:{self.short}"

    @property
    def hostname(self) -> str:
        return f"{self.short}.{self.stack}.{LAB_DOMAIN}"

    def addr_in(self, instance: int) -> str:
        return str(ipaddress.ip_network(lab_prefix(instance)).network_address + self.host)


# Position i gets host FIRST_HOST + i. Append only.
_ORDER: tuple[tuple[str, str, str], ...] = (
    ("quiche", "reno", "reno"), ("quiche", "cubic", "cubic"), ("quiche", "bbr2_gcongestion", "bbr2"),
    ("aioquic", "reno", "reno"), ("aioquic", "cubic", "cubic"),
    # quic-go hard-wires its congestion control to Reno (its cubic sender in Reno mode)
    ("quicgo", "reno", "reno"),
)  # fmt: skip
QUIC_SERVERS: tuple[QuicServer, ...] = tuple(
    QuicServer(stack, cca, short, FIRST_HOST + i) for i, (stack, cca, short) in enumerate(_ORDER)
)
_BY_LABEL = {s.label: s for s in QUIC_SERVERS}
_BY_HOST = {s.host: s for s in QUIC_SERVERS}


def quic_server(label: str) -> QuicServer:
    """The entry for `stack:cca` (e.g. quiche:cubic) or its host name."""
    key = label.strip().lower()
    for s in QUIC_SERVERS:
        if key in (s.label, s.hostname, f"{s.stack}:{s.cca}"):
            return s
    raise KeyError(
        f"no lab QUIC server {label!r} (known: {', '.join(_BY_LABEL)}; new ones are appended to "
        "ccscope/lab/quic/registry.py)"
    )


def quic_server_for_address(addr: str) -> QuicServer | None:
    try:
        a = ipaddress.ip_address(addr)
    except ValueError:
        return None
    return _BY_HOST.get(int(a) & 0xFF) if a in ipaddress.ip_network("198.18.0.0/16") else None


def available_servers() -> tuple[list[QuicServer], dict[str, str]]:
    """The servers whose stack can run here, and why the others cannot (stack -> reason)."""
    why = {name: r for name, st in STACKS.items() if (r := st.unavailable())}
    return [s for s in QUIC_SERVERS if s.stack not in why], why
