"""Each pipeline stage on real lab traces."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from ccscope.classifier import features as F
from ccscope.classifier.detectors import comb_match, detect_bbr1, detect_bbr3, find_dips
from ccscope.classifier.forest import RandomForest
from ccscope.classifier.gnb import GaussianNB
from ccscope.trace import Trace
from tests.classifier.conftest import fixture_path


def test_prepare_grid_and_units(traces: dict[tuple[str, str], Trace]) -> None:
    t = traces[("cubic", "A")]
    p = F.prepare(t)
    assert np.allclose(np.diff(p.t), p.dt) and p.dt == F.grid_step(p.rtt)
    # BiF in BDPs of payload: 200 kbit/s x ~116 ms at 5 ms one way is 2.9 kB on the wire, of
    # which 48 bytes in every 100-byte packet are payload
    assert 1300 < p.bdp < 1500 and abs(p.rtt - t.base_rtt_ms / 1000) < 1e-9
    assert p.mss == 48


def test_prepare_reads_the_sack_pipe(traces: dict[tuple[str, str], Trace]) -> None:
    """With SACK the window series is BiF less SACKed bytes: below BiF inside a recovery (where
    BiF jumps with every segment the client holds above a hole), equal to it outside."""
    t = traces[("reno", "A")]
    assert "sacked" in t.columns and t.columns["sacked"].max() > 0
    p = F.prepare(t)
    assert p.sack and np.array_equal(p.raw, p.pipe)
    idx = np.clip(np.searchsorted(t.t, p.t + t.t[0], side="right") - 1, 0, len(t.t) - 1)
    bif = t.bif[idx] / p.bdp
    assert np.all(p.raw <= bif + 1e-12) and np.mean(p.raw < bif - 0.2) > 0.01
    # the same trace without its SACK column falls back to the duplicate-ACK estimate
    bare = Trace(flow=t.flow, t=t.t, bif=t.bif, start_time=t.start_time, profile=t.profile,
                 base_rtt_ms=t.base_rtt_ms, internet_rtt_ms=t.internet_rtt_ms, events=t.events)  # fmt: skip
    q = F.prepare(bare)
    assert not q.sack and np.array_equal(q.raw, bif)


def _f(a: F.TraceAnalysis, name: str) -> float:
    return float(a.features[name])


def test_growth_and_backoff_tell_reno_veno_cubic_bic_apart(traces: dict[tuple[str, str], Trace]) -> None:
    """The congestion-avoidance parameters SACK makes visible: Veno grows at half Reno's rate
    once a queue builds, both halve; CUBIC cuts to 0.7, BIC to 0.8."""
    for prof in "AB":
        reno, veno = F.analyse(traces[("reno", prof)]), F.analyse(traces[("veno", prof)])
        cubic, bic = F.analyse(traces[("cubic", prof)]), F.analyse(traces[("bic", prof)])
        assert _f(veno, "growth") < 0.7 * _f(reno, "growth")
        for a, beta in ((reno, 0.5), (veno, 0.5), (cubic, 0.7), (bic, 0.8)):
            assert abs(_f(a, "beta_pipe") - beta) < 0.03


def test_standing_queue_of_vegas(traces: dict[tuple[str, str], Trace]) -> None:
    """Vegas holds alpha..beta = 2..4 segments in the queue; a loss-based sender fills it."""
    for prof in "AB":
        assert 1.0 < _f(F.analyse(traces[("vegas", prof)]), "queue_pkts") < 6.0
        assert _f(F.analyse(traces[("cubic", prof)]), "queue_pkts") > 20.0
        # the settled queue the parameter check reads: the same target, NaN never here
        assert 2.0 < _f(F.analyse(traces[("vegas", prof)]), "queue_eq") < 6.0


def test_probe_pulses_of_bbr(traces: dict[tuple[str, str], Trace]) -> None:
    """BBRv1's ProbeBW: a 1.25x pulse every 8 RTT; BBRv3 climbs to its in-flight bound (a
    triangle: a good share of each probe spent climbing, little at the top)."""
    for prof in "AB":
        v1 = F.analyse(traces[("bbr", prof)])
        assert abs(_f(v1, "pulse_gain") - 1.25) < 0.06 and _f(v1, "pulses_per_100rtt") > 5.0
        v3 = F.analyse(traces[("bbr3", prof)])
        assert _f(v3, "pulse_rise") > 0.2 and _f(v3, "pulse_top") < 0.15


def test_lowpass_removes_sub_rtt_variation() -> None:
    t = np.arange(0, 20, F.DT)
    slow, fast = np.sin(2 * np.pi * 0.2 * t), 0.5 * np.sin(2 * np.pi * 25 * t)
    y = F.lowpass(slow + fast, F.DT, 1 / 0.15)
    assert np.max(np.abs(y - slow)[100:-100]) < 0.05


def test_slow_start_and_backoffs_on_cubic(traces: dict[tuple[str, str], Trace]) -> None:
    p = F.prepare(traces[("cubic", "A")])
    bo = F.find_backoffs(p)
    assert bo and bo[0].cause == "loss"
    ss = F.find_slow_start_end(p, bo)
    # HyStart ends CUBIC's slow start a little before the first loss; never after its recovery
    assert 0.5 < ss <= bo[0].end
    a = F.analyse(traces[("cubic", "A")])
    assert a.segments, "congestion avoidance between recoveries becomes segments"
    for s in a.segments:
        assert s.end - s.start >= F.MIN_SEGMENT_RTTS * p.rtt and s.degree in (1, 2, 3)


def test_a_window_held_below_the_profile_is_not_called_slow_start(
    traces: dict[tuple[str, str], Trace],
) -> None:
    """A Reno trace whose profile claims a bottleneck 100x faster than the one that held it, as
    when a shared link upstream of the profile is the real one: the window never fills the
    profile's BDP, so no back-off counts, and the reason says so instead of "slow start"."""
    t = traces[("reno", "A")]
    prof = json.loads(json.dumps(t.profile))
    prof["down"]["rate"] = prof["up"]["rate"] = "20000kbit"
    fast = Trace(flow=t.flow, t=t.t, bif=t.bif, start_time=t.start_time, profile=prof,
                 base_rtt_ms=t.base_rtt_ms, internet_rtt_ms=t.internet_rtt_ms, events=t.events,
                 columns=t.columns)  # fmt: skip
    held = r"never reached this profile's BDP \(at most 0\.05 of it\) but lost packets \d+ times"
    with pytest.raises(F.InsufficientData, match=held):
        F.analyse(fast)
    # without loss events (a QUIC trace: the packets are encrypted) the cause stays open
    quiet = Trace(flow=t.flow, t=t.t, bif=t.bif, start_time=t.start_time, profile=prof,
                  base_rtt_ms=t.base_rtt_ms, internet_rtt_ms=t.internet_rtt_ms,
                  events={"dupack": t.events["dupack"]}, columns=t.columns)  # fmt: skip
    with pytest.raises(F.InsufficientData, match="either slow start never ended, or something other"):
        F.analyse(quiet)
    # on its own profile the same trace is read as before
    assert F.analyse(t).segments


