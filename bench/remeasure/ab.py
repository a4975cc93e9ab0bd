"""Does measuring the training draws a second time help? (PREREG-2026-11-29.md)

    python bench/remeasure/ab.py OUT.json TRAIN_ROOT UNSEEN_ROOT [--limit N]

A: the shipped reference features, refitted. B: the same plus the re-collection's train jobs
(keys renamed, grouped with their draw). Both scored on the unseen root's known-CCA,
non-variant whole downloads: open-set verdict tallies, mean per-class recall and closed-set
top-1, paired (exact McNemar on the discordant pairs)."""

from __future__ import annotations

import argparse
import collections
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ccscope.classifier.train import (
    DEFAULT_FEATURES,
    HEAD_MARK,
    fit_model,
    load_reference_features,
    predict_rows,
    reference_data,
    with_prefixes,
)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: b, c the discordant counts."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    p = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * p)


def tally(rows: list[dict]) -> dict:
    t: collections.Counter[str] = collections.Counter()
    per: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for r in rows:
        k = r["pred"] if r["pred"] in ("unknown", "insufficient") else "wrong"
        k = "right" if r["pred"] == r["label"] else k
        t[k] += 1
        t["top1_right"] += r["top1"] == r["label"]
        per[r["label"]][0] += k == "right"
        per[r["label"]][1] += 1
    rec = float(np.mean([a / b for a, b in per.values()])) if per else math.nan
    return {
        "tally": dict(t),
        "known": len(rows),
        "mean_per_class_recall": round(rec, 4),
        "per_class": {c: [a, b] for c, (a, b) in sorted(per.items())},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("train_root", type=Path)
    ap.add_argument("unseen_root", type=Path)
    ap.add_argument("--limit", type=int, default=0, help="pipeline check: only the first N new jobs")
    a = ap.parse_args()
    t0 = time.time()
    base, base_summ = load_reference_features(DEFAULT_FEATURES)
    new, new_summ, _ = reference_data(a.train_root, workers=1)
    new = [s for s in new if s.set == "train" and HEAD_MARK not in s.key]
    if a.limit:
        new = new[: a.limit]
    # a second measurement of the same draw: its own key (not run1: the shipped features hold
    # the held-out runs under that), the draw's group
    new = [replace(s, key=s.key.replace("/run0", "/remeasured0")) for s in new]
    assert not {s.key for s in new} & {s.key for s in base}
    unseen, un_summ, _ = reference_data(a.unseen_root, workers=1)
    unseen = [s for s in unseen if s.set == "unseen" and HEAD_MARK not in s.key and not s.variant]
    summ = base_summ | new_summ | un_summ
    train_a = [s for s in base if s.set in ("train", "quic_train")]
    train_b = train_a + [s for s in with_prefixes(new) if s.set == "train"]
    res: dict = {
        "unseen_jobs": len(unseen),
        "new_jobs": len(new),
        "train_a_measurements": sum(HEAD_MARK not in s.key for s in train_a),
        "train_b_measurements": sum(HEAD_MARK not in s.key for s in train_b),
    }
    rows = {}
    for name, train in (("A", train_a), ("B", train_b)):
        m = fit_model(train, summ, {"ab": name})
        rows[name] = predict_rows(m, unseen, summ)
        res[name] = {"model": m.version, **tally(rows[name])}
        print(name, res[name]["tally"], res[name]["mean_per_class_recall"], flush=True)
    ra = {r["key"]: r for r in rows["A"]}
    rb = {r["key"]: r for r in rows["B"]}
    keys = sorted(ra.keys() & rb.keys())
    checks = (("top1", lambda r: r["top1"] == r["label"]), ("right", lambda r: r["pred"] == r["label"]))
    for what, ok in checks:
        b = sum(ok(ra[k]) and not ok(rb[k]) for k in keys)
        c = sum(ok(rb[k]) and not ok(ra[k]) for k in keys)
        res[f"{what}_discordant_a_only_b_only"] = [b, c]
        res[f"{what}_mcnemar_p"] = round(mcnemar_exact(b, c), 4)
    ta, tb = res["A"]["tally"], res["B"]["tally"]
    more_right = tb.get("right", 0) > ta.get("right", 0)
    res["b_better_by_rule"] = more_right and tb.get("wrong", 0) <= ta.get("wrong", 0)
    res["seconds"] = round(time.time() - t0)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k not in ("A", "B")}))


if __name__ == "__main__":
    main()
