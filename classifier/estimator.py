"""The classifier as one estimator, in scikit-learn's shape.

`CCAClassifier(**params)` holds every tuning knob as a parameter (saved in the model file);
`fit` takes measurements (each a list of `TraceSummary`, one per trace of one server), their
labels and their groups (the network draw each was measured on) and returns self; fitted state
ends in `_`. `predict_proba` gives calibrated class probabilities, `decide` the label or Unknown
with the reasons, `predict` labels with "unknown".

How a measurement is read:

1. **Per trace**, a random forest over the trace's named features (shape, back-off, queue,
   probe features, the BBR detector scores) and its path in its own units (RTT, BDP in segments,
   SACK). Training rows come from lab draws spread over RTTs, rates, buffers, MTUs, loss and
   cross traffic, so the forest learns each CCA's shape beside the path it was measured on.
2. **Per measurement**, the traces' log vote shares add (the traces are independent views of
   one server), divided by a temperature fitted on out-of-bag votes per number of traces.
3. **Unknown** comes from the rules in `classifier/rules/`, each calibrated on out-of-bag
   measurements (read by trees that never saw their draw): `uncertain` keeps the named verdicts
   wrong at most `max_wrong` of the time; the conformal rules call a measurement Unknown when it
   is less conforming than all but a share `alpha` of known measurements of that class were.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccscope.classifier.forest import RandomForest
from ccscope.classifier.gnb import GaussianNB, softmax
from ccscope.classifier.identical import merge_identical, path_label
from ccscope.classifier.summary import FEATURE_NAMES, TraceSummary

Measurement = Sequence[TraceSummary]


@dataclass
class Decision:
    label: str | None  # a class, or None for Unknown
    best: str  # the most likely class either way
    probabilities: dict[str, float]
    p_values: dict[str, float]  # rule name -> conformal p-value of `best`
    reasons: list[str]
    also_consistent_with: list[str] = field(default_factory=list)
    shape_probabilities: dict[str, float] = field(default_factory=dict)  # the naive Bayes alone
    details: dict[str, Any] = field(default_factory=dict)  # per rule: what it measured
    family: str | None = None  # Unknown: the family sure enough to name ("BBR-like")


def _rows(ms: Sequence[Measurement], names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The usable traces of every measurement as feature rows, and the measurement of each row."""
    rows, owner = [], []
    for i, m in enumerate(ms):
        for s in m:
            if s.usable:
                rows.append([s.value(n) for n in names])
                owner.append(i)
    x = np.array(rows, dtype=np.float64) if rows else np.zeros((0, len(names)))
    return x, np.array(owner, dtype=np.int64)


