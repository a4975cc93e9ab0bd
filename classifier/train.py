"""`ccscope train` and `ccscope eval`: reference traces -> model artifact -> evaluation figures.

The reference set is lab measurements of known CCAs under seeded random draws of network
conditions (`classifier/conditions.py`), one measurement per (draw, CCA), in named sets:

* `train`: the draws the model is fitted on (and calibrated on, out of bag: the forest's trees
  that never saw a draw read it, so calibration stands for paths never trained on);
* `unseen`: evaluation draws over the whole space, never trained on (their seeds are disjoint);
* `variants`: untrained parameter variants of zoo CCAs on evaluation draws (should be Unknown);
* `other_profiles`: evaluation draws whose measurement profile is not ccscope's (SACK off,
  1xBDP, 50-400 kbit/s, ...), as imported captures are;
* `heldout_runs`: the census's own set-up (the standard profiles) on new seeds;
* `quic_train`, `quic_heldout_runs`, `quic_unseen`: the same for the lab's QUIC classes
  (`stack:cca`, `reference.quic_plan`), usually a collection of their own: `--root` is
  repeatable, and each transport's estimator is fitted on its own measurements.

The unit of evaluation is a measurement: all traces of one server, as `classify()` gets them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ccscope.classifier.core import summarise, verdict_from_summaries
from ccscope.classifier.estimator import CCAClassifier
from ccscope.classifier.identical import path_label
from ccscope.classifier.model import CLASSIFIER_VERSION, FAMILY, MODELS_DIR, Model, data_hash, family_of
from ccscope.classifier.summary import FEATURE_NAMES, QUIC_FEATURES, TraceSummary, feature_names
from ccscope.trace import Trace

DEFAULT_ROOT = Path("/var/tmp/ccscope-draws")
DEFAULT_QUIC_ROOT = Path("/var/tmp/ccscope-draws-quic")


def default_roots() -> list[Path]:
    """The reference collections the shipped model is trained on (TCP, and QUIC where measured):
    what the benches evaluate, so their figures are the ones the shipped summaries reproduce."""
    return [DEFAULT_ROOT] + ([DEFAULT_QUIC_ROOT] if DEFAULT_QUIC_ROOT.is_dir() else [])


FEATURES_FORMAT = "ccscope-reference-features/2"
DEFAULT_FEATURES = MODELS_DIR / f"reference-{CLASSIFIER_VERSION}.json.gz"
EVAL_SETS = ("unseen", "variants", "other_profiles", "heldout_runs", "quic_unseen", "quic_heldout_runs")


class ReferenceFeaturesError(ValueError):
    pass


@dataclass(frozen=True)
class Sample:
    """One reference measurement: its traces and what produced them."""

    key: str  # unique id of the measurement
    cca: str  # lab name
    label: str  # class name
    group: str  # the network draw it was measured on
    set: str  # train | unseen | variants | other_profiles | heldout_runs | ...
    variant: bool = False
    paths: tuple[str, ...] = ()  # its traces (sender alignment)
    truth: tuple[str, ...] = ()  # the server's own ground truth for the same transfers
    factors: dict[str, Any] = field(default_factory=dict)  # the draw's factor values
    transport: str = "tcp"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["paths"], d["truth"] = list(self.paths), list(self.truth)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Sample:
        return cls(
            key=str(d["key"]),
            cca=str(d["cca"]),
            label=str(d["label"]),
            group=str(d["group"]),
            set=str(d["set"]),
            variant=bool(d.get("variant", False)),
            paths=tuple(str(p) for p in d.get("paths", ())),
            truth=tuple(str(p) for p in d.get("truth", ())),
            factors=dict(d.get("factors") or {}),
            transport=str(d.get("transport") or "tcp"),
        )


# --- summaries --------------------------------------------------------------------------------


def summary_code_digest() -> str:
    """A digest of the code a summary comes from: the cache is named by it as well as by the
    version, so a feature edit without a version bump recomputes instead of reusing old values."""
    from ccscope import trace as trace_mod
    from ccscope.capture import tcp_bif
    from ccscope.classifier import core, detectors, features, summary

    h = hashlib.sha256()
    for mod in (trace_mod, features, detectors, core, summary, tcp_bif):
        h.update(Path(str(mod.__file__)).read_bytes())
    return h.hexdigest()[:12]


def _summarise_path(path: str) -> dict[str, Any]:
    try:
        file, _, frac = path.partition(HEAD_MARK)
        tr = Trace.load(file)
        return summarise(tr.head(tr.duration * float(frac)) if frac else tr).to_dict()
    except Exception as e:  # a broken trace is reported as such, never trained on silently
        return TraceSummary({}, f"unreadable trace: {type(e).__name__}: {e}").to_dict()


def summaries_for(
    paths: Sequence[str],
    cache_dir: Path,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, TraceSummary]:
    """Per-trace summaries, cached in `cache_dir` (keyed by path; the file name carries the
    classifier version and the code digest)."""
    cache_file = cache_dir / f"summaries-{CLASSIFIER_VERSION}-{summary_code_digest()}.json"
    cache: dict[str, Any] = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    todo = sorted(set(paths) - set(cache))
    if todo:
        done = 0
        if workers > 1:
            with ProcessPoolExecutor(workers) as ex:
                for p, d in zip(todo, ex.map(_summarise_path, todo, chunksize=8), strict=True):
                    cache[p] = d
                    done += 1
                    if progress:
                        progress(done, len(todo))
        else:
            for p in todo:
                cache[p] = _summarise_path(p)
                done += 1
                if progress:
                    progress(done, len(todo))
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps(cache, sort_keys=True))
    return {p: TraceSummary.from_dict(cache[p]) for p in set(paths)}


# --- the shipped reference features -----------------------------------------------------------


def save_reference_features(
    samples: Sequence[Sample], summ: dict[str, TraceSummary], root: Path | Sequence[Path], path: Path
) -> Path:
    """The samples and their summaries, paths relative to the root that holds them (several
    roots: a TCP and a QUIC collection; their job directories are named by draw and CCA, so
    they do not collide); gzip without a name or time stamp, so the same summaries give the
    same bytes."""
    roots = _roots(root)

    def rel(p: str) -> str:
        q = Path(p)
        r = next((r for r in roots if q.is_relative_to(r)), None)
        return str(q.relative_to(r)) if r is not None else p

    rels = [rel(p) for p in summ]
    if len(set(rels)) != len(rels):
        raise ReferenceFeaturesError("two reference roots hold traces under the same relative path")

    doc = {
        "format": FEATURES_FORMAT,
        "classifier_version": CLASSIFIER_VERSION,
        "features": list(FEATURE_NAMES),
        "quic_features": list(QUIC_FEATURES),
        "samples": [
            {**s.to_dict(), "paths": [rel(p) for p in s.paths], "truth": [rel(p) for p in s.truth]}
            for s in sorted(samples, key=lambda s: s.key)
        ],
        "summaries": {rel(p): summ[p].to_dict() for p in sorted(summ)},
    }
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
        gz.write(raw)
    return path


def load_reference_features(path: Path) -> tuple[list[Sample], dict[str, TraceSummary]]:
    """What `save_reference_features` wrote; ReferenceFeaturesError with the reason for a file
    that is not one, came from other feature code, or is damaged."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ReferenceFeaturesError(f"{path}: cannot read: {e.strerror or e}") from e
    try:
        doc = json.loads(gzip.decompress(raw))
    except (OSError, EOFError, ValueError) as e:
        raise ReferenceFeaturesError(f"{path}: not a readable gzip'd JSON document: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != FEATURES_FORMAT:
        raise ReferenceFeaturesError(f"{path}: not a {FEATURES_FORMAT} document")
    if doc.get("features") != list(FEATURE_NAMES):
        raise ReferenceFeaturesError(
            f"{path}: computed by classifier {doc.get('classifier_version')} with other features "
            f"than this code ({CLASSIFIER_VERSION}) computes; run `ccscope train --no-measure` "
            "on the reference traces"
        )
    try:
        samples = [Sample.from_dict(r) for r in doc["samples"]]
        summ = {str(k): TraceSummary.from_dict(v) for k, v in doc["summaries"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ReferenceFeaturesError(f"{path}: damaged sample or summary: {e!r}") from e
    if doc.get("quic_features", list(QUIC_FEATURES)) != list(QUIC_FEATURES):
        raise ReferenceFeaturesError(f"{path}: its QUIC traces carry other features than this code computes")
    for k, v in summ.items():
        if v.usable and set(v.features) != set(feature_names(v.transport)):
            raise ReferenceFeaturesError(f"{path}: summary of {k} does not hold one value per feature")
    missing = sorted({p for s in samples for p in (*s.paths, *s.truth)} - set(summ))
    if missing:
        raise ReferenceFeaturesError(f"{path}: {len(missing)} traces have no summary, e.g. {missing[0]}")
    return sorted(samples, key=lambda s: s.key), summ


# --- fitting ----------------------------------------------------------------------------------


def fit_model(
    train: Sequence[Sample],
    summ: dict[str, TraceSummary],
    meta: dict[str, Any],
    *,
    truth: bool = False,
    params: dict[str, Any] | None = None,
) -> Model:
    """Fit one estimator per transport on the training measurements (their traces, or with
    `truth` the server's own ground-truth series of the same transfers: the oracle the bench
    compares with)."""
    use = [s for s in sorted(train, key=lambda s: s.key) if not s.variant]
    ests, counts = fit_estimators(use, summ, truth=truth, params=params)
    if "tcp" not in ests:
        raise ReferenceFeaturesError("no usable TCP training measurement")
    meta = {**meta, "fitted": counts, "data": data_hash([(s.key, s.label, s.group) for s in use])}
    version = f"ccscope-{CLASSIFIER_VERSION}+{meta['data'][:8]}" + ("-oracle" if truth else "")
    model = Model(version=version, estimators=ests, training=meta)
    # evaluate exactly what ships: the artifact's rounded numbers, not the in-memory fit
    return Model.from_dict(json.loads(json.dumps(model.to_dict())))


def fit_estimators(
    train: Sequence[Sample],
    summ: dict[str, TraceSummary],
    *,
    truth: bool = False,
    params: dict[str, Any] | None = None,
    transports: Sequence[str] | None = None,
) -> tuple[dict[str, CCAClassifier], dict[str, dict[str, int]]]:
    """`fit_model`'s estimators (of `transports`, default every one the samples have) and how
    many measurements each was fitted on; a transport without a usable one has none."""
    use = [s for s in sorted(train, key=lambda s: s.key) if not s.variant]
    ests: dict[str, CCAClassifier] = {}
    counts: dict[str, dict[str, int]] = {}
    for transport in sorted(transports or {s.transport for s in use}):
        mine = [s for s in use if s.transport == transport]
        X = [[summ[p] for p in (s.truth if truth else s.paths)] for s in mine]
        keep = [i for i, m in enumerate(X) if any(t.usable for t in m)]
        if not keep:
            continue
        kw = {"features": feature_names(transport), **(params or {})}
        families = {c: family_of(c) for c in {s.label for s in mine} | set(FAMILY)}
        ests[transport] = CCAClassifier(families=families, **kw).fit(
            [X[i] for i in keep],
            [mine[i].label for i in keep],
            [mine[i].group for i in keep],
            # the rules are calibrated on whole downloads, what verdicts are given for; the
            # prefixes only train the trees
            calibrate=[HEAD_MARK not in mine[i].key for i in keep],
        )
        counts[transport] = {"train_measurements": len(keep), "train_unusable": len(mine) - len(keep)}
    return ests, counts


# --- evaluation -------------------------------------------------------------------------------


def predict_rows(
    model: Model, samples: Sequence[Sample], summ: dict[str, TraceSummary], *, truth: bool = False
) -> list[dict[str, Any]]:
    rows = []
    for s in samples:
        paths = s.truth if truth else s.paths
        if not paths:
            continue
        m = [summ[p] for p in paths]
        v = verdict_from_summaries(m, model)
        pred = v.label if v.kind == "cca" else ("unknown" if v.kind == "unknown" else "insufficient")
        ev = v.evidence or {}
        top = ev.get("top_classes") or [{"class": "insufficient"}]
        shape = ev.get("shape_model_top") or top
        rows.append(
            {
                "key": s.key,
                "set": s.set,
                "cca": s.cca,
                # the class the measurement is on its own path (HighSpeed with windows that
                # never left its Reno region is Reno there: classifier/identical.py)
                "label": path_label(s.label, m),
                "label_spec": s.label,
                "variant": s.variant,
                "pred": pred,
                "nearest": v.nearest,
                "confidence": round(v.confidence, 4),
                "top1": top[0]["class"],
                "top1_naive_bayes": shape[0]["class"],
                "reason": (v.reason or "; ".join(ev.get("unknown_because", [])))[:300] or None,
                "factors": s.factors,
            }
        )
    return rows


def wilson(k: int, n: int, z: float = 1.96) -> list[float] | None:
    if n == 0:
        return None
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(max(0.0, c - h), 4), round(min(1.0, c + h), 4)]


def mean_recall(rows: Sequence[dict[str, Any]], key: str = "pred") -> float | None:
    by: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        by[r["label"]].append(r[key] == r["label"])
    return float(np.mean([np.mean(v) for v in by.values()])) if by else None


def mean_recall_ci(rows: Sequence[dict[str, Any]], n_boot: int = 2000, seed: int = 7) -> list[float] | None:
    """95 % bootstrap interval of the mean per-class recall, resampling measurements within
    each class (the classes' sizes are the plan's, not chance)."""
    by: dict[str, np.ndarray] = {}
    for c in sorted({r["label"] for r in rows}):
        by[c] = np.array([r["pred"] == c for r in rows if r["label"] == c], dtype=float)
    if not by:
        return None
    rng = np.random.default_rng(seed)
    stats = np.zeros(n_boot)
    for v in by.values():
        stats += rng.choice(v, size=(n_boot, len(v)), replace=True).mean(axis=1)
    stats /= len(by)
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return [round(float(lo), 4), round(float(hi), 4)]


def score(rows: Sequence[dict[str, Any]], classes: Sequence[str]) -> dict[str, Any]:
    """Recall and the three ways to be not right (Unknown, insufficient, wrong), with intervals."""
    known = [r for r in rows if not r["variant"] and r["label"] in classes]
    n = len(known)
    cnt = {
        k: sum(1 for r in known if f(r))
        for k, f in (
            ("right", lambda r: r["pred"] == r["label"]),
            ("unknown", lambda r: r["pred"] == "unknown"),
            ("insufficient", lambda r: r["pred"] == "insufficient"),
            ("wrong", lambda r: r["pred"] not in (r["label"], "unknown", "insufficient")),
        )
    }
    per: dict[str, dict[str, Any]] = {}
    for c in classes:
        rr = [r for r in known if r["label"] == c]
        if rr:
            k = sum(r["pred"] == c for r in rr)
            per[c] = {"n": len(rr), "recall": round(k / len(rr), 4), "ci": wilson(k, len(rr))}
    cols = [*classes, "unknown", "insufficient"]
    cm = {c: dict.fromkeys(cols, 0) for c in classes}
    for r in known:
        cm[r["label"]][r["pred"] if r["pred"] in cols else "unknown"] += 1
    out: dict[str, Any] = {
        "measurements": n,
        # measurements of a CCA that was Reno on their path, scored as Reno (classifier/identical.py)
        "reno_on_path": sum(1 for r in known if r.get("label_spec", r["label"]) != r["label"]),
        "mean_recall": _r4(mean_recall(known)),
        "mean_recall_ci": mean_recall_ci(known),
        "mean_recall_top1": _r4(mean_recall(known, "top1")),
        "mean_recall_naive_bayes": _r4(mean_recall(known, "top1_naive_bayes")),
        "per_class": per,
        "confusion": {
            "rows": list(classes),
            "cols": cols,
            "matrix": [[cm[c][k] for k in cols] for c in classes],
        },
    }
    for k, v in cnt.items():
        out[f"{k}_rate"] = round(v / n, 4) if n else None
        out[f"{k}_ci"] = wilson(v, n)
    # "unknown, X-like": an Unknown that names the family its probability is sure of; how often
    # one is given, and how often its family is the CCA's (an answer a census reader can use)
    fam = [r for r in known if r["pred"] == "unknown" and r.get("nearest")]
    fam_ok = sum(1 for r in fam if r["nearest"] == family_of(str(r["label"])))
    out["family_named_rate"] = round(len(fam) / n, 4) if n else None
    out["family_named_ci"] = wilson(len(fam), n)
    out["family_right_rate"] = round(fam_ok / len(fam), 4) if fam else None
    out["family_right_ci"] = wilson(fam_ok, len(fam))
    return out


def score_variants(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    var = [r for r in rows if r["variant"]]
    k = sum(r["pred"] == "unknown" for r in var)
    per = {}
    for v in sorted({r["cca"] for r in var}):
        rr = [r for r in var if r["cca"] == v]
        kk = sum(r["pred"] == "unknown" for r in rr)
        named: dict[str, int] = defaultdict(int)
        for r in rr:
            named[r["pred"]] += 1
        per[v] = {
            "n": len(rr),
            "unknown_rate": round(kk / len(rr), 4),
            "predicted": dict(sorted(named.items())),
        }
    return {
        "measurements": len(var),
        "unknown_rate": round(k / len(var), 4) if var else None,
        "unknown_ci": wilson(k, len(var)),
        "per_variant": per,
    }


def evaluate(
    model: Model, samples: Sequence[Sample], summ: dict[str, TraceSummary], *, truth: bool = False
) -> dict[str, Any]:
    """Scores per evaluation set, with the predictions they come from."""
    res: dict[str, Any] = {
        "model_version": model.version,
        "classes": list(model.estimators["tcp"].classes_) if "tcp" in model.estimators else [],
    }
    if "quic" in model.estimators:
        res["quic_classes"] = list(model.estimators["quic"].classes_)
    for name in sorted({s.set for s in samples} - {"train", "quic_train"}):
        transport = "quic" if name.startswith("quic_") else "tcp"
        if transport not in model.estimators:
            continue  # a model without this transport's classes (one fitted on the other alone)
        rows = predict_rows(model, [s for s in samples if s.set == name], summ, truth=truth)
        if not rows:
            continue
        entry: dict[str, Any] = {"predictions": rows}
        classes = model.estimators[transport].classes_
        if any(not r["variant"] for r in rows):
            entry.update(score(rows, list(classes)))
        if any(r["variant"] for r in rows):
            entry["variants"] = score_variants(rows)
        res[name] = entry
    res["weakest_pairs"] = weakest_pairs(res)
    return res


def weakest_pairs(res: dict[str, Any], n: int = 10) -> list[dict[str, Any]]:
    pairs: dict[tuple[str, str], int] = defaultdict(int)
    for entry in res.values():
        if not isinstance(entry, dict) or "predictions" not in entry:
            continue
        for r in entry["predictions"]:
            if not r["variant"] and r["pred"] not in (r["label"], "unknown", "insufficient"):
                pairs[(r["label"], r["pred"])] += 1
    top = sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return [{"true": a, "predicted": b, "count": c} for (a, b), c in top]


def _r4(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


# --- reports ----------------------------------------------------------------------------------


def headline(res: dict[str, Any]) -> dict[str, Any]:
    def g(s: str, k: str) -> Any:
        return (res.get(s) or {}).get(k)

    return {
        "model": res.get("model_version"),
        "recall_unseen": g("unseen", "mean_recall"),
        "recall_unseen_ci": g("unseen", "mean_recall_ci"),
        "unknown_known_unseen": g("unseen", "unknown_rate"),
        "wrong_known_unseen": g("unseen", "wrong_rate"),
        "insufficient_unseen": g("unseen", "insufficient_rate"),
        "recall_other_profiles": g("other_profiles", "mean_recall"),
        "recall_heldout_runs": g("heldout_runs", "mean_recall"),
        "unknown_variants_unseen": ((res.get("variants") or {}).get("variants") or {}).get("unknown_rate"),
        "recall_quic_unseen": g("quic_unseen", "mean_recall"),
        "recall_quic_heldout_runs": g("quic_heldout_runs", "mean_recall"),
        "weakest_pairs": res.get("weakest_pairs"),
    }


def write_eval(res: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(res, indent=1, sort_keys=True, allow_nan=False) + "\n")
    md = [f"# ccscope classifier evaluation ({res.get('model_version')})", ""]
    for name in EVAL_SETS:
        e = res.get(name)
        if not e or "confusion" not in e:
            continue
        md.append(confusion_markdown(e, name))
        md.append(
            f"Right {e['right_rate']:.3f}, Unknown {e['unknown_rate']:.3f}, insufficient "
            f"{e['insufficient_rate']:.3f}, wrong {e['wrong_rate']:.3f} of {e['measurements']} "
            "known-CCA measurements.\n"
        )
    v = (res.get("variants") or {}).get("variants")
    if v:
        md.append(f"Untrained variants called Unknown: {v['unknown_rate']:.3f} ({v['measurements']})")
        for name, pv in v["per_variant"].items():
            md.append(f"* {name}: {pv['unknown_rate']:.3f} of {pv['n']}; {pv['predicted']}")
        md.append("")
    md.append(
        "Weakest pairs: "
        + ", ".join(f"{p['true']}→{p['predicted']} ({p['count']})" for p in res.get("weakest_pairs", []))
    )
    (out / "eval.md").write_text("\n".join(md) + "\n")
    confusion_png(res, out / "confusion.png")


def confusion_markdown(e: dict[str, Any], name: str) -> str:
    cm = e["confusion"]
    cols = cm["cols"]
    lines = [
        f"### {name.replace('_', ' ')}: mean per-class recall {e['mean_recall']:.3f} {e['mean_recall_ci']}",
        "",
    ]
    lines.append("| true \\ predicted | " + " | ".join(c[:6] for c in cols) + " | recall |")
    lines.append("|---|" + "---|" * (len(cols) + 1))
    for c, row in zip(cm["rows"], cm["matrix"], strict=True):
        rec = (e["per_class"].get(c) or {}).get("recall")
        lines.append(
            f"| {c} | "
            + " | ".join(str(v) if v else "." for v in row)
            + f" | {'-' if rec is None else f'{rec:.2f}'} |"
        )
    return "\n".join(lines) + "\n"


def confusion_png(res: dict[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    sets = [s for s in EVAL_SETS if (res.get(s) or {}).get("confusion")]
    if not sets:
        return None
    fig, axs = plt.subplots(1, len(sets), figsize=(9 * len(sets), 8), squeeze=False)
    for ax, name in zip(axs[0], sets, strict=True):
        cm = res[name]["confusion"]
        m = np.asarray(cm["matrix"], dtype=float)
        m = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
        ax.imshow(m, cmap="Blues", vmin=0, vmax=1)
        ax.set_xticks(range(len(cm["cols"])), cm["cols"], rotation=90, fontsize=8)
        ax.set_yticks(range(len(cm["rows"])), cm["rows"], fontsize=8)
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                if m[i, j] > 0:
                    ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=6,
                            color="white" if m[i, j] > 0.5 else "black")  # fmt: skip
        ax.set_title(f"{name.replace('_', ' ')} (mean recall {res[name]['mean_recall']:.3f})")
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)
    return path


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- the lab's reference index ----------------------------------------------------------------


def sample_set(rec: dict[str, Any]) -> str:
    """Which evaluation set a collected measurement belongs to (see the module docstring); a
    QUIC measurement's set carries the prefix `quic_` (QUIC classes are their own)."""
    if rec.get("transport", "tcp") == "quic":
        return "quic_" + sample_set({**rec, "transport": "tcp"})
    split, space, run = rec.get("split"), rec.get("space"), int(rec.get("run", 0))
    if rec.get("is_variant"):
        return "variants" if split == "eval" else "variants_design"
    if split == "train":
        return "train" if run == 0 else "heldout_runs"
    if split == "eval":
        return {"full": "unseen", "other-profiles": "other_profiles"}.get(str(space), str(space))
    return str(split)


# Every training measurement also trains as its first half and first three quarters: a census
# trace can stop anywhere (a short object, adaptive stopping), and a prefix is a real trace of
# the same CCA on the same path, only with fewer cycles. A prefix's path is `FILE#head=F`;
# prefixes share their measurement's draw, so they never calibrate each other.
PREFIXES = (0.5, 0.75)
HEAD_MARK = "#head="


def with_prefixes(samples: Sequence[Sample], fractions: Sequence[float] = PREFIXES) -> list[Sample]:
    out = list(samples)
    for s in samples:
        if s.set not in ("train", "quic_train"):
            continue
        for f in fractions:
            out.append(
                replace(
                    s,
                    key=f"{s.key}{HEAD_MARK}{f}",
                    paths=tuple(f"{p}{HEAD_MARK}{f}" for p in s.paths),
                    truth=tuple(f"{p}{HEAD_MARK}{f}" for p in s.truth),
                )
            )
    return out


def load_samples(root: Path) -> tuple[list[Sample], list[str]]:
    """Every collected measurement under `root` (its index.jsonl, the last line per job) as a
    Sample, and a line per job left out with the reason (failed jobs, missing files): a broken
    lab run is reported, never trained on silently."""
    index = root / "index.jsonl"
    if not index.exists():
        return [], []
    last: dict[str, dict[str, Any]] = {}
    for line in index.read_text().splitlines():
        with_rec = json.loads(line)
        last[str(with_rec["key"])] = with_rec
    out, skipped = [], []
    for key in sorted(last):
        rec = last[key]
        if rec.get("status") == "failed":
            skipped.append(f"{key}: failed: {rec.get('reason')}")
            continue
        slots = rec.get("slots") or {}
        paths, truth = [], []
        for slot in sorted(slots):
            s = slots[slot]
            f = s.get("sender_trace")
            if f and Path(f).exists():
                paths.append(str(f))
                t = s.get("truth_trace")
                if t and Path(t).exists():
                    truth.append(str(t))
        if not paths:
            skipped.append(f"{key}: no trace file on disk")
            continue
        draw = rec.get("draw") or {}
        out.append(
            Sample(
                key=key,
                cca=str(rec["cca"]),
                label=str(rec["label"]),
                group=str(rec.get("draw_id")),
                set=sample_set(rec),
                variant=bool(rec.get("is_variant")),
                paths=tuple(paths),
                truth=tuple(truth) if len(truth) == len(paths) else (),
                factors=draw_factors(draw, rec),
                transport=str(rec.get("transport") or "tcp"),
            )
        )
    return with_prefixes(out), skipped


def draw_factors(draw: dict[str, Any], rec: dict[str, Any]) -> dict[str, Any]:
    """The draw's values the bench breaks figures down by (a flat, JSON-small summary)."""
    path, sh = draw.get("path") or {}, draw.get("sharing") or {}
    pl, sv, pr = draw.get("placement") or {}, draw.get("server") or {}, draw.get("profile") or {}
    return {
        "fixed": list(rec.get("fixed") or draw.get("fixed") or []),
        "rtt_ms": path.get("rtt_ms"),
        "loss": path.get("loss"),
        "ge_loss": bool(path.get("ge_loss")),
        "reorder": path.get("reorder"),
        "cross": sh.get("rate_mbit") is not None
        and (bool(sh.get("flows")) or (sh.get("udp_share") or 0) > 0),
        "access": len(pl.get("access") or []),
        "upstream": pl.get("upstream_ratio") is not None,
        "program": sv.get("program"),
        "initcwnd": sv.get("initcwnd"),
        "app_limited": sv.get("app_limit") is not None,
        "profile_kind": pr.get("kind"),
        "rate_kbit": pr.get("rate_kbit"),
        "buffer_bdp": pr.get("buffer_bdp"),
        "sack": pr.get("sack"),
        "mtu": pr.get("mtu"),
    }


def _roots(root: Path | Sequence[Path]) -> list[Path]:
    return [Path(root)] if isinstance(root, (str, Path)) else [Path(r) for r in root]


def reference_data(
    root: Path | Sequence[Path],
    *,
    features: Path | None = None,
    shipped_fallback: bool = False,
    extend: bool = False,
    remeasured: bool = False,
    workers: int = 1,
) -> tuple[list[Sample], dict[str, TraceSummary], Path | None]:
    """The reference measurements and their summaries, and the features file they came from
    (None: the traces under `root`, one collection or several, e.g. the TCP and the QUIC
    one): `features` when given, else the traces, else (with `shipped_fallback`) the shipped
    DEFAULT_FEATURES. Each root caches its own traces' summaries. With `extend`, the
    features file's measurements and the roots' together (a collection grown after its
    traces were gone: the summaries are all training needs); source None, since the union
    is in no file yet. With `remeasured` too, a measurement under the roots replaces the
    file's one of the same key (a set measured again, e.g. with a new client); without it
    a key in both is an error."""
    if extend:
        if features is None:
            raise ReferenceFeaturesError("extending needs a reference-features file to extend")
        base, base_summ = load_reference_features(features)
        more, more_summ, _ = reference_data(root, workers=workers)
        clash = sorted({s.key for s in base} & {s.key for s in more})
        if clash and remeasured:
            gone = {p for s in base if s.key in set(clash) for p in (*s.paths, *s.truth)}
            base = [s for s in base if s.key not in set(clash)]
            base_summ = {k: v for k, v in base_summ.items() if k.split("#", 1)[0] not in gone}
            log(f"{len(clash)} measurements of {features} replaced by their new measurements")
        elif clash:
            raise ReferenceFeaturesError(
                f"{len(clash)} measurements are both in {features} and under the roots, e.g. "
                f"{clash[0]} (collect with --skip-in {features})"
            )
        return sorted([*base, *more], key=lambda s: s.key), base_summ | more_summ, None
    if features is None:
        samples: list[Sample] = []
        summ: dict[str, TraceSummary] = {}
        for r in _roots(root):
            mine, skipped = load_samples(r)
            for s in skipped[:3]:
                log(f"left out: {s[:300]}")
            if len(skipped) > 3:
                log(f"... {len(skipped)} measurements left out in all under {r} (failed or without traces)")
            paths = [p for s in mine for p in (*s.paths, *s.truth)]
            if paths:
                summ |= summaries_for(paths, r, workers=workers, progress=_progress(f"summarising {r}"))
            samples += mine
        dup = sorted(k for k, n in Counter(s.key for s in samples).items() if n > 1)
        if dup:
            raise ReferenceFeaturesError(f"{len(dup)} measurements are in two roots, e.g. {dup[0]}")
        if samples:
            return sorted(samples, key=lambda s: s.key), summ, None
        if not (shipped_fallback and DEFAULT_FEATURES.exists()):
            return [], {}, None
        features = DEFAULT_FEATURES
    samples, summ = load_reference_features(features)
    return samples, summ, features


def _progress(what: str) -> Callable[[int, int], None] | None:
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        print(f"\r{what} {done}/{total}", end="" if done < total else "\n", file=sys.stderr, flush=True)

    return show


def train_and_eval(
    root: Path | Sequence[Path],
    out_dir: Path | None,
    eval_dir: Path | None,
    *,
    workers: int = 1,
    features: Path | None = None,
    extend: bool = False,
    remeasured: bool = False,
) -> tuple[Model, dict[str, Any], Path | None]:
    """Fit on the reference set (traces under `root`, one or several collections, or a
    features file) and evaluate; write the model, the reference summaries beside it, and the
    evaluation."""
    samples, summ, source = reference_data(
        root, features=features, extend=extend, remeasured=remeasured, workers=workers
    )
    train = [s for s in samples if s.set in ("train", "quic_train")]
    if not train:
        raise ReferenceFeaturesError(
            f"no training measurements under {', '.join(map(str, _roots(root)))}; `ccscope collect` "
            "measures them"
        )
    meta = {
        "reference_measurements": len(samples),
        # measurements per set (a training measurement's prefixes are not counted again)
        "sets": {
            k: sum(1 for s in samples if s.set == k and HEAD_MARK not in s.key)
            for k in sorted({s.set for s in samples})
        },
        "alignment": "sender",
        "prefixes": list(PREFIXES),
    }
    model = fit_model(train, summ, meta)
    path = None
    if out_dir is not None:
        path = model.save(out_dir / f"ccscope-{CLASSIFIER_VERSION}.json")
        if source is None:
            save_reference_features(samples, summ, root, out_dir / DEFAULT_FEATURES.name)
    res = evaluate(model, samples, summ)
    if eval_dir is not None:
        write_eval(res, eval_dir)
    return model, res, path