def test_no_loss_sender_leaves_slow_start_on_stall(traces: dict[tuple[str, str], Trace]) -> None:
    a = F.analyse(traces[("vegas", "A")])
    assert a.ss_end < 5.0 and a.ca_end - a.ss_end > 10.0


def test_fit_segment_degree_choice() -> None:
    u = np.linspace(0, 1, 300)
    assert F.fit_segment(u)[0] == 1
    assert F.fit_segment(1 - (1 - u) ** 2)[0] == 2
    # CUBIC's concave-then-convex window growth needs the cubic term
    assert F.fit_segment((u - 0.5) ** 3)[0] == 3


def test_feature_vector_is_finite_and_named(traces: dict[tuple[str, str], Trace]) -> None:
    for t in traces.values():
        a = F.analyse(t)
        # NaN marks "not measurable here" (e.g. no loss: no back-off ratio); never infinite
        v = np.array(list(a.features.values()))
        assert tuple(a.features) == F.FEATURES and not np.any(np.isinf(v))
        assert np.sum(np.isnan(v)) < len(F.FEATURES) // 2


def test_bbr3_detector_sees_probe_rtt_every_5s(traces: dict[tuple[str, str], Trace]) -> None:
    a = F.analyse(traces[("bbr3", "B")])
    f = detect_bbr3(a)
    hit, _teeth = f.evidence["probe_rtt_matched"]
    assert hit >= 2 and 4.6 <= f.evidence["probe_rtt_period_s"] <= 6.0
    assert f.score > detect_bbr3(F.analyse(traces[("cubic", "B")])).score
    assert find_dips(a.prepared, a.keep, a.ss_end, a.ca_end)


