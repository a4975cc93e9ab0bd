"""Profile-invariance bench: does a trace read the same when its profile is wrong about the rate?

    .venv/bin/python bench/invariance/run.py --out bench/results/invariance.json

A census meets paths whose bottleneck is not the measurement profile's: a shared link with cross
traffic, or a slower link upstream. The window then never fills the profile's BDP, or fills it
only through another link's queue. This bench takes the committed lab traces (12 CCAs, profiles
A and B, `tests/fixtures/traces`) and tells each one that its bottleneck ran k times faster than
the one that really held it (k < 1: slower). The packets are unchanged. A classifier that reads
a trace in its own units should give the same shape features and the same verdict at every k.

Per k:
* `features_same`: traces whose every shape feature is within 10 % (or 0.05 absolute) of its
  reading on the true profile. Features in BDP or packet units (levels, queues, the context
  features) are left out, since they are meant to change.
* `insufficient`: traces that the true profile classifies but the wrong one calls insufficient.
* `verdict_same`: measurements (A and B together) whose verdict label is unchanged.

`--classifier-from DIR` reads `ccscope.classifier` from another tree (a branch's worktree) so a
change can be compared with the shipped code in one run; `--as-key KEY` stores that run under
KEY beside the shipped figures instead of replacing them.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

FIXTURES = REPO / "tests" / "fixtures" / "traces"
FACTORS = (0.5, 2.0, 5.0, 20.0, 100.0)
# read against the profile's BDP or in packets on purpose: they change with the claimed rate
UNIT_FEATURES = frozenset(("level", "level_p10", "level_p90", "queue_pkts", "queue_eq", "queue_crest",
                           "utilisation", "plateau", "first_plateau", "ss_peak", "pulse_top"))  # fmt: skip


def use_classifier_from(root: Path) -> None:
    """Import ccscope.classifier from `root` (a worktree's classifier/ folder) before anything
    else imports it."""
    import ccscope  # noqa: F401  (the parent package must exist first)

    pkg = root / "classifier"
    spec = importlib.util.spec_from_file_location(
        "ccscope.classifier", pkg / "__init__.py", submodule_search_locations=[str(pkg)]
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"{pkg}: not a classifier package")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ccscope.classifier"] = mod
    spec.loader.exec_module(mod)


def claim_rate(tr: Any, k: float) -> Any:
    """The same trace, its profile claiming a bottleneck k times the rate that held it."""
    from ccscope.profile import first_rate_bps

    prof = json.loads(json.dumps(tr.profile))
    for d in ("down", "up"):
        rate = first_rate_bps(str(prof[d]["rate"]))
        prof[d]["rate"] = f"{rate * k / 1000.0:.3f}kbit"
    return dataclasses.replace(tr, profile=prof)


def shape_changed(own: dict[str, float], other: dict[str, float]) -> list[str]:
    out = []
    for name, v in own.items():
        if name.startswith("ctx_") or name in UNIT_FEATURES:
            continue
        w = other.get(name, math.nan)
        if math.isnan(v) and math.isnan(w):
            continue
        if math.isnan(v) != math.isnan(w) or abs(v - w) > 0.1 * max(abs(v), 0.05):
            out.append(name)
    return out


def run() -> dict[str, Any]:
    from ccscope.classifier import features as F
    from ccscope.classifier.core import classify
    from ccscope.classifier.model import CLASSIFIER_VERSION, Model
    from ccscope.trace import Trace

    model = Model.load()
    pairs: dict[str, dict[str, Any]] = {}
    for f in sorted(FIXTURES.glob("*-d5-[AB].trace.json.gz")):
        cca, prof = f.name.split("-d5-")[0], f.name.split("-d5-")[1][0]
        pairs.setdefault(cca, {})[prof] = Trace.load(f)
    per_k: dict[str, Any] = {}
    for k in FACTORS:
        same = insufficient = changed = verdict_same = measurements = 0
        moved: dict[str, int] = {}
        verdicts: dict[str, str] = {}
        for cca, tr in sorted(pairs.items()):
            for p in sorted(tr):
                try:
                    own = F.analyse(tr[p]).features
                except F.InsufficientData:
                    continue  # not classifiable on its own profile: nothing to compare
                try:
                    other = F.analyse(claim_rate(tr[p], k)).features
                except F.InsufficientData:
                    insufficient += 1
                    continue
                diff = shape_changed(own, other)
                changed += bool(diff)
                same += not diff
                for name in diff:
                    moved[name] = moved.get(name, 0) + 1
            if len(tr) == 2:
                a = classify([tr["A"], tr["B"]], model).label
                b = classify([claim_rate(tr["A"], k), claim_rate(tr["B"], k)], model).label
                measurements += 1
                verdict_same += a == b
                verdicts[cca] = f"{a} -> {b}"
        traces = same + insufficient + changed
        per_k[f"{k:g}"] = {
            "traces": traces,
            "features_same": same,
            "insufficient": insufficient,
            "changed": changed,
            "features_moved": dict(sorted(moved.items(), key=lambda x: -x[1])),
            "measurements": measurements,
            "verdict_same": verdict_same,
            "verdicts": verdicts,
        }
    n = sum(v["traces"] for v in per_k.values())
    m = sum(v["measurements"] for v in per_k.values())
    return {
        "classifier": CLASSIFIER_VERSION,
        "model": model.version,
        "features_same_rate": round(sum(v["features_same"] for v in per_k.values()) / max(n, 1), 3),
        "insufficient_rate": round(sum(v["insufficient"] for v in per_k.values()) / max(n, 1), 3),
        "verdict_same_rate": round(sum(v["verdict_same"] for v in per_k.values()) / max(m, 1), 3),
        "per_factor": per_k,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "invariance.json")
    ap.add_argument("--classifier-from", type=Path, metavar="DIR",
                    help="read ccscope.classifier from DIR/classifier (a branch's worktree)")  # fmt: skip
    ap.add_argument("--as-key", metavar="KEY", help="store the figures under KEY beside the shipped ones")
    ap.add_argument("--what", default="", help="with --as-key: what was compared")
    args = ap.parse_args()
    if args.as_key in ("bench", "shipped"):
        ap.error(f"--as-key {args.as_key} would overwrite the shipped figures")
    if args.classifier_from:
        use_classifier_from(args.classifier_from.resolve())
    t0 = time.perf_counter()
    figures = run()
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if args.as_key:
        doc = json.loads(args.out.read_text()) if args.out.exists() else {"bench": "invariance"}
        doc[args.as_key] = {"what": args.what, "when": when, **figures}
    else:
        old = json.loads(args.out.read_text()) if args.out.exists() else {}
        extra = {k: v for k, v in old.items() if isinstance(v, dict) and "what" in v}
        doc = {"bench": "invariance", "machine": platform.node(), "when": when,
               "factors": list(FACTORS), "fixtures": str(FIXTURES.relative_to(REPO)),
               "shipped": figures, **extra}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"[bench invariance] features same {figures['features_same_rate']}, insufficient "
          f"{figures['insufficient_rate']}, verdict same {figures['verdict_same_rate']} "
          f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
