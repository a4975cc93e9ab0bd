"""QUIC reference traces from the lab, laid out like classifier/dataset.py's, and the current
classifier's baseline on them.

Every lab QUIC server (lab/quic/registry.py: quiche reno/cubic/bbr2, aioquic reno/cubic, quic-go
reno) is measured through the QUIC profiles (A-quic, B-quic) under a list of Internet-path
conditions, `runs` times each; every run's traces, with the server's qlog scored beside them,
append one line to `<root>/index.jsonl` in the same shape as the TCP collection (job = condition,
cca, run), so `dataset.load_index(root)` reads it. The class is the stack's own: `quiche:cubic`,
not `cubic` (a stack's CUBIC is not the kernel's); `FAMILY` says which TCP class it implements,
which is what today's classifier can answer and what the baseline scores against.

    ccscope quic collect --root /var/tmp/ccscope-quic --conditions d5,d20 --runs 2
    ccscope quic baseline --root /var/tmp/ccscope-quic [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ccscope.classifier.dataset import Condition, Job, job_seed, label_of, load_index, measure_timeout

DEFAULT_ROOT = Path("/var/tmp/ccscope-quic")
DEFAULT_STATE_DIR = Path("/run/ccscope/lab-quic")
DEFAULT_INSTANCE = 52
# ~17 s per QUIC profile: A-quic carries ~250 datagrams of 1200 bytes a second, as many packets
# per second as profile A's 100-byte ones, so an object needs ~25x the bytes for as many RTTs
OBJECT_BYTES = 5_000_000
QUIC_CONDITIONS: tuple[Condition, ...] = (
    Condition("d5", 5.0),
    Condition("d20", 20.0),
    Condition("d40-j2", 40.0, jitter_ms=2.0),
    Condition("d10-l1e3", 10.0, loss=0.001),
    Condition("h-d60-j1", 60.0, jitter_ms=1.0, split="heldout"),
)
# The TCP class each lab QUIC server's CCA implements (what the current classifier can name).
FAMILY = {"reno": "reno/dctcp", "cubic": "cubic", "bbr2": "bbr2"}


def family(label: str) -> str:
    """`quiche:cubic` -> `cubic`: the TCP class of a QUIC stack's CCA."""
    return FAMILY.get(label.split(":", 1)[-1], label.split(":", 1)[-1])


def quic_labels() -> tuple[str, ...]:
    from ccscope.lab.quic.registry import available_servers

    ok, _why = available_servers()
    return tuple(s.label for s in ok)


def plan(conditions: Sequence[Condition], runs: int, labels: Sequence[str]) -> dict[str, list[Job]]:
    return {
        c.name: [Job(c.name, label, r) for r in range(c.runs or runs) for label in labels] for c in conditions
    }


def _run_dir(root: Path, job: Job) -> Path:
    return root / job.condition / job.cca.replace(":", "-") / f"run{job.run}"


def _measure_one(root: Path, job: Job, object_bytes: int, timeout: float) -> dict[str, Any] | None:
    from ccscope.capture.measure import measure
    from ccscope.lab.quic.registry import quic_server

    out = _run_dir(root, job)
    if (out / "measurement.json").exists():
        return None
    url = f"https://{quic_server(job.cca).hostname}/obj/{object_bytes}"
    try:
        m = measure(url, ("A", "B"), out, lab=True, timeout=timeout, seed=job_seed(job), transport="quic")
    except Exception as e:  # one failed download must not stop the collection
        print(f"  {job}: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    return {"job": asdict(job), "ok": m.ok, "transport": "quic", "family": family(job.cca),
            "runs": [r.__dict__ for r in m.runs]}  # fmt: skip


