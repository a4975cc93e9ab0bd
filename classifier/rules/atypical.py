"""Unknown when the traces lie further from every known trace of the named class than known
measurements of that class did on unseen draws: a k-nearest-neighbour distance, Mondrian
conformal.

The neighbours are found over all features, each in units of its within-class spread, including
the path (RTT, BDP in segments, SACK): the nearest known traces of the class are the ones
measured on paths like this one, so a parameter that differs (CUBIC with beta 0.5, BBR probing
at gain 1.5) shows against its own class on a comparable path, not against the class as a whole.
A measurement's score is the smaller over its traces (a variant differs in every trace; a
glitch in one trace does not make a known CCA Unknown), divided by the class's median score on
its calibration measurements (classes scatter differently: BBR under loss more than Reno), and
compared with the pooled calibration scores of every class (a class alone has too few
measurements for a p-value of a percent or two).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ccscope.classifier.rules.base import RuleResult, conformal_p, sorted_scores

if TYPE_CHECKING:
    from ccscope.classifier.estimator import CCAClassifier


def knn_distance(
    clf: CCAClassifier, rows: np.ndarray, cls: int, exclude_group: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: how far it lies from its k nearest training rows of class `cls` (rows of
    `exclude_group` left out), and the feature that lies furthest.

    The neighbours are the nearest over all features (each in units of its within-class spread,
    context included: the same CCA on a comparable path). The distance is then read feature by
    feature against the neighbours' median, and is the mean of the `knn_top` largest: a
    parameter shows in a few features (a back-off ratio, a queue), and averaged over all of them
    it would drown in the others' noise."""
    ref_sel = clf.train_y_ == cls
    ref = clf.train_rows_[ref_sel]
    if exclude_group is not None:
        ref = ref[clf.train_groups_[ref_sel] != exclude_group]
    if len(ref) == 0 or len(rows) == 0:
        return np.full(len(rows), np.inf), np.zeros(len(rows), dtype=np.int64)
    scale = clf.scale_[None, :]
    z = np.abs(rows[:, None, :] - ref[None, :, :]) / scale[None]
    nan_a, nan_b = np.isnan(rows)[:, None, :], np.isnan(ref)[None, :, :]
    z = np.where(nan_a & nan_b, 0.0, np.where(nan_a | nan_b, clf.knn_nan_cost, np.minimum(z, clf.knn_clip)))
    d = np.sqrt(np.mean(z * z, axis=2))  # (rows, ref)
    k = min(clf.knn_k, d.shape[1])
    near = np.argsort(d, axis=1, kind="stable")[:, :k]
    out, worst = np.empty(len(rows)), np.zeros(len(rows), dtype=np.int64)
    for i in range(len(rows)):
        nb = ref[near[i]]
        # a feature no neighbour has stays NaN; the median skips such columns instead of
        # warning (warnings.catch_warnings is process-wide, so with classifications in threads,
        # as a census runs them, one thread's filter did not cover another's warning)
        centre = np.full(rows.shape[1], np.nan)
        has = ~np.all(np.isnan(nb), axis=0) if len(nb) else np.zeros(rows.shape[1], dtype=bool)
        if has.any():
            centre[has] = np.nanmedian(nb[:, has], axis=0)
        dev = np.abs(rows[i] - centre) / scale[0]
        # a feature measurable here but in none of the neighbours (or the reverse) counts as
        # knn_nan_cost spreads off; absent in both, as none
        dev = np.where(
            np.isnan(rows[i]) & np.isnan(centre), 0.0, np.where(np.isnan(dev), clf.knn_nan_cost, dev)
        )
        dev = np.minimum(dev, clf.knn_clip)
        top = np.sort(dev)[::-1][: max(1, clf.knn_top)]
        out[i] = float(top.mean())
        worst[i] = int(np.argmax(dev))
    return out, worst


class Atypical:
    name = "atypical"

    def fit(self, clf: CCAClassifier) -> dict[str, Any]:
        cal = clf.calib_
        raw: dict[str, list[float]] = {c: [] for c in clf.classes_}
        for m, k, g in zip(cal["measurements"], cal["truth"].tolist(), cal["groups"], strict=True):
            rows = clf.trace_rows(m)
            if len(rows):
                dk, _ = knn_distance(clf, _rounded(rows), int(k), exclude_group=g)
                # a class measured on this draw alone has no other draw to be near: no distance
                # (infinite), and its typical distance stays the default rather than inf / inf
                if np.isfinite(dk.min()):
                    raw[clf.classes_[k]].append(float(dk.min()))
        typical = {c: float(np.median(v)) if v else 1.0 for c, v in raw.items()}
        pooled = [x / max(typical[c], 1e-9) for c, v in raw.items() for x in v]
        return {
            "typical": {c: float(f"{v:.6g}") for c, v in typical.items()},
            "scores": sorted_scores(pooled),
        }

    def check(
        self, clf: CCAClassifier, state: dict[str, Any], rows: np.ndarray, proba: np.ndarray, best: int
    ) -> RuleResult:
        c = clf.classes_[best]
        dk, worst = knn_distance(clf, rows, best)
        i = int(np.argmin(dk))
        score = float(dk[i]) / max(float(state["typical"].get(c, 1.0)), 1e-9)
        cal = state["scores"]
        p = conformal_p(score, cal)
        feat = clf.features[int(worst[i])]
        details = {"distance": score, "p_value": p, "most_different": feat}
        if p > clf.alpha_atypical:
            return RuleResult(p, None, details)
        return RuleResult(
            p,
            f"unlike any known {c} on a comparable path: {score:.1f} times as far from its nearest "
            f"known {c} traces as a typical {c} measurement is (most in {feat}); all but {p:.1%} of "
            f"{len(cal)} known measurements on unseen paths were nearer their class (budget "
            f"{clf.alpha_atypical:.0%})",
            details,
        )


def _rounded(rows: np.ndarray) -> np.ndarray:
    from ccscope.classifier.estimator import _round5

    return np.vectorize(_round5)(rows)
