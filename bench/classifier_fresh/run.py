"""Fresh-measurement check of the shipped classifier: new lab runs that no choice saw.

    sudo .venv/bin/python bench/classifier_fresh/run.py --out bench/results/classifier_fresh.json

The reference set's evaluation sets (bench/classifier) have been looked at while the Unknown
rules were designed, so their figures are somewhat optimistic. This bench measures new runs
(new seeds for the emulator's jitter and loss draws) of the same plan and scores the shipped
model on them, beside the reference set's figures:

* every untrained variant, runs 2 and 3 (the reference set holds runs 0 and 1), on every
  condition with jitter or loss (without them the emulator is deterministic and a new run
  repeats an old one);
* every trained CCA, one more run at each held-out condition (the reference set holds runs
  0-3 there).

120 measurements, ~25 min on the 2-core lab VM; needs root and the built lab (`make setup`).
Runs already under --root are kept, so an interrupted run resumes; `--no-measure` scores what
is there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

DEFAULT_FRESH_ROOT = Path("/var/tmp/ccscope-fresh")
VARIANT_RUNS = (2, 3)


def fresh_jobs() -> dict[str, list]:
    from ccscope.classifier import dataset

    jobs: dict[str, list[dataset.Job]] = {}
    for c in dataset.CONDITIONS:
        if c.jitter_ms == 0 and c.loss == 0:
            continue
        js = [dataset.Job(c.name, v, r) for r in VARIANT_RUNS for v in dataset.VARIANTS]
        if c.split == "heldout":
            js += [dataset.Job(c.name, cca, dataset.RUNS_HELDOUT) for cca in dataset.trained_ccas()]
        jobs[c.name] = js
    return jobs


def score(root: Path) -> dict[str, object]:
    """The shipped model's verdicts on the fresh measurements under `root`."""
    from ccscope.classifier import dataset
    from ccscope.classifier.model import Model, decide
    from ccscope.classifier.train import summaries_for

    model = Model.load()
    wanted = {(c, j.cca, j.run) for c, js in fresh_jobs().items() for j in js}
    samples = [s for s in dataset.load_index(root) if (s.condition, s.cca, s.run) in wanted]
    summ = summaries_for(samples, root, workers=2)
    by: dict[tuple[str, str, int], list[dataset.Sample]] = defaultdict(list)
    for s in samples:
        by[(s.condition, s.cca, s.run)].append(s)
    var: dict[str, Counter[str]] = defaultdict(Counter)
    known: Counter[str] = Counter()
    insufficient = 0
    misses: list[dict[str, object]] = []
    for key in sorted(by):
        cond, cca, run = key
        use = [summ[s.path] for s in by[key] if summ[s.path].insufficient is None]
        if not use:
            insufficient += 1
            continue
        d = decide(model, use)
        pred = "unknown" if d.label is None else d.label
        if cca in dataset.VARIANTS:
            var[cca][pred] += 1
            if pred != "unknown":
                misses.append({"variant": cca, "condition": cond, "run": run, "named": pred})
        else:
            truth = dataset.label_of(cca)
            known["unknown" if pred == "unknown" else "right" if pred == truth else "wrong"] += 1
            if pred != truth:
                misses.append({"cca": cca, "condition": cond, "run": run, "verdict": pred, "why": d.reasons})
    n_var = sum(sum(c.values()) for c in var.values())
    n_known = sum(known.values())
    return {
        "model": model.version,
        "measurements": len(by),
        "insufficient": insufficient,
        "variants_fresh": n_var,
        "unknown_rate_variants_fresh": sum(c["unknown"] for c in var.values()) / n_var if n_var else None,
        "unknown_rate_per_variant_fresh": {v: c["unknown"] / sum(c.values()) for v, c in sorted(var.items())},
        "variants_predicted_fresh": {v: dict(sorted(c.items())) for v, c in sorted(var.items())},
        "known_fresh": n_known,
        "unknown_rate_known_fresh": known["unknown"] / n_known if n_known else None,
        "accuracy_known_fresh": known["right"] / n_known if n_known else None,
        "wrong_known_fresh": known["wrong"],
        "not_as_expected": misses,
    }


def reference_peer() -> dict[str, object]:
    """The same model on the reference set's measurements of the same plan (its shipped
    summaries): variants runs 0-1 on the conditions measured here, known CCAs at the held-out
    conditions (runs 0-3). The peer the fresh figures are read against."""
    from ccscope.classifier import dataset
    from ccscope.classifier.model import Model, decide
    from ccscope.classifier.train import DEFAULT_FEATURES, reference_data

    model = Model.load()
    conds = set(fresh_jobs())
    us, _, summ, _ = reference_data(REPO, dataset.RUNS_TRAIN, features=DEFAULT_FEATURES)
    var_unknown, var_n, known_unknown, known_right, known_n = 0, 0, 0, 0, 0
    for u in us:
        if u.condition not in conds or u.split not in ("variants", "heldout_conditions"):
            continue
        use = [summ[p] for p in u.paths if summ[p].insufficient is None]
        if not use:
            continue
        d = decide(model, use)
        if u.split == "variants":
            var_n += 1
            var_unknown += d.label is None
        else:
            known_n += 1
            known_unknown += d.label is None
            known_right += d.label == u.label
    return {
        "model": model.version,
        "variants": var_n,
        "unknown_rate_variants": var_unknown / var_n if var_n else None,
        "known": known_n,
        "unknown_rate_known": known_unknown / known_n if known_n else None,
        "accuracy_known": known_right / known_n if known_n else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "classifier_fresh.json")
    ap.add_argument("--root", type=Path, default=DEFAULT_FRESH_ROOT)
    ap.add_argument("--no-measure", action="store_true", help="score the runs already under --root")
    args = ap.parse_args()
    if not args.no_measure:
        if os.geteuid() != 0:
            print(
                "classifier_fresh: measuring needs root (the lab); --no-measure scores what is there",
                file=sys.stderr,
            )
            return 2
        from ccscope.classifier import dataset

        dataset.collect(args.root, fresh_jobs())
    out = score(args.root)
    if not out["measurements"]:
        print(f"classifier_fresh: no fresh measurements under {args.root}", file=sys.stderr)
        return 1
    out["reference_set"] = reference_peer()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "not_as_expected"}, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
