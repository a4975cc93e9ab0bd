"""A random forest of CART trees in scikit-learn's shape (fit / predict / predict_proba), plain
numpy, serialised as JSON: the same reasons as gnb.py (the artifact is numbers any version of
anything reads back identically; a verdict never depends on a library upgrade).

Why a forest beside the naive Bayes: the naive Bayes treats features as independent and each
class as a few Gaussians, while the features are correlated and a CCA's features move with the
network in ways a Gaussian per condition does not follow. Trees split on one feature at a time
(a split is a readable rule: "beta_ss <= 0.76") and combine them where they interact. On the
same features, training traces and held-out sets (model 1.3) the forest's top class was right
for 0.89 of held-out runs and 0.84 of held-out conditions (mean per-class recall), the naive
Bayes' for 0.84 and 0.73 (bench/results/classifier.json, `peer_top1_recall`).

Missing features (a trace without loss has no back-off ratio) are a value below every real one,
so a split can separate "has none" from any level. Everything is seeded: same data, same trees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

MISSING = -1e9  # NaN -> below every real feature value


def _fill(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    return np.where(np.isnan(X), MISSING, X)


def _right_children(feature: np.ndarray, left: np.ndarray) -> np.ndarray:
    """A node's two children are made one after the other, so the right one is never stored."""
    return np.where(feature >= 0, left + 1, -1)


class _TreeBuilder:
    def __init__(self, X: np.ndarray, y: np.ndarray, k: int, max_features: int, min_leaf: int,
                 max_depth: int, rng: np.random.Generator) -> None:  # fmt: skip
        self.X, self.y, self.k = X, y, k
        self.max_features, self.min_leaf, self.max_depth, self.rng = max_features, min_leaf, max_depth, rng
        self.feature: list[int] = []
        self.threshold: list[float] = []
        self.left: list[int] = []  # the right child is always left + 1: both are made together
        self.value: list[np.ndarray] = []

    def _best_split(self, idx: np.ndarray, feats: np.ndarray) -> tuple[int, float, float]:
        y = self.y[idx]
        n = len(idx)
        total = np.bincount(y, minlength=self.k).astype(np.float64)
        best = (-1, 0.0, math.inf)
        onehot = np.eye(self.k)
        for j in feats:
            v = self.X[idx, j]
            order = np.argsort(v, kind="stable")
            vs = v[order]
            cl = np.cumsum(onehot[y[order]], axis=0)[:-1]  # class counts left of each cut
            nl = np.arange(1, n, dtype=np.float64)
            nr = n - nl
            ok = (vs[:-1] < vs[1:]) & (nl >= self.min_leaf) & (nr >= self.min_leaf)
            if not ok.any():
                continue
            cr = total - cl
            # n_l * gini_l + n_r * gini_r = n - (sum cl^2)/n_l - (sum cr^2)/n_r
            imp = n - (cl * cl).sum(axis=1) / nl - (cr * cr).sum(axis=1) / nr
            imp = np.where(ok, imp, math.inf)
            i = int(np.argmin(imp))
            if imp[i] < best[2] - 1e-12:
                # the midpoint of two adjacent floats can round up to the upper one, which would
                # send every sample left: cut at the lower value then
                mid = (vs[i] + vs[i + 1]) / 2.0
                best = (int(j), float(mid if mid < vs[i + 1] else vs[i]), float(imp[i]))
        return best

    def _node(self, value: np.ndarray) -> int:
        self.feature.append(-1)
        self.threshold.append(0.0)
        self.left.append(-1)
        self.value.append(value)
        return len(self.feature) - 1

    def build(self, idx: np.ndarray) -> None:
        stack = [(idx, self._node(np.bincount(self.y[idx], minlength=self.k) / len(idx)), 0)]
        p = self.X.shape[1]
        while stack:
            idx, node, depth = stack.pop()
            counts = np.bincount(self.y[idx], minlength=self.k)
            if depth >= self.max_depth or len(idx) < 2 * self.min_leaf or (counts > 0).sum() <= 1:
                continue
            feats = self.rng.choice(p, size=min(self.max_features, p), replace=False)
            j, thr, imp = self._best_split(idx, np.sort(feats))
            if j < 0:  # nothing to split on among the drawn features: try them all once
                j, thr, imp = self._best_split(idx, np.arange(p))
            if j < 0:
                continue
            parent = len(idx) - (counts.astype(np.float64) ** 2).sum() / len(idx)
            if imp >= parent - 1e-12:
                continue
            go_left = self.X[idx, j] <= thr
            li, ri = idx[go_left], idx[~go_left]
            ln = self._node(np.bincount(self.y[li], minlength=self.k) / len(li))
            rn = self._node(np.bincount(self.y[ri], minlength=self.k) / len(ri))
            self.feature[node], self.threshold[node] = j, thr
            self.left[node] = ln
            stack.append((ri, rn, depth + 1))
            stack.append((li, ln, depth + 1))


