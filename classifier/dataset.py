"""Reference traces from the lab: which CCAs, which network conditions, how many runs.

`collect()` brings the lab up once per network condition (the Internet-path delay, jitter and
loss are properties of the lab's shell), measures every CCA through both standard profiles
several times concurrently, and appends one line per trace to `<root>/index.jsonl`. It is
resumable: a (condition, cca, run) whose measurement.json already exists is not measured again,
so an interrupted `ccscope train` picks up where it stopped.

Traces live outside the repository (default /var/tmp/ccscope-train); only the model is committed.
"""

from __future__ import annotations

import hashlib
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
# ~35 s per profile at 200 kbit/s with 48-byte segments: 3 ProbeRTTs of BBRv1, several
# congestion-avoidance cycles of a loss-based CCA; the size a census downloads (the lab's /large,
# METHOD's >= 400 KB)
OBJECT_BYTES = 400_000

# Every CCA the lab serves today, by lab name. cc-cubic (the zoo's CUBIC) is trained as "cubic":
# it is the same algorithm, and a census cannot tell a kernel build from a BPF one.
KERNEL_CCAS = ("reno", "cubic", "bbr")
ZOO_CCAS = (
    "bic", "htcp", "vegas", "westwood", "illinois", "scalable", "highspeed", "yeah", "veno",
    "hybla", "lp", "nv", "dctcp", "cdg", "cc-cubic", "bbr2", "bbr3",
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


# CCAs whose traces under the method's profiles match run for run are one class, named after
# both: DCTCP on a path without ECN marks falls back to Reno (its traces differ from Reno's no
# more than two Reno runs do). A verdict "reno/dctcp" says exactly what the traces can tell.
# (1.x also merged YeAH into Scalable: without SACK its queue never held the 80 packets that
# switch it to Reno mode. With SACK it does within seconds and then halves like Reno, so the two
# are told apart: no confusion between them on held-out runs.)
LABEL_OF = {
    "cc-cubic": "cubic",
    "reno": "reno/dctcp",
    "dctcp": "reno/dctcp",
}

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
    runs: int | None = None  # None: the plan's default for the split


# Training conditions span delay, jitter and light loss; the held-out ones sit between and
# beyond them (a delay, a jitter and a loss rate no training trace saw). The emulator is
# deterministic without jitter or loss, so repeated runs under d5 and d20 are near-duplicates:
# they contribute two training runs each and no held-out run (a copy would flatter the figure).
# Under jitter and loss the concurrent downloads share the lab link's random draws, so every
# run differs.
RUNS_TRAIN = 5  # runs 0..3 train, run 4 is the held-out run
RUNS_HELDOUT = 4
RUNS_VARIANTS = 2
CONDITIONS: tuple[Condition, ...] = (
    Condition("d5", 5.0, runs=2),
    Condition("d20", 20.0, runs=2),
    Condition("d40-j2", 40.0, jitter_ms=2.0),
    Condition("d10-l1e3", 10.0, loss=0.001),
    Condition("d25-j4-l5e4", 25.0, jitter_ms=4.0, loss=0.0005),
    Condition("d12-j1", 12.0, jitter_ms=1.0),
    Condition("d50-j2-l3e4", 50.0, jitter_ms=2.0, loss=0.0003),
    # 1.3: Internet RTTs of 160-220 ms (a vantage point on another continent), and random loss
    # of 0.3 % (a lossy access network), both beyond what 1.2 trained on
    Condition("d80-j2", 80.0, jitter_ms=2.0),
    Condition("d110-j1-l3e4", 110.0, jitter_ms=1.0, loss=0.0003),
    Condition("d30-j2-l3e3", 30.0, jitter_ms=2.0, loss=0.003),
    Condition("h-d15-j3-l2e3", 15.0, jitter_ms=3.0, loss=0.002, split="heldout"),
    Condition("h-d60-j1", 60.0, jitter_ms=1.0, split="heldout"),
)


# The committed test fixtures (tests/fixtures/traces) are one extra run of these CCAs under this
# condition; `units()` leaves every run beyond a condition's plan out of training and evaluation.
FIXTURE_CONDITION = "d5"
FIXTURE_CCAS = ("reno", "cubic", "bbr", "bbr2", "bbr3", "vegas", "lp", "veno", "bic")


@dataclass(frozen=True)
class Job:
    condition: str
    cca: str
    run: int


def plan(
    conditions: Sequence[Condition] = CONDITIONS,
    *,
    runs_train: int = RUNS_TRAIN,
    runs_heldout: int = RUNS_HELDOUT,
    ccas: Sequence[str] | None = None,
    variants: Sequence[str] = tuple(VARIANTS),
    runs_variants: int = RUNS_VARIANTS,
) -> dict[str, list[Job]]:
    """Jobs per condition. Variants get a few runs everywhere (they are never trained on)."""
    ccas = trained_ccas() if ccas is None else ccas
    out: dict[str, list[Job]] = {}
    for c in conditions:
        n = c.runs if c.runs is not None else runs_train if c.split == "train" else runs_heldout
        jobs = [Job(c.name, cca, r) for r in range(n) for cca in ccas]
        jobs += [Job(c.name, v, r) for r in range(runs_variants) for v in variants]
        if c.name == FIXTURE_CONDITION:
            # one run beyond the plan: the committed test fixtures, never trained on
            jobs += [Job(c.name, cca, n) for cca in FIXTURE_CCAS if cca in ccas]
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


def job_seed(job: Job) -> int:
    """A stable per-measurement seed for the profile shell's random draws (jitter, loss)."""
    return int.from_bytes(hashlib.sha256(f"{job.condition}/{job.cca}/{job.run}".encode()).digest()[:4], "big")


def measure_timeout(cond: Condition) -> float:
    """Seconds one profile's download may take: 120 s, plus room for the longer round trips
    (a sender that grows its window once per RTT needs proportionally longer)."""
    return 120.0 + 2.0 * max(0.0, cond.delay_ms - 40.0)


def _measure_one(root: Path, job: Job, object_bytes: int, timeout: float = 120.0) -> dict[str, Any] | None:
    from ccscope.capture.measure import measure

    out = root / job.condition / job.cca / f"run{job.run}"
    done = out / "measurement.json"
    if done.exists():
        return None
    try:
        m = measure(
            f"https://{job.cca}.lab.test/obj/{object_bytes}",
            ("A", "B"),
            out,
            lab=True,
            timeout=timeout,
            seed=job_seed(job),
        )
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
        timeout = measure_timeout(cond)
        try:
            with ThreadPoolExecutor(concurrency) as pool:
                for rec in pool.map(lambda j: _measure_one(root, j, object_bytes, timeout), todo):  # noqa: B023
                    if rec is None:
                        continue
                    rec["condition"] = asdict(cond)
                    with index.open("a") as f:
                        f.write(json.dumps(rec, default=str) + "\n")
        finally:
            lab.down()
        print(f"condition {cname}: done in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return index


def retrace(root: Path = DEFAULT_ROOT) -> int:
    """Rebuild every reference trace from its pcap with the capture code of today (after a
    change to capture/, e.g. SACK tracking), keeping what the measurement recorded beside it
    (run id, fetch result, link stats, partial flag). Returns the number of traces rewritten;
    a pcap that no longer parses is reported and its old traces are left as they were."""
    from ccscope.capture.tcp_bif import flows_from_pcap_aligned
    from ccscope.errors import CCScopeError
    from ccscope.trace import Trace

    index = root / "index.jsonl"
    if not index.exists():
        return 0
    n = 0
    for line in index.read_text().splitlines():
        for r in json.loads(line)["runs"]:
            pcap, cap_f, snd_f = r.get("pcap_file"), r.get("trace_file"), r.get("sender_trace_file")
            if not (pcap and cap_f and snd_f and Path(pcap).exists() and Path(cap_f).exists()):
                continue
            old = Trace.load(cap_f)
            try:
                both = flows_from_pcap_aligned(pcap, object_url=old.object_url, profile=old.profile)
            except CCScopeError as e:
                print(f"  {pcap}: {e}", file=sys.stderr)
                continue
            for align, path in (("capture", cap_f), ("sender", snd_f)):
                new = next(
                    (t for t in both[align].traces if t.flow.client_port == old.flow.client_port),
                    both[align].traces[0],
                )
                new.partial = old.partial
                for k in ("run_id", "fetch", "link_stats"):
                    if k in old.extra:
                        new.extra[k] = old.extra[k]
                new.save(path)
                n += 1
    return n


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
