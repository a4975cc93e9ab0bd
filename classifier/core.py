"""The public entry: traces of one server in, a Verdict out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ccscope.classifier.detectors import run_detectors
from ccscope.classifier.estimator import Decision
from ccscope.classifier.features import InsufficientData, analyse
from ccscope.classifier.identical import RENO, identical_here
from ccscope.classifier.model import Model, ModelError, family_of
from ccscope.classifier.summary import TraceSummary, quic_print_features
from ccscope.trace import Trace
from ccscope.verdict import UNKNOWN, Verdict


@lru_cache(maxsize=4)
def _load_model(path: str | None) -> Model:
    return Model.load(Path(path) if path else None)


def summarise(trace: Trace) -> TraceSummary:
    """Every per-trace stage: features, detectors, and the evidence a person can check."""
    prof = (trace.profile or {}).get("name")
    try:
        a = analyse(trace)
    except InsufficientData as e:
        return TraceSummary(
            {}, str(e), {"alignment": trace.alignment}, profile=prof, transport=trace.transport
        )
    findings = run_detectors(a)
    feats = dict(a.features)
    for f in findings:
        feats["det_" + f.name] = float(f.score)
    if trace.transport == "quic":
        feats.update(quic_print_features(((trace.extra or {}).get("quic") or {}).get("stack_print")))
    ev = a.evidence()
    ev["detectors"] = {f.name: f.to_dict() for f in findings}
    ev["alignment"] = trace.alignment
    return TraceSummary(
        feats, None, ev, rtt_ms=float(a.prepared.rtt * 1000.0), profile=prof, transport=trace.transport
    )


def classify(
    traces: Sequence[Trace], model: Model | None = None, *, model_path: str | Path | None = None
) -> Verdict:
    """Classify one server from its traces (typically the two profiles of one measurement)."""
    m = model or _load_model(str(model_path) if model_path else None)
    v = verdict_from_summaries([summarise(t) for t in traces], m)
    # Which alignment was read (the model's is in its training record): a reader can tell a
    # verdict on sender-aligned traces from one forced onto capture-aligned ones.
    aligned = sorted({t.alignment for t in traces}) or ["none"]
    ev = {**v.evidence, "alignment": "+".join(aligned)}
    stack = quic_stack(traces)
    if stack is not None:
        ev["quic_stack"] = stack
    return replace(v, evidence=ev)


def quic_stack(traces: Sequence[Trace]) -> dict[str, Any] | None:
    """The QUIC stack family the captures' fingerprints name (capture/quic_fingerprint.py), apart
    from the label's stack, which the forest read from the window's shape; None without one."""
    prints = [p for t in traces if (p := ((t.extra or {}).get("quic") or {}).get("stack_print"))]
    if not prints:
        return None
    names = sorted({p.get("guess") for p in prints}, key=str)
    return {"family": names[0] if len(names) == 1 else None, "why": prints[0].get("why"), "traces": prints}


def verdict_from_summaries(summaries: Sequence[TraceSummary], m: Model) -> Verdict:
    version = m.version
    per_trace: list[dict[str, Any]] = [
        {"profile": s.profile, "insufficient": s.insufficient, **s.evidence} for s in summaries
    ]
    usable = [s for s in summaries if s.usable]
    if not usable:
        reason = summaries[0].insufficient if summaries else "no trace was given"
        return Verdict.insufficient(reason or "no usable trace", version, {"traces": per_trace})
    transports = sorted({s.transport for s in usable})
    if len(transports) > 1:
        raise ModelError(f"traces of several transports ({', '.join(transports)}) are not one measurement")
    transport = transports[0]
    # A model without classes for this transport reads its traces with the TCP classes (a QUIC
    # stack's CUBIC named as the kernel CUBIC it implements), and the evidence says so.
    estimator_used = transport if transport in m.estimators else "tcp"
    d = m.for_transport(estimator_used).decide(usable)
    top = sorted(d.probabilities.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    evidence: dict[str, Any] = {
        "traces": per_trace,
        "top_classes": [{"class": c, "p": p} for c, p in top],
        # the method's naive Bayes over the same features on its own: where it disagrees with
        # the forest's label, the shape model alone would have named another CCA
        "shape_model_top": [
            {"class": c, "p": p}
            for c, p in sorted(d.shape_probabilities.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        ],
        # the conformal p-value of the named class under each Unknown rule (small = unlike
        # known measurements of that class); Unknown when one is at most the rule's budget
        "p_values": d.p_values,
        "rules": d.details,
        # classes the measurement cannot rule out at the rules' budget (the conformal set)
        "also_consistent_with": d.also_consistent_with,
        "unknown_because": d.reasons,
        "estimator": estimator_used,
        # CCAs that are Reno by specification on this path: a Reno verdict stands for them too
        "identical_here": [r.cca for r in identical_here(usable)] if d.best == RENO else [],
    }
    probs = {c: p for c, p in d.probabilities.items() if p >= 1e-4}
    if d.label is None:
        return Verdict(
            label=UNKNOWN,
            kind="unknown",
            confidence=float(1.0 - d.probabilities[d.best]),  # mass not on the nearest class
            nearest=d.family,
            explanation=_explain(d, usable, unknown=True),
            classifier_version=version,
            probabilities=probs,
            evidence=evidence,
        )
    return Verdict(
        label=d.label,
        kind="cca",
        confidence=float(d.probabilities[d.label]),
        explanation=_explain(d, usable, unknown=False),
        classifier_version=version,
        probabilities=probs,
        evidence=evidence,
    )


def _explain(d: Decision, usable: Sequence[TraceSummary], *, unknown: bool) -> str:
    """One paragraph a person can check against the plot."""
    parts = [f"Read {len(usable)} trace(s) after slow start."]
    s = usable[0]
    beta = s.value("plateau_ratio")
    if math.isnan(beta):
        beta = s.value("beta_pipe")
    growth, loss = s.value("growth"), s.value("loss_per_100pkt")
    level, rec = math.exp(s.value("level")), s.value("recovery_frac")
    rtt, bdp = s.rtt_ms, math.exp(s.value("ctx_bdp_pkts"))
    desc = (
        f"On a path of {rtt:.0f} ms and {bdp:.0f} segments of BDP the window held a median "
        f"{level:.2f}× the BDP after slow start, {loss:.2g} % of packets were retransmitted and "
        f"{rec:.0%} of the time went to loss recovery"
    )
    if not math.isnan(beta) and beta < 0.98 and loss > 0:
        desc += f"; after a loss the window fell to {beta:.2f} of its previous level"
    if not math.isnan(growth) and abs(growth) > 0.05:
        desc += f" and grew again by {growth:.1f} segments per round trip"
    parts.append(desc + ".")
    if not any(x.has_congestion_avoidance for x in usable):
        parts.append(
            "No trace holds a clean stretch of congestion avoidance, so this rests on slow start, "
            "the back-off and the recovery alone: CCAs that differ only in how they grow the "
            "window afterwards (Reno and Veno, say) look the same here."
        )
    det = {n: max(x.value(n) for x in usable) for n in ("det_bbr1", "det_bbr3")}
    parts.append(
        "BBR timing detectors: "
        + ", ".join(f"{n[4:]} {v:.2f}" for n, v in sorted(det.items()) if not math.isnan(v))
        + " (1 = every signature present)."
    )
    if unknown:
        fam = family_of(d.best)
        parts.append(
            f"Verdict: unknown, closest to {d.best} ({fam} family), because "
            + "; and ".join(d.reasons)
            + ". A CCA outside the trained set, or a tuned variant, looks like this."
        )
    else:
        parts.append(
            f"The decision trees, reading each trace's shape beside its path, name {d.best} "
            f"({d.probabilities[d.best]:.0%}), and known {d.best} measurements on paths the model "
            "never trained on conform no better than this one."
        )
    same = identical_here(usable) if d.best == RENO else ()
    if same:
        parts.append(
            "On this path Reno also stands for "
            + ", ".join(r.cca for r in same)
            + " ("
            + "; ".join(r.why for r in same)
            + "): no trace can tell them apart here."
        )
    if d.also_consistent_with:
        parts.append("It cannot be ruled out here that it is: " + ", ".join(d.also_consistent_with) + ".")
    notes = sorted({n for x in usable for n in x.evidence.get("notes", [])})
    if notes:
        parts.append("Note: " + "; ".join(notes) + ".")
    return " ".join(parts)
