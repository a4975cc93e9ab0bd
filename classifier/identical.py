"""CCAs that are Reno, by their own specification, on the path a trace was measured on.

HighSpeed TCP is Reno while its window stays at or below W_low = 38 segments (RFC 3649), BIC
below its low_window of 14, Illinois below its win_thresh of 15, and Hybla on a path whose
minimum RTT is at most its reference RTT0 of 25 ms (rho = 1). On such a path the two send
exactly the same packets: no method, whatever its data, can tell them apart, and a verdict
naming one of them would be a coin toss scored as knowledge. So a measurement whose every
usable trace stayed inside such a region is the class "reno/dctcp" for training, for scoring
and for the verdict, and the verdict says which CCAs it stands for here (`identical_here`).

The thresholds are the zoo's own constants (lab/ccas/bpf/*.bpf.c, checked by
tests/classifier/test_identical.py), which are the Linux and RFC defaults. A window read from a
trace is its largest low-passed pipe in segments (`ctx_wmax_pkts`): the sender's window when it
is not application-limited.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ccscope.classifier.summary import TraceSummary

RENO = "reno/dctcp"


@dataclass(frozen=True)
class RenoRegion:
    """`cca` behaves exactly as Reno on a trace whose window peaked at most `max_window`
    segments, or whose base RTT is at most `max_rtt_ms`."""

    cca: str
    why: str
    max_window: float | None = None
    max_rtt_ms: float | None = None

    def holds(self, s: TraceSummary) -> bool:
        if self.max_window is not None:
            w = s.value("ctx_wmax_pkts")
            return math.isfinite(w) and math.exp(w) <= self.max_window
        if self.max_rtt_ms is not None:
            return s.rtt_ms is not None and s.rtt_ms <= self.max_rtt_ms
        return False


REGIONS: tuple[RenoRegion, ...] = (
    RenoRegion("highspeed", "HighSpeed is Reno at windows up to 38 segments", max_window=38),
    RenoRegion("bic", "BIC is Reno at windows up to 14 segments", max_window=14),
    RenoRegion("illinois", "Illinois is Reno below 15 segments", max_window=14),
    RenoRegion("hybla", "Hybla is Reno where the base RTT is at most 25 ms", max_rtt_ms=25.0),
)


def identical_here(m: Sequence[TraceSummary]) -> tuple[RenoRegion, ...]:
    """The regions every usable trace of the measurement sits in (none without a usable trace)."""
    usable = [s for s in m if s.usable]
    if not usable:
        return ()
    return tuple(r for r in REGIONS if all(r.holds(s) for s in usable))


def path_label(label: str, m: Sequence[TraceSummary]) -> str:
    """The class a measurement of `label` belongs to on its own path: Reno where the CCA is Reno."""
    return RENO if any(r.cca == label for r in identical_here(m)) else label


def merge_identical(p: np.ndarray, classes: Sequence[str], m: Sequence[TraceSummary]) -> np.ndarray:
    """Class probabilities with the mass of every CCA that is Reno on this path moved to Reno
    (a CCA the trace cannot tell from Reno is no separate answer)."""
    if RENO not in classes:
        return p
    idx = {c: i for i, c in enumerate(classes)}
    out = np.array(p, dtype=np.float64, copy=True)
    for r in identical_here(m):
        j = idx.get(r.cca)
        if j is not None:
            out[idx[RENO]] += out[j]
            out[j] = 0.0
    return out
