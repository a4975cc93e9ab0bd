"""The Unknown rules: each a small object, run in the order of `RULES`.

A rule has a `name`, `fit(clf) -> state` (a JSON-able calibration, saved in the model file
under its name, computed from the fitted estimator's out-of-bag calibration set) and
`check(clf, state, rows, proba, best) -> RuleResult`. A new rule is one module here and one
entry in the tuple; the estimator and the verdict need no edit.

`uncertain` bounds how often a named verdict is wrong (selective classification at the
budget `max_wrong`); `ambiguous` and `atypical` are conformal tests bounding how often a known
CCA on an unseen path is called Unknown for their reason (each `alpha` its share of that
budget). No threshold is hand-chosen: each is learnt from out-of-bag measurements at a stated
budget.
"""

from __future__ import annotations

from ccscope.classifier.rules.ambiguous import Ambiguous
from ccscope.classifier.rules.atypical import Atypical
from ccscope.classifier.rules.base import Rule, RuleResult, conformal_p
from ccscope.classifier.rules.uncertain import Uncertain

RULES: tuple[Rule, ...] = (Uncertain(), Ambiguous(), Atypical())

__all__ = ["RULES", "Rule", "RuleResult", "conformal_p"]