def test_bbr1_detector_reports_evidence(traces: dict[tuple[str, str], Trace]) -> None:
    f = detect_bbr1(F.analyse(traces[("bbr", "B")]))
    assert 0.0 <= f.score <= 1.0 and "probe_bw_period_rtts" in f.evidence and f.summary


def test_gnb_fit_predict_proba_roundtrip() -> None:
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0, 1, (50, 3)), rng.normal(4, 1, (50, 3))])
    y = ["a"] * 50 + ["b"] * 50
    g = GaussianNB().fit(X, y)
    assert g.predict(np.array([[0, 0, 0], [4, 4, 4]])) == ["a", "b"]
    p = g.predict_proba(np.array([[2.0, 2.0, 2.0]]))
    assert p.shape == (1, 2) and abs(p.sum() - 1) < 1e-12
    g2 = GaussianNB.from_dict(g.to_dict())
    # the artifact keeps 6 significant digits
    assert np.allclose(g2.joint_log_likelihood(X), g.joint_log_likelihood(X), rtol=1e-4)
    assert g.typicality(np.array([[0.0, 0.0, 0.0]]))[0, 0] < g.typicality(np.array([[9.0, 9, 9]]))[0, 0]


def test_comb_match_tolerates_extra_and_missing_dips() -> None:
    times = [3.0, 8.1, 9.0, 13.2, 23.1]  # 5 s comb from 3 s, one ProbeRTT (18 s) missing, one extra
    frac, per, hit, teeth = comb_match(times, 2.0, 25.0, np.arange(4.6, 6.01, 0.1), 0.5)
    assert 4.9 <= per <= 5.1 and hit == 4 and teeth == 5 and abs(frac - 0.8) < 1e-9
    assert comb_match([4.0], 0.0, 20.0, np.arange(4.6, 6.01, 0.1), 0.5)[2] == 0


def _blobs(seed: int) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    # class "a" and "b" differ in feature 0 only; feature 1 is noise, feature 2 sometimes missing
    X = rng.normal(size=(200, 3))
    y = ["a" if v < 0 else "b" for v in X[:, 0]]
    X[rng.random(200) < 0.3, 2] = np.nan
    return X, y


def test_forest_learns_splits_and_roundtrips() -> None:
    X, y = _blobs(1)
    f = RandomForest(n_trees=20, seed=3).fit(X, y)
    Xt, yt = _blobs(2)
    acc = np.mean(np.array(f.predict(Xt)) == np.array(yt))
    assert acc > 0.9, acc
    # the informative feature carries most of the splits
    assert int(np.argmax(f.feature_importance())) == 0
    p = f.predict_proba(Xt)
    assert np.allclose(p.sum(axis=1), 1.0)
    g = RandomForest.from_dict(json.loads(json.dumps(f.to_dict())))
    assert np.allclose(g.predict_proba(Xt), p, atol=1e-3)
    # seeded: the same data gives the same trees
    assert RandomForest(n_trees=20, seed=3).fit(X, y).to_dict() == f.to_dict()


