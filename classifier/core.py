"""The public entry: traces of one measurement in, a Verdict out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ccscope.classifier.detectors import run_detectors
from ccscope.classifier.features import FEATURES, InsufficientData, analyse
from ccscope.classifier.model import FAMILY, Model, TraceSummary, decide, profile_key
from ccscope.trace import Trace
from ccscope.verdict import UNKNOWN, Verdict


@lru_cache(maxsize=4)
def _load_model(path: str | None) -> Model:
    return Model.load(Path(path) if path else None)


def summarise(trace: Trace) -> TraceSummary:
    """Every per-trace stage: features, detectors, and the evidence a person can check."""
    try:
        a = analyse(trace)
    except InsufficientData as e:
        prof = (trace.profile or {}).get("name")
        return TraceSummary(str(prof or "?"), [], {}, insufficient=str(e))
    findings = run_detectors(a)
    ev = a.evidence()
    ev["detectors"] = {f.name: f.to_dict() for f in findings}
    return TraceSummary(
        profile_key(a.prepared.profile, a.prepared.rtt),
        [float(v) for v in a.features],
        {f.name: f.score for f in findings},
        None,
        ev,
        rtt_ms=float(a.prepared.rtt * 1000.0),
    )


def classify(
    traces: Sequence[Trace], model: Model | None = None, *, model_path: str | Path | None = None
) -> Verdict:
    """Classify one server from its traces (typically profiles A and B of one measurement)."""
    m = model or _load_model(str(model_path) if model_path else None)
    v = verdict_from_summaries([summarise(t) for t in traces], m)
    # Which alignment was read (the model's is in its training record): a reader can tell a
    # verdict on sender-aligned traces from one forced onto capture-aligned ones.
    aligned = sorted({t.alignment for t in traces}) or ["none"]
    return replace(v, evidence={**v.evidence, "alignment": "+".join(aligned)})


def verdict_from_summaries(summaries: Sequence[TraceSummary], m: Model) -> Verdict:
    version = f"{m.version}"
    per_trace: list[dict[str, Any]] = [
        {"profile": s.profile, "insufficient": s.insufficient, **s.evidence} for s in summaries
    ]
    usable = [s for s in summaries if s.insufficient is None]
    if not usable:
        reason = summaries[0].insufficient if summaries else "no trace was given"
        return Verdict.insufficient(reason or "no usable trace", version, {"traces": per_trace})
    d = decide(m, usable)
    top = sorted(d.probabilities.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    evidence: dict[str, Any] = {
        "traces": per_trace,
        "top_classes": [{"class": c, "p": p} for c, p in top],
        # the naive Bayes over the same features on its own: where it disagrees with the
        # forest's label, the shape model alone would have named another CCA
        "shape_model_top": [
            {"class": c, "p": p}
            for c, p in sorted(d.shape_probabilities.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        ],
        "typicality": d.typicality,
        "atypicality": d.atypicality,
        # the parameter check: the trace's deviation over its limit (1.0 = on it; 0 = no check)
        "param_excess": d.param_excess,
        "families_disagree": d.families_disagree,
        # the pair test: the measurement's pair atypicality over its limit (0 = no test)
        "pair_excess": d.pair_excess,
        # classes this measurement cannot rule out (posterior within 5x of the best): CCAs that
        # behave identically under the method's profiles (e.g. DCTCP without ECN marks is Reno)
        "also_consistent_with": [c for c, p in top[1:] if p >= 0.2 * top[0][1]],
        "unknown_because": d.reasons,
        "detector_scores": {
            n: max(s.detectors.get(n, 0.0) for s in usable) for n in sorted(usable[0].detectors)
        },
    }
    probs = {c: p for c, p in d.probabilities.items() if p >= 1e-4}
    if d.label is None:
        nearest = FAMILY.get(d.best, d.best)
        return Verdict(
            label=UNKNOWN,
            kind="unknown",
            confidence=float(1.0 - d.probabilities[d.best]),  # mass not on the nearest class
            nearest=nearest,
            explanation=_explain(d.best, usable, d.reasons, unknown=True),
            classifier_version=version,
            probabilities=probs,
            evidence=evidence,
        )
    return Verdict(
        label=d.label,
        kind="cca",
        confidence=float(d.probabilities[d.label]),
        explanation=_explain(d.label, usable, [], unknown=False, also=evidence["also_consistent_with"]),
        classifier_version=version,
        probabilities=probs,
        evidence=evidence,
    )


def _fv(s: TraceSummary, name: str) -> float:
    return s.features[FEATURES.index(name)]


def _explain(
    label: str, usable: Sequence[TraceSummary], reasons: list[str], *, unknown: bool, also: Sequence[str] = ()
) -> str:
    """One paragraph a person can check against the plot."""
    parts = []
    profs = ", ".join(sorted({s.profile for s in usable}))
    parts.append(f"Read {len(usable)} trace(s) (profile {profs}) after slow start.")
    s = usable[0]
    beta, growth = _fv(s, "plateau_ratio"), _fv(s, "growth")
    if math.isnan(beta):
        beta = _fv(s, "beta_pipe")
    loss, level = _fv(s, "loss_per_100pkt"), math.exp(_fv(s, "level"))
    rec = _fv(s, "recovery_frac")
    desc = (
        f"In profile {s.profile} the pipe held a median {level:.2f}× the path's BDP after slow start, "
        f"{loss:.2g} % of packets were retransmitted and {rec:.0%} of the time went to loss recovery"
    )
    if not math.isnan(beta) and beta < 0.98 and loss > 0:
        desc += f"; after a loss the window fell to {beta:.2f} of its previous level"
    if not math.isnan(growth) and abs(growth) > 0.05:
        desc += f" and grew again by {growth:.1f} segments per round trip"
    parts.append(desc + ".")
    if not any(x.has_congestion_avoidance for x in usable):
        parts.append(
            "No trace holds a clean stretch of congestion avoidance (loss recovery lasted to the end "
            "of the download), so this rests on slow start, the back-off and the recovery alone: "
            "CCAs that differ only in how they grow the window afterwards (Reno and Veno, say) look "
            "the same here."
        )
    det = {n: max(x.detectors.get(n, 0.0) for x in usable) for n in usable[0].detectors}
    if det:
        parts.append(
            "BBR timing detectors: "
            + ", ".join(f"{n} {v:.2f}" for n, v in sorted(det.items()))
            + " (1 = every signature present)."
        )
    if unknown:
        fam = FAMILY.get(label, label)
        parts.append(
            f"Verdict: unknown, closest to {label} ({fam} family), because "
            + "; and ".join(reasons)
            + ". A CCA outside the trained set, or a tuned variant, looks like this."
        )
    else:
        parts.append(
            f"The decision trees, reading both profiles' features together, name {label} more often "
            "than any other class, and no feature lies further from its trained profile than known "
            "CCAs on unseen networks do."
        )
    if also:
        parts.append("It cannot be told apart here from: " + ", ".join(also) + ".")
    notes = sorted({n for x in usable for n in x.evidence.get("notes", [])})
    if notes:
        parts.append("Note: " + "; ".join(notes) + ".")
    return " ".join(parts)
