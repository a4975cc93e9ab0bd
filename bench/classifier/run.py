"""Classifier bench: the shipped model's accuracy on the reference draws, and its speed.

    .venv/bin/python bench/classifier/run.py --out bench/results/classifier.json

Accuracy comes from `ccscope eval` on the reference measurements under --root (`ccscope
collect --plan reference`), or, on a machine without them, on their summaries shipped beside the
model (the same figures); it rewrites `bench/classifier/eval/`. Per evaluation set: mean
per-class recall with its 95 % interval, and the shares of known-CCA measurements that were
right, Unknown, insufficient and wrong (Wilson intervals); beside the forest's verdict, the
forest's most likely class before the Unknown rules and the naive Bayes alone (the published
method's model) on the same features.

Speed is trace file -> verdict (features, detectors, forest, rules) on one core, counted in CPU
time (`traces_per_s`), on the reference traces cut at 20 s; with captures under --root
(`collect --keep-pcap`), pcap -> verdict as well (`traces_per_s_pcap`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SETS = ("unseen", "other_profiles", "heldout_runs", "demo", "variants")


def _speed(items: list[Path], seconds: float, load: object) -> dict[str, float | int]:
    from ccscope.classifier.core import classify
    from ccscope.classifier.model import Model

    model = Model.load()
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while (time.perf_counter() - t0 < seconds or n < len(items)) and items:
        classify(load(items[n % len(items)]), model)  # type: ignore[operator]
        n += 1
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"traces": n, "cpu_seconds": round(cpu, 3), "traces_per_s": round(n / max(cpu, 1e-9), 2),
            "traces_per_s_wall": round(n / max(dt, 1e-9), 2)}  # fmt: skip


def _set_figures(e: dict[str, object]) -> dict[str, object]:
    keep = ("measurements", "mean_recall", "mean_recall_ci", "mean_recall_top1", "mean_recall_naive_bayes",
            "right_rate", "right_ci", "unknown_rate", "unknown_ci", "insufficient_rate", "insufficient_ci",
            "wrong_rate", "wrong_ci")  # fmt: skip
    return {k: e[k] for k in keep if k in e}


def main() -> int:
    from ccscope.classifier.train import default_roots

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "classifier.json")
    ap.add_argument(
        "--root", type=Path, action="append", help="a reference collection (repeatable; default: both)"
    )
    ap.add_argument("--speed-seconds", type=float, default=20.0)
    ap.add_argument("--speed-root", type=Path,
                    help="where the speed figures' traces come from (default: the first root); e.g. a "
                    "new collection when the accuracy comes from the shipped summaries")  # fmt: skip
    args = ap.parse_args()
    roots = args.root or default_roots()

    from ccscope.classifier.model import Model
    from ccscope.classifier.train import evaluate, headline, reference_data, write_eval
    from ccscope.trace import Trace

    model = Model.load()
    out: dict[str, object] = {"model": model.version, "classes": model.classes}
    samples, summ, source = reference_data(roots, shipped_fallback=True)
    if source is not None:
        out["accuracy_input"] = f"the shipped summaries of the reference traces ({source.name})"
    if not samples:
        out["note"] = f"no reference measurements under {roots[0]} and no shipped summaries"
    else:
        res = evaluate(model, samples, summ)
        write_eval(res, REPO / "bench" / "classifier" / "eval")
        out.update({k: v for k, v in headline(res).items() if k != "model"})
        for name in SETS:
            e = res.get(name) or {}
            if "confusion" in e:
                out[name] = {**_set_figures(e), "per_class": e["per_class"]}
            if "variants" in e:
                out[f"{name}_variants"] = {k: v for k, v in e["variants"].items() if k != "predictions"}
        out["gates"] = {t: est.rules_.get("uncertain") for t, est in model.estimators.items()}
        out["params"] = {t: est.get_params() | {"families": None} for t, est in model.estimators.items()}

    args.root = args.speed_root or roots[0]  # speed: TCP reference traces
    traces = sorted(args.root.glob("*/*/run*/[AB]*.sender.trace.json*"))[:40]
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    if traces:
        cut = [Trace.load(p).head(20.0) for p in traces]
        sp = _speed(list(range(len(cut))), args.speed_seconds, lambda i: [cut[i]])  # type: ignore[arg-type]
        out["traces_per_s"] = sp["traces_per_s"]
        out["speed"] = {
            **sp,
            "input": f"{len(cut)} reference traces cut at 20 s, trace -> verdict, one core",
        }
        from ccscope.classifier.cli import load_traces
        from ccscope.errors import CCScopeError

        # captures of finished measurements only (the index's "ok"); one that still will not
        # parse is skipped, and counted
        ok = set()
        with contextlib.suppress(OSError):
            for line in (args.root / "index.jsonl").read_text().splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    rec = json.loads(line)
                    if rec.get("status") == "ok":
                        ok.add(rec["key"])
                    else:
                        ok.discard(rec["key"])
        pcaps, unreadable = [], 0
        for p in sorted(args.root.glob("*/*/run*/*.pcap")):
            if "/".join(p.parent.parts[-3:]) not in ok:
                continue
            try:
                load_traces(str(p))
            except CCScopeError:
                unreadable += 1
                continue
            pcaps.append(p)
            if len(pcaps) == 40:
                break
        if pcaps:
            sp = _speed(pcaps, args.speed_seconds, lambda p: load_traces(str(p))[:1])
            out["traces_per_s_pcap"] = sp["traces_per_s"]
            out["speed_pcap"] = {
                **sp,
                "input": f"{len(pcaps)} reference captures, pcap -> verdict",
                "unreadable_captures_skipped": unreadable,
            }
        else:
            out["speed_pcap_note"] = (
                f"no capture of a finished measurement under {args.root} (`ccscope collect --keep-pcap`)"
            )
    else:
        out["speed_note"] = f"no reference traces under {args.root}: `ccscope collect --plan reference`"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    flat = {k: v for k, v in out.items() if k not in ("classes", "params") and not isinstance(v, dict)}
    print(json.dumps(flat, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
