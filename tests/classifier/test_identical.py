"""CCAs that are Reno by specification on a trace's path: thresholds, labels, probabilities."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from ccscope.classifier.estimator import CCAClassifier
from ccscope.classifier.identical import REGIONS, RENO, identical_here, merge_identical, path_label
from ccscope.classifier.summary import FEATURE_NAMES, TraceSummary

BPF = Path(__file__).resolve().parents[2] / "lab" / "ccas" / "bpf"


def _param(cca: str, name: str) -> int:
    src = (BPF / f"{cca}.bpf.c").read_text()
    m = re.search(rf"PARAM\(\s*__u32\s*,\s*{name}\s*,\s*(\d+)", src)
    assert m, f"{cca}.bpf.c has no PARAM {name}"
    return int(m.group(1))


def test_regions_are_the_zoo_constants() -> None:
    r = {x.cca: x for x in REGIONS}
    assert r["highspeed"].max_window == _param("highspeed", "low_window")  # cwnd <= low_window
    assert r["bic"].max_window == _param("bic", "low_window")  # cwnd <= low_window
    assert r["illinois"].max_window == _param("illinois", "win_thresh") - 1  # cwnd < win_thresh
    assert r["hybla"].max_rtt_ms == _param("hybla", "rtt0_ms")  # rho = 1 up to RTT0


def _trace(wmax: float, rtt_ms: float = 60.0, usable: bool = True) -> TraceSummary:
    f = dict.fromkeys(FEATURE_NAMES, 0.0)
    f["ctx_wmax_pkts"] = math.log(wmax)
    return TraceSummary(f, None if usable else "the trace holds slow start only", rtt_ms=rtt_ms)


def test_a_measurement_is_reno_only_where_every_usable_trace_is() -> None:
    assert path_label("highspeed", [_trace(20), _trace(38)]) == RENO
    assert path_label("highspeed", [_trace(20), _trace(60)]) == "highspeed"  # one trace left the region
    assert path_label("highspeed", [_trace(20), _trace(200, usable=False)]) == RENO  # unusable: no say
    assert path_label("bic", [_trace(20)]) == "bic"
    assert path_label("bic", [_trace(14)]) == RENO
    assert path_label("illinois", [_trace(14)]) == RENO
    assert path_label("illinois", [_trace(15)]) == "illinois"
    assert path_label("hybla", [_trace(500, rtt_ms=20.0)]) == RENO
    assert path_label("hybla", [_trace(5, rtt_ms=40.0)]) == "hybla"
    assert path_label("cubic", [_trace(5, rtt_ms=5.0)]) == "cubic"  # CUBIC's β is 0.7 at any window
    assert path_label("highspeed", []) == "highspeed"
    assert path_label("highspeed", [_trace(20, usable=False)]) == "highspeed"
    every = {r.cca for r in identical_here([_trace(10, rtt_ms=10.0)])}
    assert every == {"highspeed", "bic", "illinois", "hybla"}


def test_merging_moves_the_mass_to_reno() -> None:
    classes = ["bic", "cubic", "highspeed", RENO]
    p = np.array([0.1, 0.2, 0.3, 0.4])
    small = merge_identical(p, classes, [_trace(30)])  # HighSpeed is Reno, BIC is not (30 > 14)
    assert np.allclose(small, [0.1, 0.2, 0.0, 0.7])
    assert np.allclose(merge_identical(p, classes, [_trace(80)]), p)
    assert np.allclose(merge_identical(p, ["a", "b", "c", "d"], [_trace(10)]), p)  # no Reno class
    assert math.isclose(float(small.sum()), 1.0)


def _meas(rng: np.random.Generator, beta: float, wmax: float) -> list[TraceSummary]:
    out = []
    for _ in range(2):
        f = {k: float(rng.normal(0.0, 1.0)) for k in FEATURE_NAMES}
        f["beta"] = beta + rng.normal(0.0, 0.01)
        f["ctx_wmax_pkts"] = math.log(wmax) + rng.normal(0.0, 0.02)
        out.append(TraceSummary(f, None, rtt_ms=50.0))
    return out


def test_the_estimator_names_reno_where_highspeed_is_reno() -> None:
    """A HighSpeed that backs off like Reno (0.5) below 38 segments and to 0.35 above (a
    caricature of b(w)): trained on both, the model calls a small-window HighSpeed Reno."""
    rng = np.random.default_rng(5)
    X, y, g = [], [], []
    for i in range(60):
        w = float(rng.uniform(8, 30)) if i % 2 else float(rng.uniform(60, 200))
        X += [_meas(rng, 0.5, w), _meas(rng, 0.5 if w <= 38 else 0.35, w), _meas(rng, 0.7, w)]
        y += [RENO, "highspeed", "cubic"]
        g += [f"d{i}a", f"d{i}b", f"d{i}c"]
    est = CCAClassifier(n_trees=40, seed=3).fit(X, y, g)
    assert est.get_params()["identical"] is True
    big = est.decide(_meas(rng, 0.35, 120.0))
    assert big.best == "highspeed"
    small = est.decide(_meas(rng, 0.5, 20.0))
    assert small.best == RENO and small.probabilities["highspeed"] == 0.0
    # the training rows of small-window HighSpeed carry Reno's label
    hs = est.classes_.index("highspeed")
    w = FEATURE_NAMES.index("ctx_wmax_pkts")
    assert all(math.exp(r[w]) > 38 for r in est.train_rows_[est.train_y_ == hs])
