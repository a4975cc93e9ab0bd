"""Unknown when the forest is not sure enough to be trusted: selective classification with a
stated error budget.

The conformal rules bound how often a *known* CCA is called Unknown; they say nothing about how
often a named verdict is wrong, and off the training paths that is what a census reader needs.
This rule learns, from the out-of-bag calibration set (every training measurement read by trees
that never saw its network draw), the lowest calibrated probability `tau` such that measurements
named at or above it were wrong at most `max_wrong` of the time, counted conservatively (one
extra error, so a handful of lucky calibration measurements cannot open the gate). Below `tau`
the measurement is Unknown.

How well a trace can tell CCAs apart depends on the path: a window of a few segments moves by
whole segments per round trip whatever the controller, and without SACK a recovery hides the
window. So the gate is learnt per **stratum** of the path the trace itself shows (SACK seen or
not; the BDP in segments under 12, 12-40, over 40; `STRATA`), Mondrian-style, where the stratum
holds at least `1 / max_wrong` calibration measurements, and from all of them elsewhere: an
easy path is not held to the gate of the hardest, nor a hard one let through by the easy.

The same test one level up picks `tau_family`: an Unknown measurement whose family (BBR,
CUBIC, Reno, ...) holds at least that much probability is reported as "unknown, <family>-like";
otherwise no family is named.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ccscope.classifier.rules.base import RuleResult

if TYPE_CHECKING:
    from ccscope.classifier.estimator import CCAClassifier

NEVER = 1.01  # a threshold no probability reaches: the budget cannot be met at any confidence
BDP_EDGES = (12.0, 40.0)  # segments: where AIMD steps dominate / where shapes have room


def stratum(clf: CCAClassifier, rows: np.ndarray) -> str:
    """The path stratum of a measurement's usable traces (their median)."""
    names = list(clf.features)
    sack = float(np.nanmedian(rows[:, names.index("ctx_sack")])) >= 0.5 if "ctx_sack" in names else False
    bdp = float(np.exp(np.nanmedian(rows[:, names.index("ctx_bdp_pkts")]))) if "ctx_bdp_pkts" in names else 0
    size = "small" if bdp < BDP_EDGES[0] else "mid" if bdp < BDP_EDGES[1] else "large"
    return f"{'sack' if sack else 'nosack'}-{size}"


def selective_threshold(p: Sequence[float], right: Sequence[bool], max_wrong: float) -> tuple[float, float]:
    """The lowest threshold on `p` whose accepted set (p >= threshold) has a conservative error
    rate (wrong + 1) / (accepted + 1) of at most `max_wrong`, and the share it accepts."""
    order = np.argsort(-np.asarray(p, dtype=np.float64), kind="stable")
    ps = np.asarray(p, dtype=np.float64)[order]
    ok = np.asarray(right, dtype=bool)[order]
    best, cover = NEVER, 0.0
    wrong = 0
    for i in range(len(ps)):
        wrong += int(not ok[i])
        # only cut between distinct values: ties are accepted or refused together
        if i + 1 < len(ps) and ps[i + 1] == ps[i]:
            continue
        if (wrong + 1) / (i + 2) <= max_wrong:
            best, cover = float(ps[i]), (i + 1) / len(ps)
    return best, cover


def family_proba(clf: CCAClassifier, proba: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, c in enumerate(clf.classes_):
        f = clf.families.get(c, c)
        out[f] = out.get(f, 0.0) + float(proba[k])
    return out


class Uncertain:
    name = "uncertain"

    def fit(self, clf: CCAClassifier) -> dict[str, Any]:
        cal = clf.calib_
        pr, truth = cal["proba"], cal["truth"]
        top = pr.argmax(axis=1)
        pmax, right = pr.max(axis=1), top == truth
        tau, cover = selective_threshold(pmax.tolist(), right.tolist(), clf.max_wrong)
        strata = np.array([stratum(clf, clf.trace_rows(m)) for m in cal["measurements"]])
        per: dict[str, dict[str, float | int]] = {}
        for st in sorted(set(strata.tolist())):
            k = strata == st
            if k.sum() * clf.max_wrong >= 1.0:
                t, c = selective_threshold(pmax[k].tolist(), right[k].tolist(), clf.max_wrong)
                per[st] = {"tau": round(t, 6), "coverage": round(c, 4), "n": int(k.sum())}
        fp, fright = [], []
        for row, t in zip(pr, truth, strict=True):
            fam = family_proba(clf, row)
            best = max(fam, key=lambda f: fam[f])
            fp.append(fam[best])
            fright.append(best == clf.families.get(clf.classes_[int(t)], clf.classes_[int(t)]))
        tau_f, cover_f = selective_threshold(fp, fright, clf.max_wrong)
        return {
            "tau": round(tau, 6),
            "coverage": round(cover, 4),
            "strata": per,
            "tau_family": round(tau_f, 6),
            "coverage_family": round(cover_f, 4),
            "calibration_measurements": len(truth),
        }

    def check(
        self, clf: CCAClassifier, state: dict[str, Any], rows: np.ndarray, proba: np.ndarray, best: int
    ) -> RuleResult:
        p = float(proba[best])
        st = stratum(clf, rows)
        tau = float((state.get("strata") or {}).get(st, {}).get("tau", state["tau"]))
        details = {"tau": tau, "p": round(p, 4), "stratum": st}
        if p >= tau:
            return RuleResult(1.0, None, details)
        c = clf.classes_[best]
        where = f"on network draws the trees never saw, named verdicts on paths like this one ({st})"
        if tau > 1.0:
            why = f"{where} were not right {1 - clf.max_wrong:.0%} of the time at any probability"
        else:
            why = f"{where} were right {1 - clf.max_wrong:.0%} of the time only from {tau:.0%} up"
        return RuleResult(0.0, f"not sure enough: {c} at {p:.0%}, and {why}", details)

    @staticmethod
    def family(clf: CCAClassifier, state: dict[str, Any], proba: np.ndarray) -> str | None:
        """The family to name in an Unknown verdict, when its probability clears `tau_family`."""
        fam = family_proba(clf, proba)
        best = max(fam, key=lambda f: fam[f])
        return best if fam[best] >= float(state.get("tau_family", NEVER)) else None
