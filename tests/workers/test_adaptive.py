"""Adaptive stopping, live: the profiles download side by side, their growing captures are
classified every check, and once the rule settles the downloads stop where they are. Real lab
servers, real shells and captures, the shipped classifier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccscope.capture.measure import measure
from ccscope.classifier.stopping import StoppingRule
from ccscope.trace import Trace
from tests.workers.conftest import obj_url

pytestmark = [pytest.mark.netns, pytest.mark.slow]

FULL_BYTES = 2_000_000  # ~80 s through profile A's 200 kbit/s: far past where the rule stops


def test_downloads_stop_once_the_verdict_settles(lab, tmp_path: Path) -> None:
    # A permissive rule (any verdict, twice in a row, after 4 s) so that it settles for sure;
    # the shipped rule differs only in its numbers.
    rule = StoppingRule(every_s=1.0, min_s=4.0, stable=2, min_p=0.0)
    m = measure(obj_url("cubic", FULL_BYTES), ("A", "B"), tmp_path, lab=True, timeout=90, stopping=rule)
    st = m.stopping
    assert st is not None and st["settled"], st
    assert st["stopped_at_s"] >= rule.min_s
    displays = [c["display"] for c in st["checks"] if "display" in c]
    assert displays[-rule.stable :] == [st["verdict"]] * rule.stable
    for r in m.runs:
        assert r.ok and r.stopped and r.partial, r
        assert r.fetch["stopped"] and r.fetch["truncated"] and r.fetch["status"] == 200
        assert 0 < r.bytes < FULL_BYTES
        t = Trace.load(Path(r.sender_trace_file))
        # The trace ends shortly after the check that settled it, not at the object's end.
        assert rule.min_s <= t.duration < st["stopped_at_s"] + 10
    doc = json.loads((tmp_path / "measurement.json").read_text())
    assert doc["stopping"]["settled"] and doc["stopping"]["rule"]["min_s"] == rule.min_s
    assert not list(tmp_path.glob("*.live.pcap"))  # the snapshots the checks read are gone


def test_a_download_no_check_stops_ends_at_the_evidence_cap(lab, tmp_path: Path) -> None:
    # A rule that never settles (min_p above any probability): only the evidence cap, which the
    # client keeps from its own connection's RTT, ends the downloads. 40 RTTs of profile A's
    # and B's paths (> 100 ms) are more than the 1 s floor, so the RTT term decides.
    rule = StoppingRule(every_s=1.0, min_s=4.0, stable=2, min_p=2.0, cap_rtts=40.0, cap_min_s=1.0)
    m = measure(obj_url("cubic", FULL_BYTES), ("A", "B"), tmp_path, lab=True, timeout=90, stopping=rule)
    assert m.stopping is not None and not m.stopping["settled"]
    for r in m.runs:
        f = r.fetch
        assert r.ok and r.partial and not r.stopped, r
        assert f["truncated"] and not f["stopped"] and f["status"] == 200
        rtt_s = f["rtt_ms"] / 1e3
        assert 0.1 < rtt_s < 1.0, f
        assert f["cap_s"] == pytest.approx(rule.cap_s(rtt_s), abs=0.01)
        assert rule.cap_s(rtt_s) > 2 * rule.cap_min_s  # the RTT term, not the floor
        assert 0 < r.bytes < FULL_BYTES
        assert f["seconds"] == pytest.approx(f["cap_s"], abs=0.5)
        t = Trace.load(Path(r.sender_trace_file))
        assert t.duration <= f["cap_s"] + 1.0
    doc = json.loads((tmp_path / "measurement.json").read_text())
    assert doc["stopping"]["rule"]["cap_rtts"] == rule.cap_rtts
