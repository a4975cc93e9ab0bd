"""What every Unknown rule shares: the result type and the conformal p-value."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from ccscope.classifier.estimator import CCAClassifier


@dataclass
class RuleResult:
    p_value: float  # 1.0 where the rule has nothing to say
    reason: str | None = None  # set: the measurement is Unknown, and this says why
    details: dict[str, Any] = field(default_factory=dict)


class Rule(Protocol):
    name: str

    def fit(self, clf: CCAClassifier) -> dict[str, Any]: ...

    def check(
        self, clf: CCAClassifier, state: dict[str, Any], rows: np.ndarray, proba: np.ndarray, best: int
    ) -> RuleResult: ...


def conformal_p(score: float, calibration: list[float]) -> float:
    """The share of calibration scores at least as nonconforming as `score`, counting the new
    one (so the smallest p-value with n calibration scores is 1 / (n + 1)). With calibration
    measurements exchangeable with the new one, P(p <= alpha) <= alpha for a known class."""
    cal = np.asarray(calibration, dtype=np.float64)
    return float((1 + np.sum(cal >= score - 1e-12)) / (len(cal) + 1))


def sorted_scores(values: list[float]) -> list[float]:
    return [float(f"{v:.6g}") for v in sorted(values)]
