"""The verdict: what the classifier concluded about one server, and why.

Defined once here and used by the classifier (which makes them), the CLI, the workers and the
service (which store and show them). A verdict is one of three kinds:

* `cca`: a trained CCA (`label` is its name, e.g. "cubic", "bbr");
* `unknown`: the trace is fine but matches no trained CCA well enough, or the detectors and the
  shape model disagree. `nearest` names the closest family ("unknown, BBR-like");
* `insufficient`: the trace cannot carry a verdict (empty, too short, slow start only,
  application-limited); `reason` says which.

`to_json()` is canonical (sorted keys, rounded floats) so the same input gives the same bytes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

VERDICT_FORMAT = "ccscope-verdict/1"
UNKNOWN = "unknown"
INSUFFICIENT = "insufficient data"
KINDS = ("cca", "unknown", "insufficient")


@dataclass(frozen=True)
class Verdict:
    label: str
    kind: str
    confidence: float  # calibrated probability of `label`; unknown: 1 - that of the nearest class
    explanation: str
    classifier_version: str
    nearest: str | None = None  # unknown: the closest trained family
    reason: str | None = None  # insufficient: why
    probabilities: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"verdict kind must be one of {KINDS}")
        if not 0.0 <= self.confidence <= 1.0 or not math.isfinite(self.confidence):
            raise ValueError("confidence must be in [0, 1]")

    @property
    def display(self) -> str:
        """What a person reads: `cubic`, `unknown, BBR-like`, `insufficient data: too short`."""
        if self.kind == "unknown":
            return f"{UNKNOWN}, {self.nearest}-like" if self.nearest else UNKNOWN
        if self.kind == "insufficient":
            return f"{INSUFFICIENT}: {self.reason}" if self.reason else INSUFFICIENT
        return self.label

    @classmethod
    def insufficient(cls, reason: str, version: str, evidence: dict[str, Any] | None = None) -> Verdict:
        return cls(
            label=INSUFFICIENT,
            kind="insufficient",
            confidence=1.0,
            reason=reason,
            explanation=f"No verdict: {reason}. A trace needs several round trips of congestion "
            "avoidance after slow start for its shape to say anything about the sender's algorithm.",
            classifier_version=version,
            evidence=evidence or {},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": VERDICT_FORMAT,
            "label": self.label,
            "kind": self.kind,
            "display": self.display,
            "confidence": self.confidence,
            "nearest": self.nearest,
            "reason": self.reason,
            "probabilities": self.probabilities,
            "evidence": self.evidence,
            "explanation": self.explanation,
            "classifier_version": self.classifier_version,
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(_canonical(self.to_dict()), sort_keys=True, indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        if d.get("format") != VERDICT_FORMAT:
            raise ValueError(f"not a {VERDICT_FORMAT} document")
        return cls(
            label=str(d["label"]),
            kind=str(d["kind"]),
            confidence=float(d["confidence"]),
            explanation=str(d["explanation"]),
            classifier_version=str(d["classifier_version"]),
            nearest=d.get("nearest"),
            reason=d.get("reason"),
            probabilities={str(k): float(v) for k, v in d.get("probabilities", {}).items()},
            evidence=dict(d.get("evidence", {})),
        )


def _canonical(x: Any, digits: int = 6) -> Any:
    """Round floats so that last-bit differences (summation order, libm) never change the bytes."""
    if isinstance(x, bool) or x is None or isinstance(x, str | int):
        return x
    if isinstance(x, float):
        if not math.isfinite(x):
            return None
        r = round(x, digits)
        return 0.0 if r == 0 else r  # no "-0.0"
    if isinstance(x, dict):
        return {str(k): _canonical(v, digits) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_canonical(v, digits) for v in x]
    if hasattr(x, "item"):  # numpy scalars
        return _canonical(x.item(), digits)
    raise TypeError(f"cannot serialise {type(x).__name__} in a verdict")
