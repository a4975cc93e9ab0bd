"""BPF CUBIC against the kernel's under the standard profiles: capture-side BiF traces of both
compared by a permutation test of their distances and per-trace features."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ccscope.errors import LabError
from ccscope.lab.validate.client import Ctx

# --- BPF CUBIC vs kernel CUBIC under the standard profiles -------------------------------------

GRID_S = 0.01


def _bif_on_grid(tr: Any, bdp: float, t_end: float) -> np.ndarray:
    """BiF / BDP on a 10 ms grid from the first sample (zero-order hold)."""
    grid = np.arange(0.0, t_end, GRID_S)
    t = tr.t - tr.t[0]
    idx = np.clip(np.searchsorted(t, grid, side="right") - 1, 0, len(t) - 1)
    return tr.bif[idx].astype(float) / bdp


def trace_distance(a: Any, b: Any, bdp: float) -> float:
    """Mean |BiF_a(t) - BiF_b(t)| / BDP over the span both traces cover, time-aligned at
    their first packet."""
    t_end = min(a.duration, b.duration)
    if t_end <= GRID_S:
        return math.nan
    return float(np.mean(np.abs(_bif_on_grid(a, bdp, t_end) - _bif_on_grid(b, bdp, t_end))))


def trace_features(tr: Any, bdp: float) -> dict[str, float]:
    """Per-trace summaries: mean and 90th percentile BiF in BDPs, transfer time, loss events."""
    b = tr.bif.astype(float) / bdp
    t = tr.t - tr.t[0]
    w = np.diff(t, append=t[-1])  # time-weighted: the capture samples per packet, not per time
    tot = float(w.sum()) or 1.0
    order = np.argsort(b)
    cum = np.cumsum(w[order]) / tot
    return {
        "mean_bif_bdp": float((b * w).sum() / tot),
        "p90_bif_bdp": float(b[order][min(np.searchsorted(cum, 0.9), len(b) - 1)]),
        "duration_s": float(t[-1]),
        "retransmits": float(len(tr.events.get("retransmit", []))),
    }


def _label_splits(n_a: int, n_b: int, rounds: int, seed: int) -> Iterator[tuple[int, ...]]:
    """Every way to pick group A out of n_a + n_b items (exact test), or `rounds` random ones."""
    n = n_a + n_b
    if math.comb(n, n_a) <= rounds:
        yield from itertools.combinations(range(n), n_a)
        return
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        yield tuple(sorted(rng.choice(n, n_a, replace=False).tolist()))


def distance_permutation_test(
    d: np.ndarray, n_a: int, *, rounds: int = 5000, seed: int = 1
) -> dict[str, float]:
    """Are cross-group distances larger than within-group ones? `d` is the pairwise distance
    matrix of n_a traces of group A then the rest of group B. Statistic: median cross distance
    minus median within distance (medians: a host hiccup now and then sends a run down another
    path of losses, and one such trace must not decide the verdict); p = share of label splits
    at least as extreme (one-sided)."""
    n = len(d)
    iu = np.triu_indices(n, 1)

    def stat(a: set[int]) -> tuple[float, float]:
        same = np.array([(i in a) == (j in a) for i, j in zip(*iu, strict=True)])
        return float(np.median(d[iu][~same])), float(np.median(d[iu][same]))

    cross, within = stat(set(range(n_a)))
    obs = cross - within
    hits = total = 0
    for split in _label_splits(n_a, n - n_a, rounds, seed):
        c, w = stat(set(split))
        hits += (c - w) >= obs - 1e-12
        total += 1
    return {
        "cross": cross,
        "within": within,
        "ratio": cross / within if within else math.nan,
        "p_value": hits / total,
        "splits": total,
    }


def feature_permutation_test(x: Sequence[float], n_a: int, *, rounds: int = 5000, seed: int = 1) -> float:
    """Two-sided p-value of the difference of group means."""
    v = np.asarray(x, dtype=float)
    obs = abs(v[:n_a].mean() - v[n_a:].mean())
    hits = total = 0
    for split in _label_splits(n_a, len(v) - n_a, rounds, seed):
        m = np.zeros(len(v), dtype=bool)
        m[list(split)] = True
        hits += abs(v[m].mean() - v[~m].mean()) >= obs - 1e-12
        total += 1
    return hits / total


# The emulator is deterministic, so runs of one implementation often repeat to the packet and
# the permutation test can flag differences far below what any classifier resolves. A pair
# that fails the test still counts as equivalent when cross-implementation traces are on
# average no further apart than within-implementation ones plus this margin (in BDPs; at the
# standard profiles 0.05 BDP is about one 100-byte packet).
EQUIVALENCE_MARGIN_BDP = 0.05
CUBIC_METRIC = (
    "excess of the median cross-implementation over the median within-implementation trace "
    "distance, in BDPs (0: BPF traces lie as close to kernel traces as kernel traces to each "
    "other); distance = mean |BiF_a(t) - BiF_b(t)| / BDP on a 10 ms grid, capture-side BiF "
    "aligned at the first packet; p from an exact permutation test of the labels"
)


def compare_cubic(
    ctx: Ctx,
    profiles: Sequence[str] = ("A", "B"),
    n: int = 5,
    *,
    nbytes: int = 200_000,
    jobs: int = 3,
    work_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """n downloads each of kernel `cubic` and BPF `cc-cubic` per standard profile (capture-side
    BiF, as the classifier sees it), compared by the distance test and per-trace features."""
    from ccscope.capture.measure import measure_profile
    from ccscope.profile import get_profile
    from ccscope.trace import Trace

    work = work_dir or ctx.state_dir / "cubic-compare"
    jobs_list = [(p, impl, k) for p in profiles for k in range(n) for impl in ("cubic", "cc-cubic")]

    def one(job: tuple[str, str, int]) -> tuple[str, str, Trace]:
        prof, impl, k = job
        out = work / f"{prof}-{impl}-{k}"
        out.mkdir(parents=True, exist_ok=True)
        run = measure_profile(
            f"http://{impl}.lab.test/obj/{nbytes}",
            get_profile(prof),
            out,
            lab=True,
            run_id=f"cmp-{uuid.uuid4().hex[:8]}",
            timeout=120,
        )
        if not run.ok or not run.trace_file:
            raise LabError(f"profile {prof} download from {impl} failed: {run.error}")
        return prof, impl, Trace.load(run.trace_file)

    with _env("CCSCOPE_LAB_DIR", str(ctx.state_dir)), ThreadPoolExecutor(max_workers=jobs) as ex:
        got = list(ex.map(one, jobs_list))
    ctx.log(f"  cubic comparison: {len(got)} downloads")
    out = []
    for prof in profiles:
        kern = [tr for p, i, tr in got if p == prof and i == "cubic"]
        bpf = [tr for p, i, tr in got if p == prof and i == "cc-cubic"]
        trs = kern + bpf
        bdp = float(
            get_profile(prof).bdp_bytes(float(np.median([t.internet_rtt_ms or 0.0 for t in trs]))) or 1.0
        )
        d = np.array([[trace_distance(a, b, bdp) if a is not b else 0.0 for b in trs] for a in trs])
        test = distance_permutation_test(d, len(kern))
        excess = test["cross"] - test["within"]
        feats = [trace_features(t, bdp) for t in trs]
        fdoc = {}
        for name in feats[0]:
            vals = [f[name] for f in feats]
            fdoc[name] = {
                "kernel_mean": round(float(np.mean(vals[: len(kern)])), 4),
                "bpf_mean": round(float(np.mean(vals[len(kern) :])), 4),
                "p_value": round(feature_permutation_test(vals, len(kern)), 4),
            }
        out.append(
            {
                "profile": prof,
                "metric": CUBIC_METRIC,
                "value": round(excess, 4),
                "ratio": round(test["ratio"], 4),
                "p_value": round(test["p_value"], 4),
                "n": len(kern),
                "cross_median_distance_bdp": round(test["cross"], 4),
                "within_median_distance_bdp": round(test["within"], 4),
                "label_splits": test["splits"],
                "bdp_bytes": round(bdp, 1),
                "object_bytes": nbytes,
                "features": fdoc,
                "excess_distance_bdp": round(excess, 4),
                "equivalence_margin_bdp": EQUIVALENCE_MARGIN_BDP,
                "indistinguishable": test["p_value"] >= 0.05,
                "equivalent": excess <= EQUIVALENCE_MARGIN_BDP,
                "pass": test["p_value"] >= 0.05 or excess <= EQUIVALENCE_MARGIN_BDP,
            }
        )
    return out


@contextlib.contextmanager
def _env(key: str, value: str) -> Iterator[None]:
    old = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old
