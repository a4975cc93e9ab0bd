"""The shipped model: a fitted `CCAClassifier` plus what produced it, as one deterministic JSON
file in classifier/models/ (no timestamps, rounded numbers, sorted keys), so refitting on the
same reference summaries rewrites it byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccscope.classifier.estimator import CCAClassifier
from ccscope.errors import CCScopeError

MODEL_FORMAT = "ccscope-model/2"
MODELS_DIR = Path(__file__).resolve().parent / "models"
CLASSIFIER_VERSION = "3.2.0"  # bump when features or decision rules change; retrain with it
DEFAULT_MODEL = MODELS_DIR / f"ccscope-{CLASSIFIER_VERSION}.json"

# Family names for "unknown, X-like": the nearest trained class's family.
FAMILY = {
    "bbr": "BBR", "bbr2": "BBR", "bbr3": "BBR", "cubic": "CUBIC", "htcp": "CUBIC", "bic": "BIC",
    "reno": "Reno", "highspeed": "Reno", "dctcp": "Reno", "veno": "Reno", "westwood": "Reno",
    "hybla": "Reno", "illinois": "Illinois", "scalable": "Scalable", "yeah": "Scalable",
    "vegas": "Vegas", "nv": "Vegas", "lp": "delay-based", "cdg": "delay-based",
    "reno/dctcp": "Reno",
}  # fmt: skip


def family_of(label: str) -> str:
    """A class's family; a QUIC class ("quiche:cubic") is in the family of the CCA it implements."""
    return FAMILY.get(label) or FAMILY.get(label.split(":", 1)[-1], label)


class ModelError(CCScopeError):
    """The model file cannot be read, or cannot read these traces."""


@dataclass
class Model:
    """One fitted estimator per transport: a QUIC stack's CUBIC is not the kernel's, and what
    bytes in flight the capture can read differs, so each transport has its own classes."""

    version: str
    estimators: dict[str, CCAClassifier]
    training: dict[str, Any] = field(default_factory=dict)

    @property
    def estimator(self) -> CCAClassifier:
        """The TCP estimator (every model has one)."""
        return self.estimators["tcp"]

    @property
    def classes(self) -> list[str]:
        return list(self.estimator.classes_)

    def for_transport(self, transport: str) -> CCAClassifier:
        est = self.estimators.get(transport)
        if est is None:
            raise ModelError(
                f"the model has no classes for {transport} traces (it knows {', '.join(self.estimators)})"
            )
        return est

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": MODEL_FORMAT,
            "version": self.version,
            "classifier_version": CLASSIFIER_VERSION,
            "estimators": {k: e.to_dict() for k, e in sorted(self.estimators.items())},
            "training": self.training,
        }

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        # one line per numeric row: readable, diffable, and as small as JSON allows
        text = json.dumps(self.to_dict(), sort_keys=True, indent=1, allow_nan=False)
        text = re.sub(
            r"\[\s+([-0-9.enull,\s]+?)\s+\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text
        )
        path.write_text(text + "\n")
        return path

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Model:
        if d.get("format") != MODEL_FORMAT:
            raise ValueError(f"not a {MODEL_FORMAT} document")
        if d.get("classifier_version") != CLASSIFIER_VERSION:
            raise ValueError(
                f"the model was made by classifier {d.get('classifier_version')}, this code is "
                f"{CLASSIFIER_VERSION}: retrain with `ccscope train`"
            )
        ests = {str(k): CCAClassifier.from_dict(v) for k, v in dict(d["estimators"]).items()}
        if "tcp" not in ests:
            raise ValueError("the model has no TCP estimator")
        return cls(version=str(d["version"]), estimators=ests, training=dict(d.get("training", {})))

    @classmethod
    def load(cls, path: Path | None = None) -> Model:
        path = Path(path) if path else DEFAULT_MODEL
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            raise ModelError(f"{path}: cannot load the classifier model: {e}") from e


def data_hash(items: Sequence[Any]) -> str:
    h = hashlib.sha256(json.dumps(items, sort_keys=True, default=str).encode())
    return h.hexdigest()[:12]
