"""Real lab traces (committed, gzipped): profile A and B of one download per CCA, taken from a
run beyond the 5 ms condition's plan (dataset.FIXTURE_CONDITION), so the shipped model never
trained on them, and one pair of an untrained variant. `tests/fixtures/regenerate.py` rebuilds
them from a reference set."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ccscope.trace import Trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
CCAS = ("cubic", "reno", "bbr", "bbr2", "bbr3", "vegas", "lp", "veno", "bic")
CLASS_OF = {"reno": "reno/dctcp"}  # the class a CCA is trained as (dataset.LABEL_OF)
VARIANT = "cubic-b50"  # an untrained variant's pair (tests/fixtures/regenerate.py)


def fixture_path(cca: str, profile: str) -> Path:
    return FIXTURES / f"{cca}-d5-{profile}.trace.json.gz"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`ccscope ARGS` in a fresh interpreter, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "ccscope.cli", *args], capture_output=True, text=True)


def load(cca: str, profile: str) -> Trace:
    return Trace.load(fixture_path(cca, profile))


@pytest.fixture(scope="session")
def traces() -> dict[tuple[str, str], Trace]:
    return {(c, p): load(c, p) for c in CCAS for p in "AB"}
