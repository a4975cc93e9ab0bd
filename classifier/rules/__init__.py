"""The Unknown rules: each a small object, run in the order of `RULES`.

A rule has a `name`, `fit(clf) -> state` (a JSON-able calibration, saved in the model file
under its name, computed from the fitted estimator's out-of-bag calibration set) and
`check(clf, state, rows, proba, best) -> RuleResult`. A new rule is one module here and one
entry in the tuple; the estimator and the verdict need no edit.

Every rule is a conformal test: its nonconformity score for the named class is compared with
the scores of known measurements of that class on draws the model never trained on, and the
measurement is Unknown when its p-value is at most the rule's alpha (its share of the
false-Unknown budget). No threshold is hand-chosen; each alpha is a stated budget.
"""

from __future__ import annotations

from ccscope.classifier.rules.ambiguous import Ambiguous
from ccscope.classifier.rules.atypical import Atypical
from ccscope.classifier.rules.base import Rule, RuleResult, conformal_p

RULES: tuple[Rule, ...] = (Ambiguous(), Atypical())

__all__ = ["RULES", "Rule", "RuleResult", "conformal_p"]
