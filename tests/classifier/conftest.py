"""Real lab traces (committed, gzipped): profile A and B of one download per CCA, taken from a
run beyond the 5 ms condition's plan (dataset.FIXTURE_CONDITION), so the shipped model never
trained on them, and one pair of an untrained variant. `tests/fixtures/regenerate.py` rebuilds
them from a reference set."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ccscope.classifier import conditions as c
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


def lab_draw(rate_mbit: float, object_bytes: int) -> c.Draw:
    """Draw 0 of the test split with cross traffic: a 20 ms path (0.5 ms jitter), one elastic
    CUBIC flow and 10 % UDP sharing a `rate_mbit` bottleneck of one BDP, a 5 ms access shell
    and the standard profiles; the lab collection tests measure it."""
    return replace(
        c.sample("full", "test", 0),
        path=c.InternetPath(rtt_ms=20.0, jitter_ms=0.5),
        sharing=c.Sharing(
            rate_mbit=rate_mbit, buffer_bdp=1.0, udp_share=0.1, flows=(c.ElasticFlow("cubic", 2.0, 1.0),)
        ),
        placement=c.Placement((c.AccessPath(5.0),)),
        server=c.Server(object_bytes=object_bytes),
        profile=c.ProfilePair(),
    )


def space_draw(
    path: c.InternetPath,
    placement: c.Placement,
    server: c.Server,
    *,
    rate_kbit: float,
    buffer_bdp: float,
    mtu: int,
) -> c.Draw:
    """Draw 1 of the test split without cross traffic, through a drawn ("space") profile pair
    with SACK off and 20 / 40 ms delays; the lab collection tests' second draw."""
    return replace(
        c.sample("full", "test", 0),
        index=1,
        path=path,
        sharing=c.Sharing(),
        placement=placement,
        server=server,
        profile=c.ProfilePair("space", rate_kbit=rate_kbit, buffer_bdp=buffer_bdp, sack=False, mtu=mtu,
                              delay_a_ms=20.0, delay_b_ms=40.0),
    )  # fmt: skip
