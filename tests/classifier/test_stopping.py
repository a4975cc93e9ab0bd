"""Adaptive stopping's rule (classifier/stopping.py) on the committed lab traces, with the
shipped classifier: the checks it skips cannot change where it stops or what it says."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ccscope.classifier import classify
from ccscope.classifier.stopping import Stopped, StoppingRule, simulate
from ccscope.trace import Trace
from ccscope.verdict import Verdict
from tests.classifier.conftest import load


def test_useful_checks_are_those_a_stop_can_read() -> None:
    rule = StoppingRule(every_s=2.0, min_s=14.0, stable=3)
    # the stop at 14 s reads the checks at 10, 12 and 14 s: nothing before 10 s can matter
    assert not rule.useful(9.99) and rule.useful(10.0) and rule.useful(30.0)
    assert StoppingRule(every_s=1.0, min_s=4.0, stable=2).useful(3.0)
    assert not StoppingRule(every_s=1.0, min_s=4.0, stable=2).useful(2.5)


def _every_check(traces: Sequence[Trace], rule: StoppingRule) -> Stopped:
    """The rule applied to a verdict at every check from the first, none skipped."""
    full = min(t.duration for t in traces)
    history: list[Verdict] = []
    t = rule.every_s
    while t < full:
        v = classify([tr.head(t) for tr in traces])
        history.append(v)
        if rule.settled(history, t):
            return Stopped(v, t, True)
        t += rule.every_s
    return Stopped(classify(list(traces)), full, False)


@pytest.mark.parametrize("cca", ["cubic", "bbr", "vegas", "cubic-b50"])
@pytest.mark.parametrize(
    "rule", [StoppingRule(), StoppingRule(min_p=0.0), StoppingRule(min_s=10.0, stable=4)]
)
def test_skipped_checks_change_nothing(
    traces: dict[tuple[str, str], Trace], cca: str, rule: StoppingRule
) -> None:
    pair = [traces[(cca, p)] if (cca, p) in traces else load(cca, p) for p in "AB"]
    calls = 0

    def counted(ts: Sequence[Trace]) -> Verdict:
        nonlocal calls
        calls += 1
        return classify(ts)

    got = simulate(pair, counted, rule)
    want = _every_check(pair, rule)
    assert (got.verdict.display, got.at_s, got.settled) == (want.verdict.display, want.at_s, want.settled)
    # the checks before min_s - (stable - 1) * every_s were not made
    made = sum(1 for k in range(1, 100) if k * rule.every_s < min(t.duration for t in pair))
    skipped = sum(1 for k in range(1, 100) if not rule.useful(k * rule.every_s))
    assert calls <= made - skipped + 1


def test_the_evidence_cap_is_the_reference_collections_length() -> None:
    rule = StoppingRule()
    assert rule.cap_s(0.010) == rule.cap_min_s  # 120 x 10 ms is under the floor
    assert rule.cap_s(0.5) == pytest.approx(60.0)  # 120 round trips
    assert rule.cap_s(5.0) == rule.cap_max_s
    # A census trace is never longer than the draws the classifier's figures are measured on.
    from ccscope.classifier.conditions import sample

    for i in range(20):
        d = sample("full", "train", i)
        for slot in ("A", "B"):
            assert d.duration_cap_s(slot) == rule.cap_s(d.rtt_ms(slot) / 1e3)
