"""Helpers for tests that build real namespaces: what a finished shell must not leave behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CCSCOPE = [sys.executable, "-m", "ccscope.cli"]
# The TCP download client's process name inside a shell: the compiled one, or the interpreter
# running capture/fetch.py (CCSCOPE_TCP_CLIENT=python, or no build).
TCP_CLIENT_COMMS = ("ccscope-tcp-get", "python")


def ccs_devices() -> set[str]:
    out = subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=True).stdout
    return {d["ifname"] for d in json.loads(out) if d["ifname"].startswith("ccs")}


def ccscope_tables() -> set[str]:
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if "ccscope_" in line}


def leftovers_of(stats: dict) -> list[str]:
    """What the shell that wrote `stats` left behind. Other shells may be running on the
    machine (and reuse the device name at once), so ownership goes by the emulator's pid."""
    sh = stats["shell"]
    idx, pid = sh["index"], sh["pid"]
    left = [t for t in ccscope_tables() if t == f"ccscope_{idx}_{pid}"]
    lock = Path(f"/run/ccscope/shells/{idx}.lock")
    try:
        holder = int(lock.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        holder = None
    if holder == pid:
        left.append(f"lock {lock} still held by {pid}")
    if sh["outer_dev"] in ccs_devices() and (holder == pid or holder is None):
        left.append(sh["outer_dev"])
    return left


FREEZE_STEAL_S = 0.05  # the VM's freezes come in ~100 ms chunks of steal (capture/host.py)


def vm_froze(run: object) -> bool:
    """Whether the hypervisor took CPU from the VM while a profile's shell ran: a ~100 ms freeze
    lands whole in a one-sample figure such as the handshake's RTT, so such a figure's ceiling
    is only asserted on a run that did not freeze (its floor always is)."""
    steal = (getattr(run, "timing", None) or {}).get("host_steal_s")
    return steal is None or steal >= FREEZE_STEAL_S
