"""`ccscope eval`'s scoring on the committed lab traces: confusion, recall, Unknown trade-off."""

from __future__ import annotations

import numpy as np

from ccscope.classifier import classify
from ccscope.classifier.core import summarise
from ccscope.classifier.model import Model
from ccscope.classifier.train import UNKNOWN_LIMIT_SCALES, Unit, evaluate, unknown_tradeoff
from ccscope.trace import Trace
from tests.classifier.conftest import CCAS, CLASS_OF, fixture_path, load


def _recovery_to_the_end() -> Trace:
    """A SACK-less download as the published profiles make it: slow start overshoots, then one
    hole is repaired per round trip until the transfer ends (BiF creeps up on duplicate ACKs)."""
    like = load("reno", "A")
    t = np.arange(0.0, 30.0, 0.004)
    bif = np.where(t < 1.5, 100 * np.exp(t * 2.5), 4000 + 10 * (t - 1.5)).astype(np.int64)
    retx = np.arange(1.5, 29.9, 0.14)
    dup = np.arange(1.5, 29.9, 0.02)
    return Trace(flow=like.flow, t=t, bif=bif, start_time=0.0, profile=like.profile,
                 base_rtt_ms=like.base_rtt_ms, internet_rtt_ms=like.internet_rtt_ms,
                 events={"retransmit": retx.tolist(), "dupack": dup.tolist()})  # fmt: skip


def test_congestion_avoidance_is_told_apart_from_a_recovery_to_the_end() -> None:
    # with SACK (the standard profiles) both of Reno's traces recover and grow again; a
    # SACK-less recovery that lasts to the end of the download shows no growth at all
    for prof in "AB":
        assert summarise(load("reno", prof)).has_congestion_avoidance
        assert "congestion avoidance" not in classify([load("reno", prof)]).explanation
    rec = summarise(_recovery_to_the_end())
    assert rec.insufficient is None and not rec.has_congestion_avoidance
    v = classify([_recovery_to_the_end()])
    assert "No trace holds a clean stretch of congestion avoidance" in v.explanation


def test_evaluate_scores_held_out_pairs_and_variants() -> None:
    model = Model.load()
    summ, us = {}, []
    for cca in CCAS:
        paths = [str(fixture_path(cca, p)) for p in "AB"]
        for path, p in zip(paths, "AB", strict=True):
            summ[path] = summarise(load(cca, p))
        us.append(Unit(("d5", cca, 2), CLASS_OF.get(cca, cca), cca, "d5", "heldout_runs", paths))
    # a trained CCA's pair standing in for an untrained variant: scored apart from the known ones
    us.append(Unit(("d5", "vegas-a6", 2), "vegas-a6", "vegas-a6", "d5", "variants", us[5].paths))
    # training units are never scored
    us.append(Unit(("d5", "lp", 0), "lp", "lp", "d5", "train", us[6].paths))

    res = evaluate(model, us, summ)

    hr = res["heldout_runs"]
    assert hr["units"] == len(CCAS) and res["variants"]["units"] == 1
    assert hr["mean_recall"] == 1.0 and hr["unknown_rate"] == 0.0  # every pair is named (test_classify)
    m = hr["confusion"]["matrix"]
    assert sum(map(sum, m)) == len(CCAS)
    assert all(m[i][i] == 1 for i, c in enumerate(hr["confusion"]["rows"]) if hr["per_class"][c]["n"])
    assert res["variants"]["per_variant"]["vegas-a6"]["predicted"] == {"vegas": 1}
    by_ca = hr["by_congestion_avoidance"]
    assert by_ca["with"]["units"] == len(CCAS) and by_ca["without"]["units"] == 0
    for r in hr["predictions"]:
        assert r["unknown_excess"] is not None and r["unknown_excess"] <= 1.0 and not r["low_confidence"]

    trade = unknown_tradeoff(res)
    assert [t["limit_scale"] for t in trade] == list(UNKNOWN_LIMIT_SCALES)
    at1 = next(t for t in trade if t["limit_scale"] == 1.0)
    # the calibrated limits reproduce evaluate's own verdicts (no detector veto fired here)
    assert at1["unknown_rate_known"] == hr["unknown_rate"] and at1["known_named_correctly"] == 1.0
    rates = [t["unknown_rate_known"] for t in trade]
    assert rates == sorted(rates, reverse=True)  # looser limits never flag more