class CCAClassifier:
    """Names the congestion controller behind a measurement's traces, or says Unknown."""

    def __init__(
        self,
        *,
        n_trees: int = 300,
        max_features: str | int = "sqrt",
        min_leaf: int = 1,
        max_depth: int = 24,
        seed: int = 20261125,
        vote_floor: float = 1e-3,
        features: Sequence[str] | None = None,
        alpha_ambiguous: float = 0.02,
        alpha_atypical: float = 0.02,
        knn_k: int = 8,
        knn_top: int = 3,
        knn_clip: float = 8.0,
        knn_nan_cost: float = 1.0,
        families: dict[str, str] | None = None,
        max_wrong: float = 0.03,
        gate_ridge: float = 1.0,
        gate_folds: int = 5,
        identical: bool = True,
    ) -> None:
        self.n_trees = n_trees
        self.max_features = max_features
        self.min_leaf = min_leaf
        self.max_depth = max_depth
        self.seed = seed
        self.vote_floor = vote_floor  # a class no tree voted for is unlikely, not impossible
        self.features = tuple(features) if features is not None else FEATURE_NAMES
        self.alpha_ambiguous = alpha_ambiguous
        self.alpha_atypical = alpha_atypical
        self.knn_k = knn_k
        self.knn_top = knn_top
        self.knn_clip = knn_clip
        self.knn_nan_cost = knn_nan_cost
        self.families = dict(families or {})
        self.max_wrong = max_wrong  # the share of named verdicts allowed to be wrong
        self.gate_ridge = gate_ridge  # how far a class's own rightness curve may leave the pooled one
        self.gate_folds = gate_folds  # cross-fitting folds (by draw) for the selective gate
        self.identical = identical  # CCAs that are Reno on a measurement's path count as Reno

    # --- scikit-learn's parameter protocol -------------------------------------------------

    _PARAMS = (
        "n_trees", "max_features", "min_leaf", "max_depth", "seed", "vote_floor", "features",
        "alpha_ambiguous", "alpha_atypical", "knn_k", "knn_top", "knn_clip", "knn_nan_cost", "families",
        "max_wrong", "gate_ridge", "gate_folds", "identical",
    )  # fmt: skip

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._PARAMS}

    def set_params(self, **params: Any) -> CCAClassifier:
        for k, v in params.items():
            if k not in self._PARAMS:
                raise ValueError(f"unknown parameter {k!r}")
            setattr(self, k, tuple(v) if k == "features" else v)
        return self

    # --- fitting ---------------------------------------------------------------------------

    def fit(
        self,
        X: Sequence[Measurement],
        y: Sequence[str],
        groups: Sequence[str],
        calibrate: Sequence[bool] | None = None,
    ) -> CCAClassifier:
        """`X`: measurements; `y`: their class; `groups`: the network draw of each (rows of one
        draw never calibrate each other: a calibration row stands for a path never trained on).
        `calibrate`: which measurements the Unknown rules are calibrated on (default all): the
        population verdicts are given for, e.g. whole downloads but not their training prefixes."""
        from ccscope.classifier.rules import RULES

        if not (len(X) == len(y) == len(groups)):
            raise ValueError("X, y and groups must have one entry per measurement")
        if calibrate is not None and len(calibrate) != len(X):
            raise ValueError("calibrate must have one entry per measurement")
        if self.identical:
            y = [path_label(str(c), m) for c, m in zip(y, X, strict=True)]
        rows, owner = _rows(X, self.features)
        if len(rows) == 0:
            raise ValueError("no usable trace to train on")
        # the model file keeps 5 significant digits: fit on exactly what it will hold
        rows = np.vectorize(_round5)(rows)
        ya = np.asarray(y)[owner]
        ga = np.asarray(groups)[owner]
        self.classes_ = sorted(set(ya.tolist()))
        self.forest_ = RandomForest(
            self.n_trees, self.min_leaf, self.max_depth, self.max_features, self.seed
        ).fit(rows, ya.tolist(), ga.tolist())
        # the method's model (thesis §6.2.4) over the same features, for the evidence and the
        # bench's side-by-side figure; its settings are gnb.py's documented ones
        self.shape_model_ = GaussianNB(
            var_floor=0.5, var_cap=4.0, floor_basis="pooled", presence_weight=0.25, z2_cap=16.0
        ).fit(rows, ya.tolist(), None)
        # out-of-bag log votes per measurement, then the temperatures
        oob = self._align(self.forest_.classes_, self.forest_.oob_proba_)
        logv = np.log(oob + self.vote_floor)
        meas = sorted(set(owner.tolist()))
        per_m = {m: logv[owner == m].sum(axis=0) for m in meas}
        n_tr = {m: int((owner == m).sum()) for m in meas}
        truth = {m: self.classes_.index(str(y[m])) for m in meas}
        self.temperature_ = {}
        for k in sorted(set(n_tr.values())):
            ms = [m for m in meas if n_tr[m] == k]
            self.temperature_[str(k)] = _fit_temperature([per_m[m] for m in ms], [truth[m] for m in ms])
        # the calibration set: every training measurement as the trees that never saw its draw
        # read it
        cal = [m for m in meas if calibrate is None or calibrate[m]]
        self.calib_ = {
            "proba": np.array([self._merged(self._calibrated(per_m[m], n_tr[m]), X[m]) for m in cal]),
            "truth": np.array([truth[m] for m in cal], dtype=np.int64),
            "groups": [str(groups[m]) for m in cal],
            "measurements": [X[m] for m in cal],
        }
        self.train_rows_ = rows
        self.train_y_ = np.array([self.classes_.index(v) for v in ya.tolist()], dtype=np.int64)
        self.train_groups_ = ga.astype(str)
        self.scale_ = _within_class_scale(rows, self.train_y_)
        self.rules_ = {}
        for rule in RULES:
            self.rules_[rule.name] = rule.fit(self)
        del self.calib_
        return self

    def _align(self, classes: Sequence[str], p: np.ndarray) -> np.ndarray:
        idx = {c: i for i, c in enumerate(classes)}
        out = np.zeros((len(p), len(self.classes_)))
        for j, c in enumerate(self.classes_):
            if c in idx:
                out[:, j] = p[:, idx[c]]
        return out

    def _calibrated(self, logv_sum: np.ndarray, n_traces: int) -> np.ndarray:
        t = self.temperature_.get(str(n_traces)) or self.temperature_[max(self.temperature_, key=int)]
        return softmax(logv_sum / t)

    # --- reading a measurement -------------------------------------------------------------

    def trace_rows(self, m: Measurement) -> np.ndarray:
        return _rows([m], self.features)[0]

    def predict_proba(self, X: Sequence[Measurement]) -> np.ndarray:
        return np.array([self._merged(self._proba(self.trace_rows(m)), m) for m in X])

    def _merged(self, p: np.ndarray, m: Measurement) -> np.ndarray:
        return merge_identical(p, self.classes_, m) if self.identical else p

    def _proba(self, rows: np.ndarray) -> np.ndarray:
        if len(rows) == 0:
            return np.full(len(self.classes_), 1.0 / len(self.classes_))
        v = self._align(self.forest_.classes_, self.forest_.predict_proba(rows))
        return self._calibrated(np.log(v + self.vote_floor).sum(axis=0), len(rows))

    def decide(self, m: Measurement) -> Decision:
        from ccscope.classifier.rules import RULES

        rows = self.trace_rows(m)
        if len(rows) == 0:
            raise ValueError("decide() needs at least one usable trace")
        pr = self._merged(self._proba(rows), m)
        k = int(np.argmax(pr))
        best = self.classes_[k]
        reasons: list[str] = []
        p_values: dict[str, float] = {}
        details: dict[str, Any] = {}
        consistent = [best]
        for rule in RULES:
            res = rule.check(self, self.rules_[rule.name], rows, pr, k)
            p_values[rule.name] = res.p_value
            details[rule.name] = res.details
            if res.reason:
                reasons.append(res.reason)
            if rule.name == "ambiguous":
                consistent = res.details.get("consistent", consistent)
        shape = softmax(self.shape_model_.joint_log_likelihood(rows).sum(axis=0) / max(1.0, len(rows)))
        family = None
        if reasons and "uncertain" in self.rules_:
            from ccscope.classifier.rules.uncertain import Uncertain

            family = Uncertain.family(self, self.rules_["uncertain"], pr)
        return Decision(
            None if reasons else best,
            best,
            {c: float(v) for c, v in zip(self.classes_, pr, strict=True)},
            p_values,
            reasons,
            [c for c in consistent if c != best],
            {c: float(v) for c, v in zip(self.shape_model_.classes_, shape, strict=True)},
            details,
            family,
        )

    def predict(self, X: Sequence[Measurement]) -> list[str]:
        out = []
        for m in X:
            if not any(s.usable for s in m):
                out.append("insufficient")
                continue
            d = self.decide(m)
            out.append(d.label or "unknown")
        return out

    # --- the model file --------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        params = self.get_params()
        params["features"] = list(self.features)
        return {
            "params": params,
            "classes": list(self.classes_),
            "forest": self.forest_.to_dict(),
            "shape_model": self.shape_model_.to_dict(),
            "temperature": {k: _r(v) for k, v in sorted(self.temperature_.items())},
            "scale": [_r(v) for v in self.scale_],
            "train_rows": [[_rn(v) for v in r] for r in self.train_rows_],
            "train_y": self.train_y_.tolist(),
            "train_groups": self.train_groups_.tolist(),
            "rules": self.rules_,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CCAClassifier:
        p = dict(d["params"])
        unknown = set(p) - set(cls._PARAMS)
        if unknown:
            raise ValueError(f"unknown estimator parameters {sorted(unknown)}")
        c = cls(**p)
        c.classes_ = [str(x) for x in d["classes"]]
        c.forest_ = RandomForest.from_dict(d["forest"])
        if c.forest_.n_features_ != len(c.features):
            raise ValueError("the forest reads another number of features than the model names")
        c.shape_model_ = GaussianNB.from_dict(d["shape_model"])
        c.temperature_ = {str(k): float(v) for k, v in d["temperature"].items()}
        if not c.temperature_ or not all(v > 0 for v in c.temperature_.values()):
            raise ValueError("the model holds no positive temperature")
        c.scale_ = np.asarray(d["scale"], dtype=np.float64)
        c.train_rows_ = np.array(
            [[math.nan if v is None else float(v) for v in r] for r in d["train_rows"]], dtype=np.float64
        ).reshape(-1, len(c.features))
        c.train_y_ = np.asarray(d["train_y"], dtype=np.int64)
        c.train_groups_ = np.asarray(d["train_groups"], dtype=str)
        if not (len(c.scale_) == len(c.features) and len(c.train_y_) == len(c.train_rows_)):
            raise ValueError("the model's reference rows do not match its features")
        if len(c.train_y_) and (c.train_y_.min() < 0 or c.train_y_.max() >= len(c.classes_)):
            raise ValueError("the model's reference rows name classes it does not have")
        c.rules_ = dict(d["rules"])
        from ccscope.classifier.rules import RULES

        for rule in RULES:
            if not isinstance(c.rules_.get(rule.name), dict):
                raise ValueError(f"the model holds no calibration for the {rule.name} rule")
            validate = getattr(rule, "validate", None)
            if validate is not None:
                validate(c, c.rules_[rule.name])
        return c


def _fit_temperature(scores: list[np.ndarray], truth: list[int], lo: float = 0.3, hi: float = 30.0) -> float:
    """The temperature minimising the out-of-bag negative log-likelihood (grid search: no
    optimiser, no randomness)."""
    if not scores:
        return 1.0
    s = np.array(scores)
    t_idx = np.array(truth)
    best_t, best_nll = 1.0, math.inf
    for t in np.exp(np.linspace(math.log(lo), math.log(hi), 80)):
        z = s / t
        z = z - z.max(axis=1, keepdims=True)
        nll = float(-(z[np.arange(len(z)), t_idx] - np.log(np.exp(z).sum(axis=1))).sum())
        if nll < best_nll - 1e-12:
            best_t, best_nll = float(t), nll
    return best_t


def _within_class_scale(x: np.ndarray, y: np.ndarray, floor: float = 1e-3) -> np.ndarray:
    """Per feature, the median over classes of the class's robust spread (IQR / 1.349): one
    feature's unit for the distance the atypicality rule measures. A feature tight within every
    class (a back-off ratio) counts for more than one that scatters (a loss rate)."""
    out = []
    for j in range(x.shape[1]):
        spreads = []
        for c in np.unique(y):
            v = x[y == c, j]
            v = v[~np.isnan(v)]
            if len(v) >= 4:
                q75, q25 = np.percentile(v, [75, 25])
                spreads.append((q75 - q25) / 1.349)
        s = float(np.median(spreads)) if spreads else 1.0
        allv = x[:, j][~np.isnan(x[:, j])]
        tot = float(np.std(allv)) if len(allv) else 1.0
        out.append(max(s, floor * max(tot, 1e-9), 1e-9))
    return np.array(out)


def _round5(x: float) -> float:
    return x if not math.isfinite(x) else float(f"{x:.5g}")


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def _rn(x: float) -> float | None:
    return None if not math.isfinite(x) else float(f"{x:.5g}")
