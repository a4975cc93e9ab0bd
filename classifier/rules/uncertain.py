"""Unknown when the forest is not sure enough to be trusted: selective classification with a
stated error budget.

The conformal rules bound how often a *known* CCA is called Unknown; they say nothing about how
often a named verdict is wrong, and off the training paths that is what a census reader needs.

The forest's probability alone ranks verdicts badly for this: a class the forest uses as the
sink for shapeless traces (Reno on a lossy path) is wrong at 85 % as often as a class with a
sharp signature (Westwood's back-off to the measured BDP) is at 40 %. One threshold on the
probability must then sit where the worst class is safe, and shuts out most of the others.
So the rule first estimates, per measurement, the chance that its named class is right: a
logistic model of "the top class was right" on the logit of the top probability, with an
intercept and a slope per named class and an offset per **stratum** of the path the trace
itself shows (SACK seen or not; the BDP in segments under 12, 12-40, over 40: a window of a
few segments moves by whole segments per round trip whatever the controller, and without SACK a
recovery hides the window). The per-class and per-stratum terms are ridge-penalised towards the
pooled fit (`gate_ridge`), so a class with few calibration measurements borrows the pooled one.

It is fitted on the out-of-bag calibration set (every training measurement read by trees that
never saw its network draw). The gate `tau` is then the lowest estimated chance such that
measurements at or above it were wrong at most `max_wrong` of the time, counted conservatively
(one extra error), on estimates **cross-fitted** by draw (`gate_folds`: each measurement's
estimate comes from a model that never saw its draw), so the budget is not spent on the
estimate's own optimism. Below `tau` the measurement is Unknown.

The same selective test one level up, on family probabilities, picks `tau_family`: an Unknown
measurement whose family (BBR, CUBIC, Reno, ...) holds at least that much probability is
reported as "unknown, <family>-like"; otherwise no family is named.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ccscope.classifier.rules.base import RuleResult

if TYPE_CHECKING:
    from ccscope.classifier.estimator import CCAClassifier

NEVER = 1.01  # a threshold no probability reaches: the budget cannot be met at any confidence
BDP_EDGES = (12.0, 40.0)  # segments: where AIMD steps dominate / where shapes have room
STRATA = tuple(f"{s}-{b}" for s in ("sack", "nosack") for b in ("small", "mid", "large"))


def stratum(clf: CCAClassifier, rows: np.ndarray) -> str:
    """The path stratum of a measurement's usable traces (their median)."""
    names = list(clf.features)
    sack = float(np.nanmedian(rows[:, names.index("ctx_sack")])) >= 0.5 if "ctx_sack" in names else False
    bdp = float(np.exp(np.nanmedian(rows[:, names.index("ctx_bdp_pkts")]))) if "ctx_bdp_pkts" in names else 0
    size = "small" if bdp < BDP_EDGES[0] else "mid" if bdp < BDP_EDGES[1] else "large"
    return f"{'sack' if sack else 'nosack'}-{size}"


def selective_threshold(p: Sequence[float], right: Sequence[bool], max_wrong: float) -> tuple[float, float]:
    """The lowest threshold on `p` whose accepted set (p >= threshold) has a conservative error
    rate (wrong + 1) / (accepted + 1) of at most `max_wrong`, and the share it accepts."""
    order = np.argsort(-np.asarray(p, dtype=np.float64), kind="stable")
    ps = np.asarray(p, dtype=np.float64)[order]
    ok = np.asarray(right, dtype=bool)[order]
    best, cover = NEVER, 0.0
    wrong = 0
    for i in range(len(ps)):
        wrong += int(not ok[i])
        # only cut between distinct values: ties are accepted or refused together
        if i + 1 < len(ps) and ps[i + 1] == ps[i]:
            continue
        if (wrong + 1) / (i + 2) <= max_wrong:
            best, cover = float(ps[i]), (i + 1) / len(ps)
    return best, cover


def _logit(p: np.ndarray | float) -> np.ndarray:
    q = np.clip(np.asarray(p, dtype=np.float64), 1e-4, 1 - 1e-4)
    return np.log(q / (1 - q))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -50.0, 50.0)))


class RightnessModel:
    """P(the named class is right | its probability, which class, the path's stratum): a
    ridge-penalised logistic regression, fitted by Newton's method (deterministic, no solver
    options). Columns: intercept, logit p, per class an intercept and a slope, per stratum an
    offset; only the pooled intercept and slope are (almost) unpenalised."""

    def __init__(self, classes: Sequence[str], ridge: float) -> None:
        self.classes = list(classes)
        self.ridge = ridge
        self.w = np.zeros(2 + 2 * len(self.classes) + len(STRATA))

    def design(self, proba: np.ndarray, strata: Sequence[str]) -> np.ndarray:
        n, k = len(proba), len(self.classes)
        top = proba.argmax(axis=1)
        x = _logit(proba.max(axis=1))
        X = np.zeros((n, len(self.w)))
        X[:, 0], X[:, 1] = 1.0, x
        X[np.arange(n), 2 + top] = 1.0
        X[np.arange(n), 2 + k + top] = x
        for i, s in enumerate(strata):
            if s in STRATA:
                X[i, 2 + 2 * k + STRATA.index(s)] = 1.0
        return X

    def fit(self, proba: np.ndarray, strata: Sequence[str], right: np.ndarray) -> RightnessModel:
        X, y = self.design(proba, strata), np.asarray(right, dtype=np.float64)
        pen = np.full(X.shape[1], self.ridge)
        pen[:2] = 1e-6  # keeps the pooled fit finite when a calibration set is all right
        w = np.zeros(X.shape[1])
        for _ in range(100):
            q = _sigmoid(X @ w)
            grad = X.T @ (q - y) + pen * w
            hess = (X * (q * (1 - q))[:, None]).T @ X + np.diag(pen)
            step = np.linalg.solve(hess, grad)
            w -= step
            if float(np.abs(step).max()) < 1e-9:
                break
        self.w = w
        return self

    def predict(self, proba: np.ndarray, strata: Sequence[str]) -> np.ndarray:
        return _sigmoid(self.design(proba, strata) @ self.w)

    def to_dict(self) -> dict[str, Any]:
        k = len(self.classes)
        r = [float(f"{v:.6g}") for v in self.w]
        return {
            "pooled": r[:2],
            "class": {c: [r[2 + i], r[2 + k + i]] for i, c in enumerate(self.classes)},
            "stratum": {s: r[2 + 2 * k + j] for j, s in enumerate(STRATA)},
        }

    @classmethod
    def from_dict(cls, classes: Sequence[str], d: dict[str, Any]) -> RightnessModel:
        m = cls(classes, 0.0)
        k = len(m.classes)
        m.w[:2] = d["pooled"]
        for i, c in enumerate(m.classes):
            m.w[2 + i], m.w[2 + k + i] = d["class"].get(c, (0.0, 0.0))
        for j, s in enumerate(STRATA):
            m.w[2 + 2 * k + j] = float(d["stratum"].get(s, 0.0))
        if not np.isfinite(m.w).all():
            raise ValueError("a weight is not a finite number")
        return m


