"""Reference traces from the lab: which CCAs, which network conditions, how many runs.

`collect()` brings the lab up once per network condition (the Internet-path delay, jitter and
loss are properties of the lab's shell), measures every CCA through both standard profiles
several times concurrently, and appends one line per trace to `<root>/index.jsonl`. It is
resumable: a (condition, cca, run) whose measurement.json already exists is not measured again,
so an interrupted `ccscope train` picks up where it stopped.

Traces live outside the repository (default /var/tmp/ccscope-train); only the model is committed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DEFAULT_ROOT = Path("/var/tmp/ccscope-train")
DEFAULT_STATE_DIR = Path("/run/ccscope/lab-clf")
DEFAULT_INSTANCE = 4
OBJECT_BYTES = 250_000  # ~20 s per profile at 200 kbit/s with 48-byte segments: 2 ProbeRTTs of BBRv1

# Every CCA the lab serves today, by lab name. cc-cubic (the zoo's CUBIC) is trained as "cubic":
# it is the same algorithm, and a census cannot tell a kernel build from a BPF one.
KERNEL_CCAS = ("reno", "cubic", "bbr")
ZOO_CCAS = (
    "bic", "htcp", "vegas", "westwood", "illinois", "scalable", "highspeed", "yeah", "veno",
    "hybla", "lp", "nv", "dctcp", "cdg", "cc-cubic", "bbr3",
)  # fmt: skip
TRAINED_CCAS = KERNEL_CCAS + ZOO_CCAS


def zoo_ccas() -> tuple[str, ...]:
    """Lab names of every CCA the zoo builds today (default set + experimental) that has a lab
    address: a CCA added to the zoo and the registry is trained on by the next `ccscope train`."""
    try:
        from ccscope.lab.ccas import DEFAULT_SET, EXPERIMENTAL
        from ccscope.lab.registry import lab_cca

        names = []
        for base in (*DEFAULT_SET, *EXPERIMENTAL):
            try:
                names.append(lab_cca("cc_" + base).name)
            except KeyError:
                continue  # built but not served by the lab yet
        return tuple(names) or ZOO_CCAS
    except ImportError:
        return ZOO_CCAS


def trained_ccas() -> tuple[str, ...]:
    return KERNEL_CCAS + tuple(c for c in zoo_ccas() if c not in KERNEL_CCAS and c not in VARIANTS)


LABEL_OF = {"cc-cubic": "cubic"}

# Untrained parameter variants: lab name -> (zoo base, registered name, params).
VARIANTS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "cubic-b50": ("cubic", "cc_cubic_b50", {"beta": 0.5}),
    "bbr3-g15": ("bbr3", "cc_bbr3_g15", {"probe_up_pacing_gain": 1.5}),
    "bic-b50": ("bic", "cc_bic_b50", {"beta": 0.5}),
    "vegas-a6": ("vegas", "cc_vegas_a6", {"alpha": 6, "beta": 12}),
}
# Nearest trained family of each variant: what "unknown, X-like" should name.
VARIANT_FAMILY = {"cubic-b50": "cubic", "bbr3-g15": "bbr3", "bic-b50": "bic", "vegas-a6": "vegas"}


def label_of(cca: str) -> str:
    return LABEL_OF.get(cca, cca)


@dataclass(frozen=True)
class Condition:
    """An emulated Internet path between the servers and the capture point (one way)."""

    name: str
    delay_ms: float
    jitter_ms: float = 0.0
    loss: float = 0.0
    split: str = "train"  # "train": runs split into train/held-out; "heldout": never trained on


# Training conditions span delay, jitter and light loss; the held-out ones sit between and
# beyond them (a delay, a jitter and a loss rate no training trace saw).
CONDITIONS: tuple[Condition, ...] = (
    Condition("d5", 5.0),
    Condition("d20", 20.0),
    Condition("d40-j2", 40.0, jitter_ms=2.0),
    Condition("d10-l1e3", 10.0, loss=0.001),
    Condition("d25-j4-l5e4", 25.0, jitter_ms=4.0, loss=0.0005),
    Condition("h-d15-j3-l2e3", 15.0, jitter_ms=3.0, loss=0.002, split="heldout"),
    Condition("h-d60-j1", 60.0, jitter_ms=1.0, split="heldout"),
)


@dataclass(frozen=True)
class Job:
    condition: str
    cca: str
    run: int


def plan(
    conditions: Sequence[Condition] = CONDITIONS,
    *,
    runs_train: int = 2,
    runs_heldout: int = 1,
    ccas: Sequence[str] | None = None,
    variants: Sequence[str] = tuple(VARIANTS),
    runs_variants: int = 1,
) -> dict[str, list[Job]]:
    """Jobs per condition. Variants get a few runs everywhere (they are never trained on)."""
    ccas = trained_ccas() if ccas is None else ccas
    out: dict[str, list[Job]] = {}
    for c in conditions:
        n = runs_train if c.split == "train" else runs_heldout
        jobs = [Job(c.name, cca, r) for r in range(n) for cca in ccas]
        jobs += [Job(c.name, v, r) for r in range(runs_variants) for v in variants]
        out[c.name] = jobs
    return out


def _ensure_ccas(names: Iterable[str]) -> None:
    from ccscope.lab import ccas as zoo

    # Registered names: a bare "cubic" would pass through as the kernel's own CUBIC.
    zoo_names = set(zoo_ccas())
    zoo.ensure_loaded([zoo.zoo_name("cubic" if n == "cc-cubic" else n) for n in names if n in zoo_names])
    for n in names:
        if n in VARIANTS:
            b, reg, params = VARIANTS[n]
            if reg not in zoo.kernel_available():
                zoo.load(b, params, as_name=reg)


def _measure_one(root: Path, job: Job, object_bytes: int) -> dict[str, Any] | None:
    from ccscope.capture.measure import measure

    out = root / job.condition / job.cca / f"run{job.run}"
    done = out / "measurement.json"
    if done.exists():
        return None
    try:
        m = measure(f"https://{job.cca}.lab.test/obj/{object_bytes}", ("A", "B"), out, lab=True, timeout=120)
    except Exception as e:  # one failed download must not stop a half-hour collection
        print(f"  {job}: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    return {"job": asdict(job), "ok": m.ok, "runs": [r.__dict__ for r in m.runs]}


def collect(
    root: Path = DEFAULT_ROOT,
    jobs: dict[str, list[Job]] | None = None,
    conditions: Sequence[Condition] = CONDITIONS,
    *,
    object_bytes: int = OBJECT_BYTES,
    concurrency: int = 10,
    state_dir: Path = DEFAULT_STATE_DIR,
    instance: int = DEFAULT_INSTANCE,
) -> Path:
    """Measure every job; returns the index file. Needs root and the built lab."""
    from ccscope.lab.lab import Lab, LabParams

    jobs = jobs if jobs is not None else plan(conditions)
    root.mkdir(parents=True, exist_ok=True)
    index = root / "index.jsonl"
    os.environ["CCSCOPE_LAB_DIR"] = str(state_dir)  # measure() finds this lab's hosts and CA
    by_name = {c.name: c for c in conditions}
    for cname, cjobs in jobs.items():
        todo = [
            j for j in cjobs if not (root / j.condition / j.cca / f"run{j.run}" / "measurement.json").exists()
        ]
        if not todo:
            continue
        cond = by_name[cname]
        names = tuple(sorted({j.cca for j in todo}))
        _ensure_ccas(names)
        lab = Lab(state_dir)
        t0 = time.monotonic()
        print(f"condition {cname}: {len(todo)} measurements of {len(names)} CCAs", file=sys.stderr)
        lab.up(
            LabParams(
                delay_ms=cond.delay_ms,
                jitter_ms=cond.jitter_ms,
                loss=cond.loss,
                ccas=names,
                instance=instance,
            ),
            timeout=60,
        )
        try:
            with ThreadPoolExecutor(concurrency) as pool:
                for rec in pool.map(lambda j: _measure_one(root, j, object_bytes), todo):
                    if rec is None:
                        continue
                    rec["condition"] = asdict(cond)
                    with index.open("a") as f:
                        f.write(json.dumps(rec, default=str) + "\n")
        finally:
            lab.down()
        print(f"condition {cname}: done in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return index


@dataclass(frozen=True)
class Sample:
    """One reference trace: the file and what produced it."""

    path: str
    cca: str  # lab name
    label: str  # class name (cc-cubic -> cubic)
    condition: str
    condition_split: str
    run: int
    profile: str
    is_variant: bool


def load_index(root: Path = DEFAULT_ROOT, *, alignment: str = "sender") -> list[Sample]:
    """Every trace in the collection, sorted (so training is independent of collection order)."""
    out: dict[str, Sample] = {}
    index = root / "index.jsonl"
    if not index.exists():
        return []
    for line in index.read_text().splitlines():
        rec = json.loads(line)
        job, cond = rec["job"], rec["condition"]
        for r in rec["runs"]:
            f = r.get("sender_trace_file" if alignment == "sender" else "trace_file")
            if not f or not Path(f).exists():
                continue
            cca = job["cca"]
            out[f] = Sample(
                path=f,
                cca=cca,
                label=label_of(cca),
                condition=job["condition"],
                condition_split=cond.get("split", "train"),
                run=int(job["run"]),
                profile=r["profile"],
                is_variant=cca in VARIANTS,
            )
    return [out[k] for k in sorted(out)]
