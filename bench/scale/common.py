"""What every part of bench/scale shares: the repository on sys.path, the lab, logging, the host,
the classifier's model and the adaptive-stopping rule from the command line."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

# The benches share the tests' process kit (tests.workers.kit, from the repository): a module that
# imports it imports this one first.
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

INSTANCE = 70  # lab instances 70-79 belong to this bench and the chaos bench
STATE_DIR = "/run/ccscope/lab-bench-scale"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def host() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "kernel": platform.release(),
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def _lab_up(
    ccas: tuple[str, ...],
    sites: tuple[tuple[str, str], ...] = (),
    large: int = 420_000,
    sample_ms: float = 1.0,
) -> Any:
    from ccscope.lab import ccas as zoo
    from ccscope.lab.lab import Lab, LabParams

    zoo.ensure_loaded([c for c in ccas if c not in zoo.kernel_available()])
    os.environ["CCSCOPE_LAB"] = "1"
    os.environ["CCSCOPE_LAB_DIR"] = STATE_DIR
    lab = Lab(STATE_DIR)
    lab.up(
        LabParams(
            ccas=ccas,
            delay_ms=10.0,
            sites=sites,
            large_bytes=large,
            instance=INSTANCE,
            sample_interval_ms=sample_ms,
        )
    )
    return lab


def _model(path: str | None) -> Any:
    from ccscope.classifier.model import Model

    return Model.load(Path(path) if path else None)


def _rule(args: argparse.Namespace) -> Any:
    """The default StoppingRule, with --rule's overrides (e.g. 'stable=4,min_p=0')."""
    from ccscope.classifier.stopping import StoppingRule

    kw: dict[str, Any] = {}
    for item in filter(None, (args.rule or "").split(",")):
        k, _, v = item.partition("=")
        kw[k.strip()] = int(v) if k.strip() == "stable" else float(v)
    return StoppingRule(**kw)


def _commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
