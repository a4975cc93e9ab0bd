"""The QUIC part of `ccscope lab up --quic`: what lab/lab.py asks of the QUIC servers.

lab.py stays the owner of the lab's life cycle; it calls these helpers for the QUIC servers'
addresses and names (for the shell, the hosts file and the certificate), to wrap the TCP server
command in the QUIC launcher, and to health-check the QUIC servers over HTTP/3.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ccscope.errors import LabError
from ccscope.lab.quic.registry import STACKS, QuicServer, QuicServerArgs, available_servers, quic_server
from ccscope.lab.registry import LAB_DOMAIN

ALL = "all"
# A QUIC profile carries 1200-byte datagrams where a TCP one carries 100-byte packets, so a
# download needs ~25x the bytes for as many round trips: the QUIC servers' /large is at least this.
QUIC_LARGE_BYTES = 5_000_000


def resolve_servers(names: tuple[str, ...]) -> tuple[str, ...]:
    """Labels of the QUIC servers asked for (`all`: every one whose stack can run here)."""
    if not names:
        return ()
    if ALL in names:
        ok, _why = available_servers()
        return tuple(s.label for s in ok)
    try:
        return tuple(dict.fromkeys(quic_server(n).label for n in names))
    except KeyError as e:
        raise LabError(str(e.args[0])) from None


def specs(labels: tuple[str, ...]) -> list[QuicServer]:
    return [quic_server(label) for label in labels]


def cert_names(servers: list[QuicServer]) -> list[str]:
    """`*.lab.test` covers one label only: each stack's names need their own wildcard."""
    return [f"*.{s}.{LAB_DOMAIN}" for s in dict.fromkeys(x.stack for x in servers)]


@dataclass
class QuicServerInfo:
    label: str
    stack: str
    cca: str
    addr: str
    hostname: str
    https_url: str


def server_infos(servers: list[QuicServer], instance: int) -> list[dict[str, Any]]:
    return [
        asdict(
            QuicServerInfo(s.label, s.stack, s.cca, s.addr_in(instance), s.hostname, f"https://{s.hostname}/")
        )
        for s in servers
    ]


def write_config(
    path: Path,
    servers: list[QuicServer],
    *,
    instance: int,
    cert: str,
    key: str,
    groundtruth_dir: Path,
    large: int,
) -> Path:
    """The launcher's config: one argv per QUIC server, qlog and run records under the lab's
    ground-truth directory (groundtruth/quic/qlog/<stack>-<cca>/, groundtruth/quic/runs/)."""
    missing = {s.stack: why for s in servers if (why := STACKS[s.stack].unavailable())}
    if missing:
        raise LabError("QUIC stack not available: " + "; ".join(f"{k}: {v}" for k, v in missing.items()))
    runs = runs_dir(groundtruth_dir)
    runs.mkdir(parents=True, exist_ok=True)
    entries = []
    for s in servers:
        qdir = groundtruth_dir / "quic" / "qlog" / s.label.replace(":", "-")
        qdir.mkdir(parents=True, exist_ok=True)
        a = QuicServerArgs(
            f"{s.addr_in(instance)}:443", cert, key, str(qdir), str(runs), max(large, QUIC_LARGE_BYTES)
        )
        entries.append({"label": s.label, "argv": STACKS[s.stack].command(a, s.cca, s.label)})
    path.write_text(json.dumps({"servers": entries}, indent=2))
    return path


def runs_dir(groundtruth_dir: Path) -> Path:
    return groundtruth_dir / "quic" / "runs"


def wrap(config: Path, cmd: list[str]) -> list[str]:
    return [sys.executable, "-m", "ccscope.lab.quic.launch", "--config", str(config), "--", *cmd]


def check(servers: list[dict[str, Any]], ca_file: Path, timeout: float) -> list[dict[str, Any]]:
    """GET /health over HTTP/3 from here (across the lab path) with the capture's own client."""
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(servers)))) as ex:
        return list(ex.map(lambda s: _check_one(s, ca_file, timeout), servers))


def _check_one(srv: dict[str, Any], ca_file: Path, timeout: float) -> dict[str, Any]:
    from ccscope.capture.quic_get import client_binary

    res: dict[str, Any] = {"ok": False, "error": None}
    try:
        cmd = [str(client_binary()), "--connect", f"{srv['addr']}:443", "--sni", srv["hostname"], "--path",
               "/health", "--cafile", str(ca_file), "--timeout", f"{timeout:g}",
               "--handshake-timeout", f"{timeout:g}"]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 5, check=False)
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError) as e:
        res["error"] = f"{type(e).__name__}: {e}"
        return res
    if out.get("status") != 200:
        res["error"] = f"h3 /health: {out.get('error') or 'status ' + str(out.get('status'))}"
        return res
    res["ok"] = True
    res["handshake_ms"] = out.get("handshake_ms")
    return res