def test_forest_missing_feature_is_a_value() -> None:
    # whether a feature exists at all (a back-off ratio needs a loss) can decide the class
    X = np.array([[np.nan], [np.nan], [np.nan], [0.5], [0.6], [0.7]] * 5)
    y = ["vegas", "vegas", "vegas", "cubic", "cubic", "cubic"] * 5
    f = RandomForest(n_trees=5, seed=0).fit(X, y)
    assert f.predict(np.array([[np.nan], [0.65]])) == ["vegas", "cubic"]


@pytest.mark.parametrize(
    ("field", "change", "message"),
    [
        ("left", lambda v: [0, *v[1:]], "outside"),  # a node pointing at itself would walk forever
        ("threshold", lambda v: v[:-1], "length"),
        ("feature", lambda v: [99, *v[1:]], "outside"),
        ("leaf", lambda v: v[:-1], "leaf table"),
    ],
)
def test_forest_rejects_hostile_documents(field: str, change: Any, message: str) -> None:
    X, y = _blobs(1)
    d = RandomForest(n_trees=2, seed=0).fit(X, y).to_dict()
    with pytest.raises(ValueError, match=message):
        RandomForest.from_dict({**d, field: change(d[field])})


def test_forest_rejects_other_documents() -> None:
    with pytest.raises(ValueError, match="not a random forest"):
        RandomForest.from_dict({"kind": "gnb"})


def test_forest_splits_adjacent_floats() -> None:
    # two classes one float apart: the cut between them must still leave both sides non-empty
    a = 0.3
    b = float(np.nextafter(a, 1.0))
    X = np.array([[a]] * 4 + [[b]] * 4)
    y = ["lo"] * 4 + ["hi"] * 4
    f = RandomForest(n_trees=3, seed=0).fit(X, y)
    assert f.predict(np.array([[a], [b]])) == ["lo", "hi"]
    assert np.isfinite(f.value).all()


def test_probe_slope_reads_the_probe_gain_on_lab_traces() -> None:
    """On the d5 lab traces every BBR version climbs into its probes at 0.25 BDP per RTT (gain
    1.25) and BBRv3 with gain 1.5 at 0.5; Vegas makes no probes to climb."""
    i = "probe_slope"
    expect = {"bbr": (0.22, 0.28), "bbr2": (0.22, 0.28), "bbr3": (0.22, 0.28), "bbr3-g15": (0.44, 0.56)}
    for cca, (lo, hi) in expect.items():
        for prof in "AB":
            v = F.analyse(Trace.load(fixture_path(cca, prof))).features[i]
            assert lo < v < hi, (cca, prof, v)
    assert np.isnan(F.analyse(Trace.load(fixture_path("vegas", "A"))).features[i])


def test_early_growth_reads_the_climb_after_a_back_off() -> None:
    """The first two round trips of each segment, in segments per RTT: a pipe climbing 4
    segments per RTT reads 4 whatever follows; on the d5 lab traces CUBIC with beta 0.5, whose
    cubic curve starts further below W_max, climbs back faster than CUBIC, and Reno adds about
    one segment per RTT."""
    from types import SimpleNamespace

    rtt, bdp_seg = 0.2, 50.0
    t = np.arange(0.0, 4.0, 0.01)
    ps = 1.0 + np.minimum(t / rtt * 4.0, 20.0) / bdp_seg  # 4 per RTT for 5 RTT, then flat
    p = SimpleNamespace(rtt=rtt, t=t, bdp=bdp_seg * 100.0, mss=100.0, dt=0.01)
    seg = F.Segment(0.0, 3.0, "loss", 0.5)
    assert abs(F.early_growth(p, ps, [seg]) - 4.0) < 0.05  # type: ignore[arg-type]
    assert np.isnan(F.early_growth(p, ps, [F.Segment(0.0, 0.3, "loss", 0.5)]))  # type: ignore[arg-type]
    i = "early_growth"
    eg = {c: F.analyse(Trace.load(fixture_path(c, "B"))).features[i] for c in ("cubic", "cubic-b50", "reno")}
    assert eg["cubic-b50"] > 2.0 * eg["cubic"] and 0.2 < eg["reno"] < 1.5, eg


