"""The reference set: which lab measurements train and evaluate the classifier.

Every measurement is one CCA under one seeded draw of the condition space
(`classifier/conditions.py`), through both of the draw's profiles. One CCA per draw, so every
CCA meets as many different paths as there are measurements of it. The sets:

* `train` (`N_TRAIN` per CCA, or `plan(train_per_cca=N)`): `full` space, train split; each
  factor group held at its mildest with probability `MILD_P`, independently. Fitting and (out
  of bag) calibration.
* `heldout_runs` (`N_RUNS` per CCA): the first training draws of each CCA, a second run (new
  emulator seeds): the old "held-out runs", a path trained on and a run never seen.
* `unseen` (`N_UNSEEN` per CCA): `full` space, eval split. Will it hold out there?
* `variants` (`N_VARIANTS` per variant): `full` space, eval split. Untrained variants should be
  Unknown.
* `variants_design` (`N_VARIANTS_DESIGN` per variant): `full` space, calib split. What the
  Unknown rules' settings were chosen on; never scored.
* `other_profiles` (`N_OTHER` per CCA): `other-profiles` space, eval split: imported captures'
  bottlenecks (SACK off, 1xBDP, 50-400 kbit/s, MTU 100).
* `demo` (`N_DEMO` per CCA): the demo's set-up.

`quic_plan()` is the same for the lab's QUIC classes (`stack:cca`, lab/quic/registry.py):
`train` (`N_TRAIN_QUIC` per class, the same `MILD_P` mechanism), `heldout_runs`
(`N_RUNS_QUIC`) and `unseen` (`N_UNSEEN_QUIC`), each draw as a QUIC measurement meets it
(`conditions.quic_draw`) and from indices of their own (`QUIC_OFFSET`), so a QUIC class meets
paths the TCP classes did not.

Training draws hold factor groups at their mildest at random so that leave-one-factor-out
models (train where a group was mild, test across its range) need no extra measurements; the
bench compares each with a model trained on a random subset of the same size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ccscope.classifier.conditions import GROUPS, DrawJob, quic_draw, sample
from ccscope.classifier.dataset import VARIANTS, trained_ccas

MILD_P = 0.25
N_TRAIN = 80
N_RUNS = 4
N_UNSEEN = 16
N_VARIANTS = 16
N_VARIANTS_DESIGN = 8
N_OTHER = 6
N_DEMO = 1
N_TRAIN_QUIC = 72
N_RUNS_QUIC = 3
N_UNSEEN_QUIC = 8
QUIC_OFFSET = 200_000  # draw indices of the QUIC sets (the TCP sets use 0.. and 100_000..)


def mild_groups(index: int, cca: str) -> tuple[str, ...]:
    """The factor groups a training draw holds at their mildest: each with probability MILD_P,
    from a digest of the draw's index and CCA (stable, independent per group)."""
    out = []
    for g in GROUPS:
        h = hashlib.sha256(f"ccscope-mild/{index}/{cca}/{g}".encode()).digest()
        if int.from_bytes(h[:4], "big") / 2**32 < MILD_P:
            out.append(g)
    return tuple(out)


def _jobs(space: str, split: str, ccas: Sequence[str], n: int, *, mild: bool = False, run: int = 0,
          offset: int = 0) -> list[DrawJob]:  # fmt: skip
    jobs = []
    for j in range(n):
        for ci, cca in enumerate(ccas):
            index = offset + j * len(ccas) + ci
            fixed = mild_groups(index, cca) if mild else ()
            jobs.append(DrawJob(sample(space, split, index, fixed), cca, run))
    return jobs


def plan(
    ccas: Sequence[str] | None = None, scale: float = 1.0, train_per_cca: int | None = None
) -> dict[str, list[DrawJob]]:
    """The reference set's jobs per set; `scale` shrinks every count (a smoke run).

    `train_per_cca` grows (or shrinks) the training set alone: the first that many draws per CCA
    of the same seeded stream, so a larger set holds the smaller one and every other set is
    unchanged (growing the training data without touching what evaluates it)."""
    ccas = tuple(ccas or trained_ccas())
    variants = tuple(VARIANTS)

    def n(x: int) -> int:
        return max(1, round(x * scale))

    train = _jobs("full", "train", ccas, train_per_cca or n(N_TRAIN), mild=True)
    first = {c: [j for j in train if j.cca == c][: n(N_RUNS)] for c in ccas}
    return {
        "train": train,
        "heldout_runs": [DrawJob(j.draw, j.cca, 1) for c in ccas for j in first[c]],
        "unseen": _jobs("full", "eval", ccas, n(N_UNSEEN)),
        "variants": _jobs("full", "eval", variants, n(N_VARIANTS), offset=100_000),
        "variants_design": _jobs("full", "calib", variants, n(N_VARIANTS_DESIGN)),
        "other_profiles": _jobs("other-profiles", "eval", ccas, n(N_OTHER)),
        "demo": _jobs("demo", "eval", ccas, n(N_DEMO)),
    }


def quic_plan(labels: Sequence[str] | None = None, scale: float = 1.0) -> dict[str, list[DrawJob]]:
    """The QUIC reference set's jobs per set (the lab's QUIC classes by default)."""
    from ccscope.lab.quic.registry import QUIC_SERVERS

    labels = tuple(labels or (s.label for s in QUIC_SERVERS))

    def n(x: int) -> int:
        return max(1, round(x * scale))

    def adapt(jobs: list[DrawJob]) -> list[DrawJob]:
        return [DrawJob(quic_draw(j.draw), j.cca, j.run) for j in jobs]

    train = adapt(_jobs("full", "train", labels, n(N_TRAIN_QUIC), mild=True, offset=QUIC_OFFSET))
    first = {c: [j for j in train if j.cca == c][: n(N_RUNS_QUIC)] for c in labels}
    return {
        "train": train,
        "heldout_runs": [DrawJob(j.draw, j.cca, 1) for c in labels for j in first[c]],
        "unseen": adapt(_jobs("full", "eval", labels, n(N_UNSEEN_QUIC), offset=QUIC_OFFSET)),
    }
