"""Helpers for tests that build real namespaces: what a finished shell must not leave behind."""

from __future__ import annotations

import json
import subprocess
import sys

CCSCOPE = [sys.executable, "-m", "ccscope.cli"]


def ccs_devices() -> set[str]:
    out = subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=True).stdout
    return {d["ifname"] for d in json.loads(out) if d["ifname"].startswith("ccs")}


def ccscope_tables() -> set[str]:
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if "ccscope_" in line}


def shell_leftovers(lab: object | None = None) -> list[str]:
    """Devices and nft tables of shells other than the lab's own."""
    keep_dev: set[str] = set(getattr(lab, "devices", ()) or ())
    keep_tab: set[str] = set(getattr(lab, "tables", ()) or ())
    left = sorted(ccs_devices() - keep_dev) + sorted(ccscope_tables() - keep_tab)
    return left