def test_rise_rate_is_read_over_the_climb() -> None:
    """The rate comes from the climb that led into an excursion, from its last local minimum,
    over 10-90 % of it: a flat stretch before the climb does not dilute it."""
    x = np.concatenate([np.full(50, 1.0), 1.0 + 0.01 * np.arange(1, 41), np.full(20, 1.4)])
    a = int(np.argmax(x > 1.15))  # where the excursion starts
    k = int(np.argmax(x))
    assert abs(F._rise_rate(x, a, k, back=100) - 0.01) < 1e-9
    assert np.isnan(F._rise_rate(np.full(10, 1.0), 5, 5, back=5))  # no climb


def test_settled_queue_needs_a_queue_that_has_settled() -> None:
    """Vegas draining slow start's queue one segment per round trip is passing through, not at,
    its target; a window held under the BDP has no target to read."""
    bdp = 50.0
    t = np.linspace(0.0, 1.0, 400)
    flat = 1.0 + (4.0 + 0.5 * np.sin(40 * t)) / bdp  # 4 segments queued, wobbling
    assert 3.5 < F.settled_queue(flat, bdp) < 5.0
    draining = 1.0 + (40.0 - 60.0 * t) / bdp  # +40 -> -20 segments over the window
    assert np.isnan(F.settled_queue(draining, bdp))
    assert np.isnan(F.settled_queue(np.full(400, 0.7), bdp))  # 15 segments under the BDP
    assert np.isnan(F.settled_queue(np.array([1.1]), bdp))
    # a loss late in the window halves it and it climbs back: the trend drifts, yet the sender
    # held 10 segments for most of the window, and that is its target
    q = np.concatenate([np.full(300, 10.0) + 0.3 * np.sin(np.arange(300)), np.linspace(-25.0, 8.0, 100)])
    assert abs(np.polyfit(t, q, 1)[0]) > F.SETTLE_SEGMENTS
    assert 9.5 < F.settled_queue(1.0 + q / bdp, bdp) < 10.6


def test_held_crest_reads_the_queue_held_not_a_spike() -> None:
    """The largest queue held for CREST_RTTS round trips: a spike shorter than that is no
    crest, a drain (slow start's queue emptied a segment per round trip) is passing through, a
    queue never over the BDP is no reading; on the d5 lab traces Vegas holds at most its beta
    (4) plus a segment, Vegas with alpha 6 (beta 12) about 10."""
    bdp, r = 50.0, 10  # grid steps per round trip
    q = np.concatenate([np.full(40, -10.0), np.full(30, 5.0), [30.0], np.full(40, 2.0)])
    assert abs(F.held_crest(1.0 + q / bdp, bdp, r) - 5.0) < 1e-9
    drain = np.concatenate([60.0 - np.arange(400) / r, np.full(100, 3.0)])  # 60 -> 20, then 3
    assert abs(F.held_crest(1.0 + drain / bdp, bdp, r) - 3.0) < 1e-9
    assert np.isnan(F.held_crest(1.0 + (60.0 - np.arange(400) / r) / bdp, bdp, r))  # still draining
    assert np.isnan(F.held_crest(np.full(100, 0.8), bdp, r))  # under the BDP throughout
    assert np.isnan(F.held_crest(np.full(15, 1.2), bdp, r))  # shorter than the window
    i = "queue_crest"
    for prof in "AB":
        vegas = F.analyse(Trace.load(fixture_path("vegas", prof))).features[i]
        a6 = F.analyse(Trace.load(fixture_path("vegas-a6", prof))).features[i]
        assert 2.0 < vegas < 6.5 and 8.0 < a6 < 13.0, (prof, vegas, a6)
