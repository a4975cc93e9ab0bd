"""Learning curve: would more training draws help, and by how much?

    .venv/bin/python bench/learning_curve/run.py --out bench/results/learning_curve.json

The TCP classifier is refitted on random subsets of the training draws (by draw, so a draw's
prefixes go with it) with several forest seeds per size, and every fit is scored on the same
unseen draws (known CCAs, whole downloads). The figure to read is how top-1 and open-set recall
move per doubling of the draws: if they still rise at the full set, more draws are the cheapest
lever; if they are flat, the features are the limit.

The pool is the shipped reference features' train draws, so the bench runs on a fresh machine.
`--train-root ROOT` adds a collection's training draws that the shipped file does not hold (new
draws of the same seeded stream: `ccscope collect --plan reference --sets train --train-per-cca N
--skip-in <shipped features>`), extending the curve past the shipped set. `--unseen-root ROOT`
scores on a collection's unseen draws instead of the shipped file's.

The spread over seeds is the refit noise: two single fits differ by about this much whatever
their data, so a step smaller than it says nothing.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

FRACTIONS = (0.125, 0.25, 0.5, 1.0)
SEEDS = 3
BASE_SEED = 20261125  # the shipped forest's seed (CCAClassifier's default)
RECALL_TARGET = 0.93  # issue 19's recall_unseen


def log(msg: str) -> None:
    print(f"[learning_curve] {msg}", file=sys.stderr, flush=True)


def score(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Open-set tallies, mean per-class recall and mean per-class closed-set top-1."""
    from ccscope.classifier.train import mean_recall

    t: collections.Counter[str] = collections.Counter()
    for r in rows:
        right = r["pred"] == r["label"]
        t["right" if right else r["pred"] if r["pred"] in ("unknown", "insufficient") else "wrong"] += 1
        t["top1_right"] += r["top1"] == r["label"]
    return {
        "tally": {k: t.get(k, 0) for k in ("right", "wrong", "unknown", "insufficient", "top1_right")},
        "recall": round(mean_recall(rows) or 0.0, 4),
        "top1_recall": round(mean_recall(rows, "top1") or 0.0, 4),
    }


