"""The estimator and its Unknown rules on synthetic measurements whose truth is known."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ccscope.classifier.estimator import CCAClassifier
from ccscope.classifier.rules import RULES, conformal_p
from ccscope.classifier.summary import FEATURE_NAMES, TraceSummary

CENTRES = {"a": 0.5, "b": 0.7, "c": 0.9}


def _meas(rng: np.random.Generator, centre: float, path: float, n: int = 2) -> list[TraceSummary]:
    """A measurement of `n` traces: 'beta' carries the class, 'ctx_rtt' the path, the rest noise
    (and 'growth' depends on the path as a CCA's shape does)."""
    out = []
    for _ in range(n):
        f = {k: float(rng.normal(0.0, 1.0)) for k in FEATURE_NAMES}
        f["beta"] = centre + rng.normal(0.0, 0.02)
        f["ctx_rtt"] = path + rng.normal(0.0, 0.05)
        f["growth"] = path * (1.0 + centre) + rng.normal(0.0, 0.1)
        f["queue_eq"] = math.nan
        out.append(TraceSummary(f, None, rtt_ms=math.exp(path)))
    return out


def _data(seed: int, per_class: int = 60) -> tuple[list[list[TraceSummary]], list[str], list[str]]:
    rng = np.random.default_rng(seed)
    X, y, g = [], [], []
    for i in range(per_class):
        for c, centre in CENTRES.items():
            X.append(_meas(rng, centre, rng.uniform(3.0, 6.0)))
            y.append(c)
            g.append(f"draw{seed}-{i}-{c}")
    return X, y, g


@pytest.fixture(scope="module")
def fitted() -> CCAClassifier:
    X, y, g = _data(1)
    return CCAClassifier(n_trees=40, seed=3).fit(X, y, g)


def test_fit_predict_names_the_classes(fitted: CCAClassifier) -> None:
    X, y, _ = _data(2, per_class=10)
    pred = fitted.predict(X)
    assert np.mean([p == t for p, t in zip(pred, y, strict=True)]) > 0.9
    pr = fitted.predict_proba(X)
    assert pr.shape == (len(X), 3) and np.allclose(pr.sum(axis=1), 1.0)


def test_params_roundtrip_and_unknown_params_refused() -> None:
    c = CCAClassifier(n_trees=7, knn_k=3)
    p = c.get_params()
    assert p["n_trees"] == 7 and p["knn_k"] == 3 and tuple(p["features"]) == FEATURE_NAMES
    assert CCAClassifier(**p).get_params() == p
    assert c.set_params(alpha_atypical=0.05).alpha_atypical == 0.05
    with pytest.raises(ValueError, match="unknown parameter"):
        c.set_params(nope=1)


def test_model_document_roundtrip(fitted: CCAClassifier) -> None:
    doc = json.loads(json.dumps(fitted.to_dict(), allow_nan=False))
    again = CCAClassifier.from_dict(doc)
    X, _, _ = _data(4, per_class=5)
    assert np.allclose(again.predict_proba(X), fitted.predict_proba(X))
    assert [r.name for r in RULES] == sorted(doc["rules"], key=[r.name for r in RULES].index)


def test_a_class_from_one_draw_still_gives_a_model_document() -> None:
    """A small collection can hold a class measured on one draw only: leaving that draw out
    leaves no neighbour to be typical against. The model is still finite and saves."""
    X, y, g = _data(5, per_class=6)
    only = [i for i, c in enumerate(y) if c == "c"]
    g = [("the-one-draw" if i in only else d) for i, d in enumerate(g)]
    clf = CCAClassifier(n_trees=10, seed=3).fit(X, y, g)
    doc = json.loads(json.dumps(clf.to_dict(), allow_nan=False))
    assert doc["rules"]["atypical"]["typical"]["c"] == 1.0
    assert len(CCAClassifier.from_dict(doc).predict(X)) == len(X)


def test_a_parameter_no_class_has_is_atypical(fitted: CCAClassifier) -> None:
    """beta 0.3: the forest names the nearest class, the atypicality rule says no known trace of
    it on a comparable path looks like this."""
    rng = np.random.default_rng(9)
    d = fitted.decide(_meas(rng, 0.3, 4.5))
    assert d.label is None and d.best == "a" and any("unlike any known a" in r for r in d.reasons)
    assert d.p_values["atypical"] <= fitted.alpha_atypical


def test_known_measurements_rarely_unknown(fitted: CCAClassifier) -> None:
    """The budget: on fresh draws of the known classes the rules together call at most about
    alpha_ambiguous + alpha_atypical Unknown."""
    X, _, _ = _data(5, per_class=40)
    unknown = np.mean([p == "unknown" for p in fitted.predict(X)])
    assert unknown <= fitted.alpha_ambiguous + fitted.alpha_atypical + 0.04


def test_one_trace_is_enough(fitted: CCAClassifier) -> None:
    rng = np.random.default_rng(11)
    d = fitted.decide(_meas(rng, 0.9, 4.0, n=1))
    assert d.best == "c" and d.probabilities["c"] > 0.5


def test_insufficient_traces_are_skipped(fitted: CCAClassifier) -> None:
    rng = np.random.default_rng(12)
    m = [*_meas(rng, 0.7, 4.0, n=1), TraceSummary({}, "only 3 round trips")]
    assert fitted.predict([m]) == ["b"]
    assert fitted.predict([[TraceSummary({}, "empty")]]) == ["insufficient"]


def test_conformal_p_counts_the_new_score() -> None:
    cal = [0.1, 0.2, 0.3, 0.4]
    assert conformal_p(0.05, cal) == 1.0
    assert conformal_p(0.35, cal) == 2 / 5
    assert conformal_p(9.0, cal) == 1 / 5
    assert conformal_p(0.3, []) == 1.0


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d["params"].update({"bogus": 1}), "unknown estimator parameters"),
        (lambda d: d.update({"temperature": {"2": -1.0}}), "positive temperature"),
        (lambda d: d.update({"scale": [1.0]}), "do not match"),
        (lambda d: d.update({"train_y": [99] * len(d["train_y"])}), "classes it does not have"),
    ],
)
def test_damaged_documents_are_refused(fitted: CCAClassifier, damage: object, message: str) -> None:
    doc = json.loads(json.dumps(fitted.to_dict()))
    damage(doc)  # type: ignore[operator]
    with pytest.raises(ValueError, match=message):
        CCAClassifier.from_dict(doc)