def collect(
    root: Path = DEFAULT_ROOT,
    conditions: Sequence[Condition] = QUIC_CONDITIONS,
    *,
    runs: int = 2,
    labels: Sequence[str] | None = None,
    object_bytes: int = OBJECT_BYTES,
    concurrency: int = 3,
    state_dir: Path = DEFAULT_STATE_DIR,
    instance: int = DEFAULT_INSTANCE,
) -> Path:
    """Measure every (condition, stack:cca, run) not measured yet; returns the index file."""
    from ccscope.lab.lab import Lab, LabParams

    labels = tuple(labels or quic_labels())
    jobs = plan(conditions, runs, labels)
    root.mkdir(parents=True, exist_ok=True)
    index = root / "index.jsonl"
    os.environ["CCSCOPE_LAB_DIR"] = str(state_dir)
    for cond in conditions:
        todo = [j for j in jobs[cond.name] if not (_run_dir(root, j) / "measurement.json").exists()]
        if not todo:
            continue
        t0 = time.monotonic()
        print(f"condition {cond.name}: {len(todo)} QUIC measurements", file=sys.stderr, flush=True)
        lab = Lab(state_dir)
        params = LabParams(delay_ms=cond.delay_ms, jitter_ms=cond.jitter_ms, loss=cond.loss, ccas=("cubic",),
                           instance=instance, quic=labels)  # fmt: skip
        lab.up(params, timeout=60)
        timeout = measure_timeout(cond)
        try:
            with ThreadPoolExecutor(concurrency) as pool:
                for rec in pool.map(lambda j: _measure_one(root, j, object_bytes, timeout), todo):  # noqa: B023
                    if rec is None:
                        continue
                    rec["condition"] = asdict(cond)
                    with index.open("a") as f:
                        f.write(json.dumps(rec, default=str) + "\n")
                    print(
                        f"  {rec['job']['cca']} run {rec['job']['run']}: ok={rec['ok']}",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            lab.down()
        print(f"condition {cond.name}: done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return index


def baseline(root: Path = DEFAULT_ROOT) -> dict[str, Any]:
    """Today's classifier on every QUIC run (both profiles together, as a census reads them):
    per stack:cca, how often it names the family the stack implements, and what else it said."""
    from ccscope.classifier import classify
    from ccscope.trace import Trace

    by_run: dict[tuple[str, str, int], list[str]] = {}
    for s in load_index(root):
        by_run.setdefault((s.condition, s.cca, s.run), []).append(s.path)
    rows: dict[str, dict[str, Any]] = {}
    for (_cond, label, _run), paths in sorted(by_run.items()):
        try:
            v = classify([Trace.load(p) for p in sorted(paths)])
            said = v.label
        except Exception as e:
            said = f"error: {type(e).__name__}"
        r = rows.setdefault(label, {"family": family(label), "runs": 0, "right": 0, "verdicts": {}})
        r["runs"] += 1
        r["right"] += int(said == r["family"])
        r["verdicts"][said] = r["verdicts"].get(said, 0) + 1
    for r in rows.values():
        r["recall"] = round(r["right"] / r["runs"], 3) if r["runs"] else None
    recalls = [r["recall"] for r in rows.values() if r["recall"] is not None]
    return {
        "what": "the current (TCP-trained) classifier on QUIC lab runs; right = names the TCP family "
        "the stack's CCA implements (no QUIC classes are trained yet)",
        "per_stack": rows,
        "mean_recall": round(sum(recalls) / len(recalls), 3) if recalls else None,
    }


def _fmt(rep: dict[str, Any]) -> str:
    lines = [f"{'stack:cca':<16}{'family':<12}{'runs':>5}{'right':>7}  verdicts"]
    for label, r in sorted(rep["per_stack"].items()):
        said = ", ".join(f"{k} {n}" for k, n in sorted(r["verdicts"].items(), key=lambda x: -x[1]))
        lines.append(f"{label:<16}{r['family']:<12}{r['runs']:>5}{r['right']:>7}  {said}")
    lines.append(f"mean recall (family named): {rep['mean_recall']}")
    return "\n".join(lines)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "quic", help="QUIC lab datasets: collect reference traces, score today's classifier"
    )
    sub = p.add_subparsers(dest="quic_cmd", required=True)
    q = sub.add_parser("collect", help="measure every lab QUIC stack x CCA under a list of conditions")
    q.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    q.add_argument("--conditions", default=",".join(c.name for c in QUIC_CONDITIONS),
                   help="comma-separated condition names")  # fmt: skip
    q.add_argument("--runs", type=int, default=2)
    q.add_argument("--stacks", help="comma-separated stack:cca labels (default: every available one)")
    q.add_argument("--object-bytes", type=int, default=OBJECT_BYTES)
    q.add_argument("--concurrency", type=int, default=3)
    q.add_argument("--instance", type=int, default=DEFAULT_INSTANCE)
    q.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    q.set_defaults(func=_cmd_collect)
    q = sub.add_parser("baseline", help="today's classifier on a QUIC collection, per stack:cca")
    q.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_cmd_baseline)


def _cmd_collect(a: argparse.Namespace) -> int:
    by_name = {c.name: c for c in QUIC_CONDITIONS}
    try:
        conds = [by_name[n] for n in a.conditions.split(",") if n]
    except KeyError as e:
        print(f"ccscope: error: unknown condition {e.args[0]} (known: {', '.join(by_name)})", file=sys.stderr)
        return 2
    labels = tuple(x for x in (a.stacks or "").split(",") if x) or None
    idx = collect(a.root, conds, runs=a.runs, labels=labels, object_bytes=a.object_bytes,
                  concurrency=a.concurrency, state_dir=a.state_dir, instance=a.instance)  # fmt: skip
    print(idx)
    return 0


def _cmd_baseline(a: argparse.Namespace) -> int:
    rep = baseline(a.root)
    print(json.dumps(rep, indent=2) if a.json else _fmt(rep))
    return 0 if rep["per_stack"] else 1


__all__ = ["FAMILY", "QUIC_CONDITIONS", "baseline", "collect", "family", "label_of", "plan", "register"]