def per_doubling(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of a figure against log2(draws): its gain per doubling."""
    if len({d for d, _ in points}) < 2:
        return None
    xs = [math.log2(d) for d, _ in points]
    ys = [y for _, y in points]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return round(cov / sum((x - mx) ** 2 for x in xs), 4)


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for draws in sorted({r["draws"] for r in rows}):
        mine = [r for r in rows if r["draws"] == draws]
        row: dict[str, Any] = {"draws": draws, "fits": len(mine)}
        for key in ("top1_recall", "recall"):
            v = [r[key] for r in mine]
            sd = round(statistics.stdev(v), 4) if len(v) > 1 else None
            row[key] = {"mean": round(statistics.mean(v), 4), "sd": sd, "min": min(v), "max": max(v)}
        for key in ("right", "wrong", "top1_right"):
            row[key + "_mean"] = round(statistics.mean(r["tally"][key] for r in mine), 1)
        out.append(row)
    return out


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    x = [r["draws"] for r in summary]
    for key, name in (("top1_recall", "closed-set top-1"), ("recall", "open-set recall")):
        m = [r[key]["mean"] for r in summary]
        ax.errorbar(x, m, yerr=[(r[key]["sd"] or 0.0) for r in summary], marker="o", capsize=3, label=name)
    ax.axhline(RECALL_TARGET, color="grey", linestyle="--", linewidth=1)
    ax.text(x[0], RECALL_TARGET - 0.06, f"recall target {RECALL_TARGET}", fontsize=8, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_xticks(x, [str(v) for v in x])
    ax.minorticks_off()
    ax.set_xlabel("training draws (TCP)")
    ax.set_ylabel("mean per-class, unseen draws")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title("More draws: refits per size, ±1 sd over forest seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fractions", default=",".join(map(str, FRACTIONS)),
                    help="subset sizes as fractions of the pooled training draws")  # fmt: skip
    ap.add_argument("--seeds", type=int, default=SEEDS, help="fits per size (subset and forest seed)")
    ap.add_argument("--train-root", type=Path, action="append", default=[],
                    help="a collection whose new training draws join the pool (repeatable)")  # fmt: skip
    ap.add_argument("--unseen-root", type=Path, help="score on this collection's unseen draws")
    ap.add_argument("--plot", type=Path, help="the curve as a PNG (default: beside --out, .png)")
    a = ap.parse_args()

    from ccscope.classifier.train import (
        DEFAULT_FEATURES,
        HEAD_MARK,
        fit_model,
        load_reference_features,
        predict_rows,
        reference_data,
        with_prefixes,
    )

    t0 = time.time()
    base, summ = load_reference_features(DEFAULT_FEATURES)
    pool = [s for s in base if s.set == "train" and s.transport == "tcp"]
    shipped_groups = {s.group for s in pool}
    added = 0
    for root in a.train_root:
        new, new_summ, _ = reference_data(root, workers=1)
        new = [s for s in new if s.set == "train" and s.transport == "tcp" and HEAD_MARK not in s.key]
        new = [s for s in new if s.group not in shipped_groups]  # new draws only, not re-measurements
        pool += with_prefixes(new)
        summ |= new_summ
        added += len(new)
        log(f"{root}: {len(new)} new training draws")
    if a.unseen_root:
        unseen, un_summ, _ = reference_data(a.unseen_root, workers=1)
        summ |= un_summ
        unseen_src = str(a.unseen_root)
    else:
        unseen, unseen_src = base, "the shipped reference features"
    unseen = [s for s in unseen if s.set == "unseen" and s.transport == "tcp" and HEAD_MARK not in s.key
              and not s.variant]  # fmt: skip
    groups = sorted({s.group for s in pool})
    fractions = [float(x) for x in a.fractions.split(",") if x]
    log(f"{len(groups)} training draws ({added} new), {len(unseen)} unseen measurements, "
        f"{len(fractions)} sizes x {a.seeds} seeds")  # fmt: skip

    rows: list[dict[str, Any]] = []
    for f in fractions:
        for seed in range(a.seeds):
            t1 = time.time()
            pick = set(random.Random(seed).sample(groups, max(1, round(f * len(groups)))))
            train = [s for s in pool if s.group in pick]
            model = fit_model(train, summ, {"learning_curve": f}, params={"seed": BASE_SEED + seed})
            sc = score(predict_rows(model, unseen, summ))
            row = {"fraction": f, "seed": seed, "draws": len(pick), **sc, "seconds": round(time.time() - t1)}
            rows.append(row)
            log(f"{len(pick)} draws, seed {seed}: top-1 {sc['top1_recall']:.3f}, "
                f"recall {sc['recall']:.3f}, {sc['tally']} ({row['seconds']} s)")  # fmt: skip

    summary = summarise(rows)
    doc = {
        "bench": "learning_curve",
        "machine": platform.node(),
        "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "what": "TCP classifier refitted on random subsets of the training draws, several forest seeds "
        "per size, scored on the same unseen draws (known CCAs, whole downloads)",
        "pool": {"training_draws": len(groups), "new_draws": added, "roots": list(map(str, a.train_root))},
        "unseen": {"source": unseen_src, "measurements": len(unseen)},
        "summary": summary,
        "top1_recall_per_doubling": per_doubling([(r["draws"], r["top1_recall"]) for r in rows]),
        "recall_per_doubling": per_doubling([(r["draws"], r["recall"]) for r in rows]),
        "top1_recall_per_doubling_upper_half": per_doubling(
            [(r["draws"], r["top1_recall"]) for r in rows if r["fraction"] >= 0.5]
        ),
        "fits": rows,
        "seconds": round(time.time() - t0),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    plot(summary, a.plot or a.out.with_suffix(".png"))
    for r in summary:
        t1r, rr = r["top1_recall"], r["recall"]
        print(f"{r['draws']:>5} draws  top-1 {t1r['mean']:.3f} ± {t1r['sd'] or 0:.3f}  "
              f"recall {rr['mean']:.3f} ± {rr['sd'] or 0:.3f}  "
              f"right {r['right_mean']:.0f}  wrong {r['wrong_mean']:.0f} of {len(unseen)}")  # fmt: skip
    print(f"per doubling: top-1 {doc['top1_recall_per_doubling']}, recall {doc['recall_per_doubling']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