class RandomForest:
    def __init__(self, n_trees: int = 100, min_leaf: int = 1, max_depth: int = 24,
                 max_features: str | int = "sqrt", seed: int = 0) -> None:  # fmt: skip
        self.n_trees, self.min_leaf, self.max_depth = n_trees, min_leaf, max_depth
        self.max_features, self.seed = max_features, seed
        self.classes_: list[str] = []
        self.n_features_ = 0
        # all trees in flat arrays: node i of the forest; roots[t] is tree t's first node
        self.feature = np.zeros(0, dtype=np.int64)
        self.threshold = np.zeros(0)
        self.left = np.zeros(0, dtype=np.int64)
        self.right = np.zeros(0, dtype=np.int64)
        self.value = np.zeros((0, 0))
        self.roots = np.zeros(0, dtype=np.int64)
        self.oob_proba_ = np.zeros((0, 0))  # fit() only: out-of-bag class shares per training row

    def fit(self, X: np.ndarray, y: Sequence[str], groups: Sequence[str] | None = None) -> RandomForest:
        """Grow the trees. With `groups` (e.g. the network draw each row was measured on) every
        tree's bootstrap draws whole groups, so `oob_proba_` (each row's class shares from the
        trees that never saw its group) is what a path never trained on gets."""
        X = _fill(X)
        self.classes_ = sorted(set(y))
        yi = np.array([self.classes_.index(v) for v in y], dtype=np.int64)
        n, p = X.shape
        self.n_features_ = p
        mf = (
            max(1, round(math.sqrt(p))) if self.max_features == "sqrt" else int(self.max_features)  # type: ignore[arg-type]
        )
        rng = np.random.default_rng(self.seed)
        if groups is None:
            gi = np.arange(n)
        else:
            names = sorted(set(groups))
            pos = {g: i for i, g in enumerate(names)}
            gi = np.array([pos[g] for g in groups], dtype=np.int64)
        n_groups = int(gi.max()) + 1 if n else 0
        members = [np.flatnonzero(gi == g) for g in range(n_groups)] if groups is not None else None
        in_bag = np.zeros((self.n_trees, n), dtype=bool)
        feats, thrs, lefts, vals, roots = [], [], [], [], []
        off = 0
        for ti in range(self.n_trees):
            b = _TreeBuilder(X, yi, len(self.classes_), mf, self.min_leaf, self.max_depth, rng)
            if members is None:
                sample = np.sort(rng.integers(0, n, n))  # bootstrap sample
            else:
                picked = rng.integers(0, n_groups, n_groups)
                sample = np.sort(np.concatenate([members[g] for g in picked]))
            in_bag[ti, sample] = True
            b.build(sample)
            roots.append(off)
            feats += b.feature
            thrs += b.threshold
            lefts += [v + off if v >= 0 else -1 for v in b.left]
            vals += b.value
            off += len(b.feature)
        self.feature = np.asarray(feats, dtype=np.int64)
        self.threshold = np.asarray(thrs, dtype=np.float64)
        self.left = np.asarray(lefts, dtype=np.int64)
        self.right = _right_children(self.feature, self.left)
        self.value = np.asarray(vals, dtype=np.float64)
        self.roots = np.asarray(roots, dtype=np.int64)
        leaf_values = self.value[self.leaves(X)]  # (rows, trees, classes)
        oob = ~in_bag.T
        counts = oob.sum(axis=1, keepdims=True)
        shares = (leaf_values * oob[:, :, None]).sum(axis=1)
        # a row every tree saw (rare: tiny data) falls back to the whole forest's vote
        self.oob_proba_ = np.where(counts > 0, shares / np.maximum(counts, 1), leaf_values.mean(axis=1))
        return self

    def leaves(self, X: np.ndarray) -> np.ndarray:
        """Leaf node of every (sample, tree): all trees walked together, one level per step."""
        X = _fill(np.atleast_2d(X))
        node = np.broadcast_to(self.roots, (len(X), len(self.roots))).copy()
        rows = np.arange(len(X))[:, None]
        while True:
            f = self.feature[node]
            inner = f >= 0
            if not inner.any():
                return node
            go_left = X[rows, np.where(inner, f, 0)] <= self.threshold[node]
            node = np.where(inner, np.where(go_left, self.left[node], self.right[node]), node)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.value[self.leaves(X)].mean(axis=1)

    def predict(self, X: np.ndarray) -> list[str]:
        return [self.classes_[i] for i in np.argmax(self.predict_proba(X), axis=1)]

    def feature_importance(self) -> np.ndarray:
        """How often each feature is split on, as a share of all splits (for the evidence)."""
        f = self.feature[self.feature >= 0]
        c = np.bincount(f, minlength=self.n_features_).astype(np.float64)
        return c / max(1.0, c.sum())

    def to_dict(self) -> dict[str, Any]:
        inner = self.feature >= 0
        # compact, since the artifact is committed: a node's two children are made together, so
        # right = left + 1 is not stored; leaves keep their class shares sparsely, in node order,
        # as [class index, share] pairs (most leaves are pure: one pair)
        leaf = [
            [[int(c), float(f"{self.value[i, c]:.4g}")] for c in np.nonzero(self.value[i])[0]]
            for i in np.nonzero(~inner)[0]
        ]
        return {
            "kind": "random_forest",
            "params": {
                "n_trees": self.n_trees,
                "min_leaf": self.min_leaf,
                "max_depth": self.max_depth,
                "max_features": self.max_features,
                "seed": self.seed,
            },
            "classes": self.classes_,
            "n_features": self.n_features_,
            "roots": self.roots.tolist(),
            "feature": self.feature.tolist(),
            "threshold": [
                float(f"{v:.7g}") if j >= 0 else 0.0
                for v, j in zip(self.threshold, self.feature, strict=True)
            ],
            "left": self.left.tolist(),
            "leaf": leaf,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RandomForest:
        if d.get("kind") != "random_forest":
            raise ValueError("not a random forest document")
        pr = d["params"]
        f = cls(
            int(pr["n_trees"]), int(pr["min_leaf"]), int(pr["max_depth"]), pr["max_features"], int(pr["seed"])
        )
        f.classes_ = list(d["classes"])
        f.n_features_ = int(d["n_features"])
        f.roots = np.asarray(d["roots"], dtype=np.int64)
        f.feature = np.asarray(d["feature"], dtype=np.int64)
        f.threshold = np.asarray(d["threshold"], dtype=np.float64)
        f.left = np.asarray(d["left"], dtype=np.int64)
        n = len(f.feature)
        if not (len(f.threshold) == len(f.left) == n) or len(f.roots) == 0:
            raise ValueError("random forest arrays disagree in length")
        inner = f.feature >= 0
        f.right = _right_children(f.feature, f.left)
        if (
            np.any(f.feature >= f.n_features_)
            or np.any(inner & ((f.left <= np.arange(n)) | (f.right <= np.arange(n)) | (f.right >= n)))
            or np.any((f.roots < 0) | (f.roots >= n))
        ):
            # children always come after their parent: a document that says otherwise could loop
            raise ValueError("random forest nodes point outside the forest")
        f.value = np.zeros((n, len(f.classes_)))
        leaves = np.nonzero(~inner)[0]
        if not isinstance(d["leaf"], list) or len(d["leaf"]) != len(leaves):
            raise ValueError("random forest leaf table does not match its leaves")
        try:
            for i, pairs in zip(leaves, d["leaf"], strict=True):
                for c, share in pairs:
                    if int(c) < 0:
                        raise IndexError(c)
                    f.value[i, int(c)] = float(share)
        except (IndexError, TypeError, ValueError) as e:
            raise ValueError(f"random forest leaf table is malformed: {e}") from e
        return f
