"""Each pipeline stage on real lab traces."""

from __future__ import annotations

import numpy as np

from ccscope.classifier import features as F
from ccscope.classifier.detectors import comb_match, detect_bbr1, detect_bbr3, find_dips
from ccscope.classifier.gnb import GaussianNB
from ccscope.trace import Trace


def test_prepare_grid_and_units(traces: dict[tuple[str, str], Trace]) -> None:
    t = traces[("cubic", "A")]
    p = F.prepare(t)
    assert np.allclose(np.diff(p.t), F.DT)
    # BiF in BDPs: the path BDP of profile A is ~2.9 kB (200 kbit/s x ~116 ms at 5 ms one way)
    assert 2500 < p.bdp < 4500 and abs(p.rtt - t.base_rtt_ms / 1000) < 1e-9
    assert p.mss == 48


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
        assert a.features.shape == (len(F.FEATURES),) and not np.any(np.isinf(a.features))
        assert np.sum(np.isnan(a.features)) < len(F.FEATURES) // 2


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
