"""The trained model: per-profile Gaussian NB, calibration, Unknown thresholds; artifact I/O.

The artifact is one small JSON file in classifier/models/, deterministic for the same training
traces (no timestamps, rounded numbers, sorted keys), carrying its own training metadata.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ccscope.classifier.features import FEATURES
from ccscope.classifier.gnb import GaussianNB

MODEL_FORMAT = "ccscope-model/1"
MODELS_DIR = Path(__file__).resolve().parent / "models"
CLASSIFIER_VERSION = "1.0.0"  # bump when features or decision rules change; retrain with it
# Left out of the naive Bayes (still computed and shown as evidence): dropping them raised
# leave-one-condition-out accuracy on the training set from 0.62 to 0.68. They vary more with
# the network than with the CCA here (the 8-RTT spectral line, back-off counts when recoveries
# merge, raw-BiF beta that a recovery inflates, segment length, plateau level).
UNUSED_FEATURES = ("p8_share", "backoffs_per_100rtt", "plateau", "log_seg_rtts", "beta")
DEFAULT_MODEL = MODELS_DIR / f"ccscope-{CLASSIFIER_VERSION}.json"
DETECTOR_CLASS = {"bbr1": "bbr", "bbr3": "bbr3"}  # which detector vouches for which class

# Family names for "unknown, X-like": the nearest trained class's family.
FAMILY = {
    "bbr": "BBR", "bbr3": "BBR", "cubic": "CUBIC", "htcp": "CUBIC", "bic": "BIC",
    "reno": "Reno", "highspeed": "Reno", "dctcp": "Reno", "veno": "Reno", "westwood": "Reno",
    "hybla": "Reno", "illinois": "Illinois", "scalable": "Scalable", "yeah": "Scalable",
    "vegas": "Vegas", "nv": "Vegas", "lp": "delay-based", "cdg": "delay-based",
}  # fmt: skip


def profile_key(profile: str | None, rtt_s: float) -> str:
    """Which per-profile model reads a trace: its profile, else the nearer standard RTT."""
    if profile in ("A", "B"):
        return profile
    return "A" if rtt_s < 0.2 else "B"


@dataclass
class TraceSummary:
    """What the decision needs from one trace: features and detector scores (cacheable)."""

    profile: str
    features: list[float]
    detectors: dict[str, float]
    insufficient: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "features": self.features,
            "detectors": self.detectors,
            "insufficient": self.insufficient,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TraceSummary:
        return cls(d["profile"], list(d["features"]), dict(d["detectors"]), d.get("insufficient"))


@dataclass
class Model:
    version: str
    classes: list[str]
    gnb: dict[str, GaussianNB]  # per profile
    temperature: float = 1.0
    typicality_max: float = 25.0  # above: atypical of its best class -> Unknown
    min_confidence: float = 0.5  # below: no class likely enough -> Unknown
    detector_min: dict[str, float] = field(default_factory=dict)  # own class below this -> conflict
    detector_max_other: dict[str, float] = field(default_factory=dict)  # other class above -> conflict
    training: dict[str, Any] = field(default_factory=dict)
    # the features the naive Bayes reads (the rest are computed as evidence only)
    used: list[str] = field(default_factory=lambda: [f for f in FEATURES if f not in UNUSED_FEATURES])

    @property
    def used_index(self) -> np.ndarray:
        return np.array([FEATURES.index(f) for f in self.used], dtype=np.int64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": MODEL_FORMAT,
            "version": self.version,
            "classifier_version": CLASSIFIER_VERSION,
            "features": list(FEATURES),
            "features_used": list(self.used),
            "classes": self.classes,
            "profiles": {k: g.to_dict() for k, g in sorted(self.gnb.items())},
            "temperature": _r(self.temperature),
            "typicality_max": _r(self.typicality_max),
            "min_confidence": _r(self.min_confidence),
            "detector_min": {k: _r(v) for k, v in sorted(self.detector_min.items())},
            "detector_max_other": {k: _r(v) for k, v in sorted(self.detector_max_other.items())},
            "families": {c: FAMILY.get(c, c) for c in self.classes},
            "training": self.training,
        }

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        # one line per parameter row: readable, diffable, and a few hundred kB at most
        text = json.dumps(self.to_dict(), sort_keys=True, indent=1)
        text = re.sub(
            r"\[\s+([-0-9.e,\s]+?)\s+\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text
        )
        path.write_text(text + "\n")
        return path

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Model:
        if d.get("format") != MODEL_FORMAT:
            raise ValueError(f"not a {MODEL_FORMAT} document")
        if list(d.get("features", [])) != list(FEATURES):
            raise ValueError(
                "the model was trained on other features than this code computes; "
                "retrain with `ccscope train`"
            )
        return cls(
            version=str(d["version"]),
            classes=list(d["classes"]),
            gnb={k: GaussianNB.from_dict(v) for k, v in d["profiles"].items()},
            temperature=float(d["temperature"]),
            typicality_max=float(d["typicality_max"]),
            min_confidence=float(d["min_confidence"]),
            detector_min=dict(d.get("detector_min", {})),
            detector_max_other=dict(d.get("detector_max_other", {})),
            training=dict(d.get("training", {})),
            used=list(d.get("features_used", FEATURES)),
        )

    @classmethod
    def load(cls, path: Path | None = None) -> Model:
        path = Path(path) if path else DEFAULT_MODEL
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ModelError(f"{path}: cannot load the classifier model: {e}") from e


class ModelError(Exception):
    pass


def _r(x: float) -> float:
    return float(f"{x:.6g}")


@dataclass
class Decision:
    label: str | None  # a class, or None for Unknown
    best: str  # the most likely class either way
    probabilities: dict[str, float]
    typicality: float
    reasons: list[str]


def decide(model: Model, summaries: Sequence[TraceSummary]) -> Decision:
    """Combine the usable traces of one measurement (the profiles are independent views of one
    server, so their log-likelihoods add) and apply the Unknown rules."""
    use = [s for s in summaries if s.insufficient is None]
    assert use, "decide() needs at least one usable trace"
    jll = np.zeros(len(model.classes))
    typ = np.zeros(len(model.classes))
    for s in use:
        g = model.gnb.get(s.profile) or next(iter(model.gnb.values()))
        x = np.asarray(s.features, dtype=np.float64)[model.used_index][None]
        j, ty = g.joint_log_likelihood(x)[0], g.typicality(x)[0]
        # a class that never left a usable trace in this profile during training is unlikely
        # to have produced this one: well below the least likely trained class
        pos = {c: i for i, c in enumerate(g.classes_)}
        floor_j = float(j.min()) - 50.0
        jll += np.array([j[pos[c]] if c in pos else floor_j for c in model.classes])
        typ = np.maximum(typ, np.array([ty[pos[c]] if c in pos else 1e4 for c in model.classes]))
    z = jll / model.temperature
    z -= z.max()
    pr = np.exp(z)
    pr /= pr.sum()
    k = int(np.argmax(pr))
    best = model.classes[k]
    probs = {c: float(v) for c, v in zip(model.classes, pr, strict=True)}
    reasons: list[str] = []
    if typ[k] > model.typicality_max:
        reasons.append(
            f"the trace is atypical even of the closest class, {best} (mean squared z-score "
            f"{typ[k]:.1f} > {model.typicality_max:.1f})"
        )
    if pr[k] < model.min_confidence:
        reasons.append(f"no class is likely enough (best: {best} at {pr[k]:.0%})")
    det = {n: max(s.detectors.get(n, 0.0) for s in use) for n in DETECTOR_CLASS}
    for n, cls_ in DETECTOR_CLASS.items():
        if best == cls_ and n in model.detector_min and det[n] < model.detector_min[n]:
            reasons.append(
                f"the shape says {best} but the {n} detector finds too little of its timing "
                f"(score {det[n]:.2f} < {model.detector_min[n]:.2f})"
            )
        if best != cls_ and n in model.detector_max_other and det[n] > model.detector_max_other[n]:
            reasons.append(
                f"the shape says {best} but the {n} detector sees {cls_}'s timing "
                f"(score {det[n]:.2f} > {model.detector_max_other[n]:.2f})"
            )
    return Decision(None if reasons else best, best, probs, float(typ[k]), reasons)


# --- training --------------------------------------------------------------------------------


VAR_FLOOR = 0.05  # per-class variance floor, relative to the feature's overall variance
VAR_CAP = 4.0  # ... and ceiling (both chosen on leave-one-condition-out folds of the training set)


def fit_gnbs(
    X: np.ndarray,
    y: Sequence[str],
    prof: Sequence[str],
    groups: Sequence[str] | None = None,
    var_floor: float = VAR_FLOOR,
    var_cap: float = VAR_CAP,
) -> dict[str, GaussianNB]:
    out = {}
    pa = np.asarray(prof)
    ya = np.asarray(y)
    ga = np.asarray(groups) if groups is not None else None
    for p in sorted(set(prof)):
        sel = pa == p
        out[p] = GaussianNB(var_floor=var_floor, var_cap=var_cap).fit(
            X[sel], ya[sel], None if ga is None else ga[sel]
        )
    return out


def fit_temperature(jlls: list[np.ndarray], truth: list[int]) -> float:
    """The temperature minimising the held-out negative log-likelihood (grid search: no optimiser,
    no randomness)."""
    best_t, best_nll = 1.0, math.inf
    for t in np.exp(np.linspace(math.log(0.5), math.log(500.0), 120)):
        nll = 0.0
        for j, k in zip(jlls, truth, strict=True):
            z = j / t
            z = z - z.max()
            nll -= z[k] - math.log(float(np.exp(z).sum()))
        if nll < best_nll - 1e-12:
            best_t, best_nll = float(t), nll
    return best_t


def data_hash(items: Sequence[Any]) -> str:
    h = hashlib.sha256(json.dumps(items, sort_keys=True, default=str).encode())
    return h.hexdigest()[:12]
