"""Robustness bench: will the classifier's verdicts hold on paths nobody tuned to?

    .venv/bin/python bench/robustness/run.py --out bench/results/robustness.json

Reads the reference set (classifier/reference.py: lab CCAs under seeded random draws of the
condition space, `ccscope collect`) under --root, or, on a machine without its traces, the
summaries shipped beside the model (the same figures; the oracle rows need the ground-truth
summaries, which ship too). Every figure carries a 95 % interval (Wilson for rates, a
per-class bootstrap for mean per-class recall). "Insufficient data" counts as not right and is
reported apart from Unknown and from wrong.

(a) `unseen`: draws over the whole space, never trained on: recall, Unknown, wrong, insufficient.
(b) `factor_out`: per factor group, a model trained only on the training draws where that group
    was held at its mildest, tested on the unseen draws (all of them, and those where the group
    is active); beside it a model trained on a random subset of the same size, so the row shows
    what the factor's range costs, not what less data costs.
(c) `demo`: the demo's set-up as lab draws, and `demo_runs`: real `make demo` runs
    (bench/robustness/demo_runs.json, written by bench/robustness/demo.py).
(d) `other_profiles`: bottlenecks like the published traces' (SACK off, 1xBDP, 50-400 kbit/s).
(e) the physical limit: the same pipeline trained and tested on the servers' own TCP_INFO pipe
    series of the same transfers (`recall_oracle_unseen`, and per factor).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

BBR_FAMILY = ("bbr", "bbr2", "bbr3")


def active(group: str, f: dict[str, Any]) -> bool:
    """Whether an unseen draw exercises a factor group beyond its mildest value."""
    if group == "rtt":
        return abs((f.get("rtt_ms") or 20.0) - 20.0) > 5.0
    if group == "loss":
        return bool(f.get("loss") or f.get("ge_loss") or f.get("reorder"))
    if group == "cross":
        return bool(f.get("cross"))
    if group == "access":
        return bool(f.get("access") or f.get("upstream"))
    if group == "server":
        return f.get("program") != "lab" or f.get("initcwnd") != 10 or bool(f.get("app_limited"))
    if group == "profile":
        return f.get("profile_kind") != "standard"
    raise ValueError(group)


def recall_row(rows: list[dict[str, Any]], classes: list[str]) -> dict[str, Any]:
    from ccscope.classifier.train import score

    s = score(rows, classes)
    return {
        "measurements": s["measurements"],
        "recall": s["mean_recall"],
        "ci": s["mean_recall_ci"],
        # the forest's most likely class before the Unknown rules: what the traces tell apart
        "recall_top1": s["mean_recall_top1"],
        "unknown_rate": s["unknown_rate"],
        "wrong_rate": s["wrong_rate"],
        "insufficient_rate": s["insufficient_rate"],
    }


def main() -> int:
    from ccscope.classifier.conditions import GROUPS
    from ccscope.classifier.model import Model
    from ccscope.classifier.train import (
        HEAD_MARK,
        default_roots,
        evaluate,
        fit_model,
        predict_rows,
        reference_data,
        score,
        wilson,
        with_prefixes,
        write_eval,
    )

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "robustness.json")
    ap.add_argument(
        "--root", type=Path, action="append", help="a reference collection (repeatable; default: both)"
    )
    ap.add_argument("--features", type=Path, help="a reference-features file instead of --root")
    ap.add_argument(
        "--trees", type=int, default=None, help="trees for the factor-out models (default: the model's)"
    )
    ap.add_argument("--skip-factor-out", action="store_true")
    args = ap.parse_args()

    model = Model.load()
    roots = args.root or default_roots()
    samples, summ, source = reference_data(roots, features=args.features, shipped_fallback=True)
    if not samples:
        print(f"no reference set under {roots[0]} and no shipped summaries", file=sys.stderr)
        return 1
    where = "traces under " + ", ".join(str(r) for r in roots)
    out: dict[str, Any] = {
        "model": model.version,
        "input": f"shipped summaries ({source.name})" if source else where,
        "sets": {
            k: sum(1 for s in samples if s.set == k and HEAD_MARK not in s.key)
            for k in sorted({s.set for s in samples})
        },
    }
    classes = model.classes
    res = evaluate(model, samples, summ)
    write_eval(res, REPO / "bench" / "classifier" / "eval")
    u = res.get("unseen") or {}
    out.update(
        {
            "recall_unseen": u.get("mean_recall"),
            "recall_unseen_ci": u.get("mean_recall_ci"),
            "unknown_known_unseen": u.get("unknown_rate"),
            "unknown_known_unseen_ci": u.get("unknown_ci"),
            "wrong_known_unseen": u.get("wrong_rate"),
            "wrong_known_unseen_ci": u.get("wrong_ci"),
            "insufficient_unseen": u.get("insufficient_rate"),
            "insufficient_unseen_ci": u.get("insufficient_ci"),
            "per_class_unseen": u.get("per_class"),
            "recall_naive_bayes_unseen": u.get("mean_recall_naive_bayes"),
            "recall_top1_unseen": u.get("mean_recall_top1"),
            # Unknowns that name a family ("unknown, CUBIC-like"): how many, how often right
            "family_named_unseen": u.get("family_named_rate"),
            "family_right_unseen": u.get("family_right_rate"),
            "family_right_unseen_ci": u.get("family_right_ci"),
        }
    )
    per = u.get("per_class") or {}
    bbr = {c: per[c]["recall"] for c in BBR_FAMILY if c in per}
    out["recall_bbr_family"] = min(bbr.values()) if bbr else None
    out["recall_bbr_family_per_class"] = {c: {"recall": per[c]["recall"], "ci": per[c]["ci"]} for c in bbr}
    for name, key in (("other_profiles", "recall_other_profiles"), ("heldout_runs", "recall_heldout_runs"),
                      ("demo", "recall_demo_draws")):  # fmt: skip
        e = res.get(name) or {}
        out[key] = e.get("mean_recall")
        out[key + "_ci"] = e.get("mean_recall_ci")
        out[key + "_detail"] = {
            k: e.get(k)
            for k in ("measurements", "unknown_rate", "wrong_rate", "insufficient_rate", "family_named_rate",
                      "family_right_rate", "family_right_ci")
        }  # fmt: skip
    var = (res.get("variants") or {}).get("variants") or {}
    out["unknown_variants_unseen"] = var.get("unknown_rate")
    out["unknown_variants_unseen_ci"] = var.get("unknown_ci")
    out["per_variant_unseen"] = var.get("per_variant")
    dvar = (res.get("variants_design") or {}).get("variants") or {}
    out["unknown_variants_design"] = dvar.get("unknown_rate")

    # (e) the physical limit: the same pipeline on the servers' own pipe series
    train = [s for s in samples if s.set == "train"]
    unseen = [s for s in samples if s.set == "unseen"]
    if all(s.truth for s in train[:5]) and any(s.truth for s in unseen):
        oracle = fit_model([s for s in train if s.truth], summ, {"oracle": True}, truth=True)
        orows = predict_rows(oracle, [s for s in unseen if s.truth], summ, truth=True)
        o = score(orows, oracle.classes)
        out["recall_oracle_unseen"] = o["mean_recall"]
        out["recall_oracle_unseen_top1"] = o["mean_recall_top1"]
        out["recall_oracle_unseen_ci"] = o["mean_recall_ci"]
        out["oracle_detail"] = {
            k: o[k] for k in ("measurements", "unknown_rate", "wrong_rate", "insufficient_rate")
        }
    else:
        orows = []
        out["recall_oracle_unseen"] = None
    rows_unseen = u.get("predictions") or []

    # (b) leave one factor out, beside a same-size random subset
    rows_fo = []
    if not args.skip_factor_out:
        params = {"n_trees": args.trees} if args.trees else {}
        rng = np.random.default_rng(20261125)
        for g in GROUPS:
            base = [s for s in train if HEAD_MARK not in s.key]
            sub = [s for s in base if g in s.factors.get("fixed", [])]
            if len(sub) < 40:
                rows_fo.append({"factor": g, "note": f"only {len(sub)} training draws held it mild"})
                continue
            m_fo = fit_model(with_prefixes(sub), summ, {"factor_out": g}, params=params)
            pr = predict_rows(m_fo, unseen, summ)
            ctrl_idx = rng.choice(len(base), size=len(sub), replace=False)
            ctrl = with_prefixes([base[i] for i in sorted(ctrl_idx)])
            m_ctrl = fit_model(ctrl, summ, {"control": g}, params=params)
            pc = predict_rows(m_ctrl, unseen, summ)
            act = [r for r in pr if active(g, r["factors"])]
            act_c = [r for r in pc if active(g, r["factors"])]
            row = {
                "factor": g,
                "train_measurements": len(sub),
                **recall_row(pr, classes),
                "active": recall_row(act, classes),
                "control_same_size": recall_row(pc, classes),
                "control_active": recall_row(act_c, classes),
                "full_model_active": recall_row([r for r in rows_unseen if active(g, r["factors"])], classes),
            }
            if orows:
                row["oracle_active"] = recall_row([r for r in orows if active(g, r["factors"])], classes)
            rows_fo.append(row)
            print(f"factor {g}: recall {row['recall']} (control {row['control_same_size']['recall']})",
                  file=sys.stderr)  # fmt: skip
    out["factor_out"] = rows_fo
    out["factor_out_trees"] = args.trees or model.estimator.n_trees
    ok = [r["recall"] for r in rows_fo if r.get("recall") is not None]
    out["factor_out_lowest"] = min(ok) if ok else None

    # (c) real demo runs, recorded by bench/robustness/demo.py
    demo_file = REPO / "bench" / "robustness" / "demo_runs.json"
    if demo_file.exists():
        runs = json.loads(demo_file.read_text())
        out["demo_runs"] = runs
        out["demo_right"] = [r.get("right") for r in runs.get("runs", [])]
    # per-factor breakdown of the full model and the oracle on the unseen draws
    out["by_factor_unseen"] = {
        g: {
            "active": recall_row([r for r in rows_unseen if active(g, r["factors"])], classes),
            "mild": recall_row([r for r in rows_unseen if not active(g, r["factors"])], classes),
            **(
                {"oracle_active": recall_row([r for r in orows if active(g, r["factors"])], classes)}
                if orows
                else {}
            ),
        }
        for g in GROUPS
    }
    n_known = len([r for r in rows_unseen if not r["variant"]])
    out["unseen_measurements"] = n_known
    out["unseen_right_ci_check"] = wilson(sum(r["pred"] == r["label"] for r in rows_unseen), n_known)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True, allow_nan=False) + "\n")
    show = {k: v for k, v in out.items() if not isinstance(v, dict | list) or k in ("factor_out_lowest",)}
    print(json.dumps(show, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
