"""bench/scale's attribution of late packets to hypervisor freezes: a late packet counts as a
freeze's when its delay overlaps a span in which a CPU's steal counter rose (one clock tick of
slack each side), and only then."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

SCALE = Path(__file__).resolve().parents[2] / "bench" / "scale"


@pytest.fixture(scope="module")
def stealwatch() -> Any:
    sys.path.insert(0, str(SCALE))
    try:
        import stealwatch

        yield stealwatch
    finally:
        sys.path.remove(str(SCALE))


def test_late_packets_inside_a_freeze_are_its_own(stealwatch: Any) -> None:
    spans = [(100.00, 100.04, 0, 0.03), (200.0, 200.01, 1, 0.01)]
    marks = [
        [100.05, 35.0, "m1/A/down"],  # held from 100.015 to 100.05: inside the first freeze
        [100.10, 2.0, "m1/A/up"],  # 100.098-100.1: after it by more than a tick
        [150.00, 5.0, "m2/B/down"],  # no freeze near
        [200.02, 1.5, "m3/A/down"],  # starts within a tick of the second span's end
    ]
    got = stealwatch.attribute(marks, spans, t0=99.0, tick_s=0.01)
    assert got["late_marks"] == 4 and got["late_marks_in_steal"] == 2
    assert got["late_marks_by_size"] == {"1-2ms": [1, 1], "2-5ms": [1, 0], "5-20ms": [1, 0], "20ms+": [1, 1]}
    assert got["steal_spans"] == 2 and got["steal_spans_s"] == 0.04
    assert got["steal_spans_largest"][0] == {"at_s": 1.0, "to_s": 1.04, "cpu": 0, "steal_ms": 30}


def test_the_watch_reads_the_counters_and_stops(stealwatch: Any) -> None:
    with stealwatch.StealWatch(period_s=0.005) as w:
        time.sleep(0.05)
    assert not w._thread.is_alive()
    assert all(a <= b and s > 0 for a, b, _, s in w.spans)
