"""What the decision needs from one trace: its named features, or why it has none.

A `TraceSummary` is computed once per trace (`core.summarise`), cached by training and shipped
for every reference trace beside the model (`reference-<version>.json.gz`), so the decision
stages can be refitted and re-scored without the traces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ccscope.classifier.features import FEATURES

# The BBR timing detectors' scores enter the model as features beside the shape features.
DETECTOR_FEATURES = ("det_bbr1", "det_bbr3")
FEATURE_NAMES: tuple[str, ...] = (*FEATURES, *DETECTOR_FEATURES)


@dataclass
class TraceSummary:
    features: dict[str, float]  # FEATURE_NAMES -> value (NaN: not measurable in this trace)
    insufficient: str | None = None  # why this trace carries no verdict
    evidence: dict[str, Any] = field(default_factory=dict)
    rtt_ms: float | None = None  # the path's base RTT as the trace shows it
    profile: str | None = None  # the profile's name, when the trace names one (informational)
    transport: str = "tcp"

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": {k: _num(v) for k, v in sorted(self.features.items())},
            "insufficient": self.insufficient,
            "rtt_ms": self.rtt_ms,
            "profile": self.profile,
            "transport": self.transport,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TraceSummary:
        feats = d.get("features")
        if not isinstance(feats, dict):
            raise ValueError("a trace summary needs a features mapping")
        rtt = d.get("rtt_ms")
        return cls(
            {str(k): _float(v) for k, v in feats.items()},
            None if d.get("insufficient") is None else str(d["insufficient"]),
            rtt_ms=None if rtt is None else float(rtt),
            profile=None if d.get("profile") is None else str(d["profile"]),
            transport=str(d.get("transport") or "tcp"),
        )

    def value(self, name: str) -> float:
        return float(self.features.get(name, math.nan))

    @property
    def usable(self) -> bool:
        return self.insufficient is None

    @property
    def has_congestion_avoidance(self) -> bool:
        """Whether the trace holds a clean congestion-avoidance segment (growth is NaN without
        one): without it CCAs that differ only in how they grow the window look alike."""
        return self.usable and not math.isnan(self.value("growth"))


def _num(v: float) -> float | None:
    """JSON has no NaN: a feature not measurable is null."""
    return None if v is None or not math.isfinite(v) else float(f"{v:.6g}")


def _float(v: Any) -> float:
    return math.nan if v is None else float(v)
