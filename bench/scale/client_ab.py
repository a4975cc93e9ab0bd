"""The two TCP download clients on the same seeded draws: does the compiled one change verdicts?

Run the same draws twice, once per client, then compare them draw by draw:

    CCSCOPE_TCP_CLIENT=compiled ccscope collect --plan reference --sets unseen --scale 0.1 \\
        --ccas reno,veno,highspeed,cubic,bic,htcp --root /var/tmp/ccscope-ab-compiled
    CCSCOPE_TCP_CLIENT=python   ccscope collect ... --root /var/tmp/ccscope-ab-python --instances 31
    python bench/scale/client_ab.py /var/tmp/ccscope-ab-compiled /var/tmp/ccscope-ab-python \\
        --out bench/results/scale.json

Each draw's traces are classified by the shipped model; the outcome (right, Unknown,
insufficient, wrong) of each client is counted, and the draws whose outcome differs are listed
with both verdicts. The discordant pairs get an exact two-sided sign test: the chance of a split
at least this uneven if neither client were better.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from ccscope.classifier.core import classify
from ccscope.trace import Trace

RANK = {"right": 0, "unknown": 1, "insufficient": 1, "failed": 1, "wrong": 2}  # lower is better


def outcomes(root: Path) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for line in (root / "index.jsonl").read_text().splitlines():
        j = json.loads(line)
        if j.get("status") != "ok":
            out[j["key"]] = {"label": j["label"], "verdict": "failed", "outcome": "failed"}
            continue
        slots = [s for s in j["slots"].values() if s.get("ok") and s.get("sender_trace")]
        v = classify([Trace.load(s["sender_trace"]) for s in slots])
        oc = ("right" if v.label == j["label"] else "wrong") if v.kind == "cca" else (v.kind or "unknown")
        out[j["key"]] = {"label": j["label"], "verdict": v.display, "outcome": oc}
    return out


def sign_test_p(better_a: int, better_b: int) -> float:
    """Exact two-sided binomial sign test on the discordant pairs."""
    n, k = better_a + better_b, min(better_a, better_b)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def compare(a: dict[str, dict[str, str]], b: dict[str, dict[str, str]]) -> dict[str, Any]:
    keys = sorted(set(a) & set(b))
    differ = [k for k in keys if a[k]["outcome"] != b[k]["outcome"]]
    a_better = sum(RANK[a[k]["outcome"]] < RANK[b[k]["outcome"]] for k in differ)
    b_better = sum(RANK[a[k]["outcome"]] > RANK[b[k]["outcome"]] for k in differ)
    return {
        "draws": len(keys),
        "compiled": dict(Counter(a[k]["outcome"] for k in keys)),
        "python": dict(Counter(b[k]["outcome"] for k in keys)),
        "differ": [
            {"draw": k, "label": a[k]["label"], "compiled": a[k]["verdict"], "python": b[k]["verdict"]}
            for k in differ
        ],
        "compiled_better": a_better,
        "python_better": b_better,
        "sign_test_p": round(sign_test_p(a_better, b_better), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("compiled_root", type=Path)
    ap.add_argument("python_root", type=Path)
    ap.add_argument("--out", type=Path, help="a bench JSON to add `tcp_client_ab` to")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = compare(outcomes(args.compiled_root), outcomes(args.python_root))
    if args.out:
        doc = json.loads(args.out.read_text()) if args.out.exists() else {}
        doc["tcp_client_ab"] = res
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{res['draws']} draws; compiled {res['compiled']}; python {res['python']}")
        print(f"differ in {len(res['differ'])}: compiled better {res['compiled_better']}, "
              f"python better {res['python_better']} (sign test p = {res['sign_test_p']})")  # fmt: skip
        for d in res["differ"]:
            print(f"  {d['draw']}: {d['compiled']} | {d['python']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
