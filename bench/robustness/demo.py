"""Real `ccscope demo` runs, recorded for the robustness bench (bench/robustness/demo_runs.json).

    .venv/bin/python bench/robustness/demo.py --runs 3

Each run is the demo as a newcomer starts it (lab up, a census of the 12 lab sites from the two
emulated vantage points, profiles A+B, the shipped model), without serving the API and without
the QUIC census, into a temporary store. Per run: the 24 TCP verdicts beside the truth, right /
Unknown / wrong / insufficient / failed counts, and the run's length. Needs root and the lab (~10 min a run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROW_KEYS = ("domain", "vantage", "truth", "display", "confidence", "outcome")


def one_run(i: int) -> dict[str, object]:
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="ccscope-demo-bench-") as tmp:
        code = (
            "import sys; from ccscope.demo import run_demo; sys.exit(run_demo(serve=False, "
            f"with_quic=False, as_json=True, db_url='sqlite:///{tmp}/demo.db', trace_dir='{tmp}/traces'))"
        )
        argv = [sys.executable, "-c", code]
        r = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=3600)
    if r.returncode not in (0, 1) or not r.stdout.strip():
        return {"run": i, "error": (r.stderr or "")[-2000:], "returncode": r.returncode}
    doc = json.loads(r.stdout)
    rows = [x for x in doc["results"] if x.get("transport", "tcp") == "tcp"]
    sc = doc["scores"]["all"]
    return {
        "run": i,
        "seconds": round(time.time() - t0, 1),
        "verdicts": len(rows),
        "right": sc["correct"],
        "unknown": sc["unknown"],
        "wrong": sc["wrong"],
        "insufficient": sc["insufficient"],
        "failed": sc["failed"],
        "per_vantage": {v: doc["scores"][v] for v in doc["vantages"]},
        "rows": [
            {k: x[k] for k in ("domain", "vantage", "truth", "display", "confidence", "outcome")}
            for x in rows
        ],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "robustness" / "demo_runs.json")
    args = ap.parse_args()
    from ccscope.classifier.model import Model

    runs = []
    for i in range(args.runs):
        print(f"demo run {i + 1}/{args.runs} ...", file=sys.stderr, flush=True)
        runs.append(one_run(i))
        print(f"  right {runs[-1].get('right')} of {runs[-1].get('verdicts')}", file=sys.stderr, flush=True)
    out = {"model": Model.load().version, "runs": runs}
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(json.dumps({"model": out["model"], "right": [r.get("right") for r in runs]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
