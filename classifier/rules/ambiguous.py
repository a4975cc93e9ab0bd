"""Unknown when no class explains the traces as well as known measurements were explained on
unseen draws: nonconformity 1 - P(named class), conformal over the pooled calibration set (every
class's out-of-bag measurements: a class has too few of its own for a p-value of a percent or
two, and P(class) is on one scale for all).

The same p-values, over every class, give the conformal prediction set: the classes the
measurement cannot rule out at the rule's alpha (`also_consistent_with` in the verdict).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ccscope.classifier.rules.base import RuleResult, conformal_p, sorted_scores

if TYPE_CHECKING:
    from ccscope.classifier.estimator import CCAClassifier


class Ambiguous:
    name = "ambiguous"

    def fit(self, clf: CCAClassifier) -> dict[str, Any]:
        cal = clf.calib_
        truth = cal["truth"]
        return {"scores": sorted_scores((1.0 - cal["proba"][np.arange(len(truth)), truth]).tolist())}

    def check(
        self, clf: CCAClassifier, state: dict[str, Any], rows: np.ndarray, proba: np.ndarray, best: int
    ) -> RuleResult:
        scores = state["scores"]
        pv = {c: conformal_p(1.0 - float(proba[k]), scores) for k, c in enumerate(clf.classes_)}
        c = clf.classes_[best]
        consistent = sorted(
            (x for x in pv if pv[x] > clf.alpha_ambiguous), key=lambda x: -proba[clf.classes_.index(x)]
        )
        details = {"p_value": pv[c], "consistent": consistent}
        if pv[c] > clf.alpha_ambiguous:
            return RuleResult(pv[c], None, details)
        return RuleResult(
            pv[c],
            f"no class fits well: the best, {c} at {proba[best]:.0%}, fits worse than all but "
            f"{pv[c]:.1%} of {len(scores)} known measurements did on unseen paths (budget "
            f"{clf.alpha_ambiguous:.0%})",
            details,
        )