def draw_folds(groups: Sequence[str], n_folds: int, seed: int) -> np.ndarray:
    """A fold per measurement, whole network draws together, seeded."""
    uniq = sorted(set(groups))
    order = np.random.default_rng(seed).permutation(len(uniq))
    fold = {uniq[j]: i % n_folds for i, j in enumerate(order)}
    return np.array([fold[g] for g in groups], dtype=np.int64)


def family_proba(clf: CCAClassifier, proba: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, c in enumerate(clf.classes_):
        f = clf.families.get(c, c)
        out[f] = out.get(f, 0.0) + float(proba[k])
    return out


class Uncertain:
    name = "uncertain"

    def fit(self, clf: CCAClassifier) -> dict[str, Any]:
        cal = clf.calib_
        pr, truth = cal["proba"], cal["truth"]
        right = pr.argmax(axis=1) == truth
        strata = [stratum(clf, clf.trace_rows(m)) for m in cal["measurements"]]
        folds = draw_folds(cal["groups"], clf.gate_folds, clf.seed)
        crossed = np.zeros(len(right))
        for f in range(clf.gate_folds):
            out = folds == f
            if out.all() or not out.any():
                continue
            inn = ~out
            m = RightnessModel(clf.classes_, clf.gate_ridge).fit(
                pr[inn], [s for s, k in zip(strata, inn, strict=True) if k], right[inn]
            )
            crossed[out] = m.predict(pr[out], [s for s, k in zip(strata, out, strict=True) if k])
        tau, cover = selective_threshold(crossed.tolist(), right.tolist(), clf.max_wrong)
        model = RightnessModel(clf.classes_, clf.gate_ridge).fit(pr, strata, right)
        fp, fright = [], []
        for row, t in zip(pr, truth, strict=True):
            fam = family_proba(clf, row)
            best = max(fam, key=lambda f: fam[f])
            fp.append(fam[best])
            fright.append(best == clf.families.get(clf.classes_[int(t)], clf.classes_[int(t)]))
        tau_f, cover_f = selective_threshold(fp, fright, clf.max_wrong)
        return {
            "tau": round(tau, 6),
            "coverage": round(cover, 4),
            "rightness": model.to_dict(),
            "tau_family": round(tau_f, 6),
            "coverage_family": round(cover_f, 4),
            "calibration_measurements": len(truth),
        }

    @staticmethod
    def validate(clf: CCAClassifier, state: dict[str, Any]) -> None:
        """A model file's calibration of this rule, refused on load when damaged rather than
        met mid-verdict."""
        try:
            float(state["tau"])
            RightnessModel.from_dict(clf.classes_, state["rightness"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"the uncertain rule's calibration is damaged: {e!r}") from e

    def check(
        self, clf: CCAClassifier, state: dict[str, Any], rows: np.ndarray, proba: np.ndarray, best: int
    ) -> RuleResult:
        p = float(proba[best])
        st = stratum(clf, rows)
        tau = float(state["tau"])
        model = RightnessModel.from_dict(clf.classes_, state["rightness"])
        right = float(model.predict(np.asarray(proba, dtype=np.float64)[None, :], [st])[0])
        details = {"tau": tau, "p": round(p, 4), "p_right": round(right, 4), "stratum": st}
        if right >= tau:
            return RuleResult(1.0, None, details)
        c = clf.classes_[best]
        like = (
            f"verdicts of {c} at {p:.0%} on paths like this one ({st}) were right about {right:.0%} "
            "of the time on network draws the trees never saw"
        )
        if tau > 1.0:
            gate = f"no gate keeps named verdicts right {1 - clf.max_wrong:.0%} of the time"
        else:
            gate = f"named verdicts are right {1 - clf.max_wrong:.0%} of the time only from {tau:.0%} up"
        return RuleResult(0.0, f"not sure enough: {like}, and {gate}", details)

    @staticmethod
    def family(clf: CCAClassifier, state: dict[str, Any], proba: np.ndarray) -> str | None:
        """The family to name in an Unknown verdict, when its probability clears `tau_family`."""
        fam = family_proba(clf, proba)
        best = max(fam, key=lambda f: fam[f])
        return best if fam[best] >= float(state.get("tau_family", NEVER)) else None
