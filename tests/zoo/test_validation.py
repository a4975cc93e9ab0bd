"""The validation suite (lab/validate/): its analysis on synthetic series, then its quick
subset on the real lab (real kernel TCP, BPF zoo, ccscope-link paths): beta of reno, cubic,
bic and scalable, Reno's +1 segment per RTT, Vegas holding its queue between alpha and beta,
and the BPF CUBIC against the kernel's under profile A.

The lab runs as instance $CCSCOPE_VALIDATE_INSTANCE (default 3) in its own state directory,
so it does not collide with a lab someone else has up.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from ccscope.lab import validate as v
from ccscope.lab.validate import checks, cubic, series
from ccscope.lab.validate.series import LinkPath, Row, Series

from .conftest import ccas

pytestmark = [pytest.mark.netns, pytest.mark.slow]

# --- the analysis on synthetic data (no lab) ---------------------------------------------------


def _series(t: np.ndarray, cwnd: np.ndarray, ssth: np.ndarray, ca: np.ndarray, srtt: float = 0.04) -> Series:
    n = len(t)
    return Series(
        cca="x", run_id="r", path=LinkPath(), t=t, cwnd=cwnd.astype(float), ssthresh=ssth.astype(float),
        ca_state=ca.astype(int), srtt=np.full(n, srtt), min_rtt=np.full(n, srtt), delivery=np.zeros(n),
        pacing=np.zeros(n), acked=np.zeros(n), retrans=np.zeros(n), mss=1448, start_ns=0,
    )  # fmt: skip


def test_reductions_and_beta_from_a_sawtooth():
    """Reno-like sawtooth: +1 per RTT, halved at each loss, Recovery lasting one RTT."""
    dt, rtt = 0.001, 0.04
    t, cw, ss, ca = [], [], [], []
    w, s, clock = 20.0, float(series.INF_SSTHRESH), 0.0
    for _ in range(4):
        while w < 40:
            t.append(clock), cw.append(math.floor(w)), ss.append(s), ca.append(0)
            w += dt / rtt
            clock += dt
        s = math.floor(w) // 2
        for _ in range(40):  # one RTT in Recovery
            t.append(clock), cw.append(s), ss.append(s), ca.append(3)
            clock += dt
        w = float(s)
    ser = _series(np.array(t), np.array(cw), np.array(ss), np.array(ca))
    evs = series.reductions(ser)
    assert [e.kind for e in evs] == ["recovery"] * 4
    assert evs[0].slow_start and not evs[1].slow_start
    assert all(abs(e.beta - 0.5) < 0.03 for e in evs)
    assert len(series.ca_events(ser, ("recovery",))) == 3
    rows = checks._growth_rows(ser, "reno", 1.0, 0.1, "growth")
    assert rows[0].passed, rows[0]


def test_open_state_cuts_are_reductions_too():
    t = np.arange(0, 1, 0.001)
    cw = np.where(t < 0.5, 50, 35)
    ser = _series(t, cw, np.full(len(t), 30), np.zeros(len(t)))
    (e,) = series.reductions(ser)
    assert e.kind == "open" and abs(e.cwnd_end / e.cwnd_before - 0.7) < 1e-9


def test_cubic_fit_recovers_c_and_k():
    t = np.arange(0, 6, 0.01)
    w = 0.4 * (t - 4.0) ** 3 + 100 + np.random.default_rng(1).normal(0, 0.3, len(t))
    c, k, wo, rms = series.fit_cubic(t, w)
    assert abs(c - 0.4) < 0.03 and abs(k - 4.0) < 0.1 and abs(wo - 100) < 1 and rms < 0.5


@pytest.mark.parametrize("cca", ["bbr2", "bbr3"])
def test_bbr_startup_and_drain_gains_from_pacing_over_delivery(cca: str):
    """Startup paces at gain x delivery rate (x 0.99, BBR's margin) once delivery reaches the
    link rate; Drain paces below it until the queue is gone; then ~1.0."""
    spec = checks.BBR_SPECS[cca]
    t = np.arange(0, 2, 0.001)
    link = 10e6 / 8
    delivery = np.minimum(link, 1e5 * np.exp2(t / 0.04))
    gain = np.where(t < 0.5, spec.startup_gain, np.where(t < 0.55, spec.drain_gain, 1.0))
    ser = _series(t, np.full(len(t), 40), np.full(len(t), series.INF_SSTHRESH), np.zeros(len(t)))
    ser.delivery, ser.pacing = delivery, gain * 0.99 * delivery
    startup, drain = checks._bbr_startup_rows(ser, cca, spec)
    assert startup.passed and abs(startup.measured - spec.startup_gain) < 0.01, startup
    assert drain.passed and abs(drain.measured - spec.drain_gain) < 0.01, drain
    assert {ch.name for ch in v.select_checks([cca])} >= {cca}


def test_highspeed_response_function():
    assert checks.hs_b(38) == 0.5 and abs(checks.hs_b(83000) - 0.1) < 1e-9
    assert checks.hs_a(38) == 1 and checks.hs_a(200) == 2 and checks.hs_a(300) == 3


def test_illinois_alpha_curve():
    assert checks.illinois_alpha(0.0, 0.1) == 10.0
    assert abs(checks.illinois_alpha(0.1, 0.1) - 0.3) < 1e-9
    assert 0.3 < checks.illinois_alpha(0.02, 0.1) < 10


def test_permutation_tests():
    rng = np.random.default_rng(2)
    # Two groups drawn alike: cross and within distances agree, p is large.
    pts = rng.normal(0, 1, 10)
    d = np.abs(pts[:, None] - pts[None, :])
    same = cubic.distance_permutation_test(d, 5)
    assert same["splits"] == 252 and same["p_value"] > 0.05
    # Shifted groups: cross distances dominate, p hits the exact test's floor.
    pts[5:] += 5
    d = np.abs(pts[:, None] - pts[None, :])
    diff = cubic.distance_permutation_test(d, 5)
    assert diff["p_value"] <= 2 / 252 + 1e-9 and diff["ratio"] > 2
    assert cubic.feature_permutation_test(list(pts), 5) <= 2 / 252 + 1e-9


def test_row_pass_rule():
    assert Row("x", "p", 0.69, 0.7, 0.05).passed
    assert not Row("x", "p", 0.6, 0.7, 0.05).passed
    assert not Row("x", "p", None, 0.7, 0.05).passed
    assert not Row("x", "p", float("nan"), 0.7, 0.05).passed


def test_unknown_cca_is_a_clear_error():
    with pytest.raises(KeyError, match="no lab address"):
        v.select_checks(["nosuchcca"])


# --- the quick subset on the real lab -----------------------------------------------------------


@pytest.fixture(scope="module")
def report() -> v.Report:
    instance = int(os.environ.get("CCSCOPE_VALIDATE_INSTANCE", v.DEFAULT_INSTANCE))
    state_dir = Path(os.environ.get("CCSCOPE_VALIDATE_DIR", "/run/ccscope/lab-validate-test"))
    registered_before = set(ccas.kernel_available())
    rep = v.run_validation(fast=True, instance=instance, state_dir=state_dir, jobs=3)
    # The lab is down again and nothing it registered outlives it (unless another lab uses it).
    assert not (state_dir / "state.json").exists()
    left = set(ccas.kernel_available()) - registered_before
    assert not left - v._used_by_other_labs(sorted(left), state_dir), f"left registered: {left}"
    return rep


def _row(rep: v.Report, cca: str, prefix: str) -> Row:
    rows = [r for r in rep.rows if r.cca == cca and r.parameter.startswith(prefix)]
    assert rows, f"no {cca} row starting {prefix!r}; errors: {rep.errors}"
    return rows[0]


def test_no_check_errored(report: v.Report):
    assert not report.errors, report.errors


@pytest.mark.parametrize("cca", ["reno", "cubic", "bic", "scalable"])
def test_multiplicative_decrease(report: v.Report, cca: str):
    r = _row(report, cca, "beta")
    assert r.passed, r.to_dict()
    assert r.n >= 1


def test_reno_grows_one_segment_per_rtt(report: v.Report):
    r = _row(report, "reno", "growth per RTT")
    assert r.passed, r.to_dict()


def test_vegas_holds_alpha_to_beta_segments(report: v.Report):
    r = _row(report, "vegas", "queue held")
    assert r.passed, r.to_dict()


def test_bpf_cubic_matches_kernel_cubic(report: v.Report):
    (c,) = report.cubic_compare
    assert c["profile"] == "A" and c["n"] == 4
    assert c["pass"], {k: c[k] for k in ("value", "ratio", "p_value", "features")}


def test_report_formats(report: v.Report):
    text = v.format_report(report)
    assert "reno" in text and "cubic BPF vs kernel, profile A" in text
    d = report.to_dict()
    assert d["rows"] and "cubic_bpf_vs_kernel" in d and "ccas_loaded" in d


def test_illinois_decrease_curve():
    assert checks.illinois_b(0.0, 0.1) == 0.125 and checks.illinois_b(0.09, 0.1) == 0.5
    assert abs(checks.illinois_b(0.045, 0.1) - 0.3125) < 1e-9


def test_median_row_and_its_missing_row():
    """A check's row: the median of what was measured, or the reason nothing was."""
    r = checks._median_row("yeah", "beta", [0.8, 0.9, 0.85], 0.875, "3 losses", missing="no CA loss")
    assert r.measured == 0.85 and r.n == 3 and r.note == "3 losses"
    m = checks._median_row("yeah", "beta", [], 0.875, "0 losses", missing="no CA loss")
    assert m.measured is None and m.note == "no CA loss" and m.expected == 0.875
