"""Detectors that run beside the shape model, each looking for one family's signature timing.

* BBRv1: ProbeBW pulses (+25 % for one RTT in every 8) and a ProbeRTT dip to 4 packets every
  ~10 s (the min-RTT filter's window).
* BBRv3 (as the zoo's cc_bbr3 behaves: draft-ietf-ccwg-bbr): ProbeRTT to half the BDP every
  ~5 s, and seconds-long flat ProbeBW_CRUISE stretches between bandwidth probes.
* BBRv2 (the zoo's cc_bbr2, v2alpha) keeps the same timing as v3: ProbeRTT to half the BDP every
  ~5 s, cruise between probes 2-3 s apart. The `bbr3` detector therefore vouches for both
  (model.DETECTOR_CLASS); what tells v2 from v3 is the shape model (how ProbeBW_UP ends, how
  the in-flight bound follows a loss), not a timing.

Each returns a `Finding` with a score in [0, 1] and the evidence it used, in seconds and RTTs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ccscope.classifier.features import Prepared, TraceAnalysis, lowpass, periodicity


@dataclass
class Dip:
    t: float  # s, the dip's deepest point
    depth: float  # dip level / surrounding level
    duration: float  # s below the threshold

    def to_dict(self) -> dict[str, float]:
        return {"t_s": self.t, "depth": self.depth, "duration_s": self.duration}


def find_dips(p: Prepared, keep: np.ndarray, t0: float, t1: float, max_depth: float = 0.75) -> list[Dip]:
    """Short falls of BiF well below the surrounding level that recover within ~1 s: ProbeRTT.

    Uses a lighter smoothing (RTT/4) than the shape model: a ProbeRTT lasts 200 ms + 1 RTT,
    barely more than one RTT, and 1/RTT smoothing would fill it in. Loss recoveries are excluded
    (the caller passes congestion avoidance only; dips inside a recovery are not ProbeRTT)."""
    i0, i1 = int(np.searchsorted(p.t, t0)), int(np.searchsorted(p.t, t1))
    if i1 - i0 < 10:
        return []
    key = ("dips", i0, i1)
    if key not in p.cache:  # both detectors look at the same stretch: compute it once
        x = lowpass(p.raw[i0:i1], p.dt, 4.0 / p.rtt)
        w = max(3, round(2.0 / p.dt))  # surrounding level over ±1 s
        pad = np.pad(x, (w // 2, w - 1 - w // 2), mode="edge")
        # an 80th percentile over the window: the cruise level, not pulled down by the dip itself;
        # on every 5th point only, then interpolated: the level moves on a seconds scale
        step = 5
        win = sliding_window_view(pad, w)[::step, :: max(1, w // 40)]
        lvl = np.interp(
            np.arange(len(x)), np.arange(0, len(x), step)[: len(win)], np.percentile(win, 80, axis=1)
        )
        p.cache[key] = (x, lvl)
    x, lvl = p.cache[key]
    t = p.t[i0:i1]
    below = (x < max_depth * lvl) & (lvl > 0.4) & keep[i0:i1]
    # runs of consecutive True: starts and ends from the edges of the boolean series
    edges = np.diff(np.concatenate([[0], below.astype(np.int8), [0]]))
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0] - 1
    dips: list[Dip] = []
    for i, j in zip(starts.tolist(), ends.tolist(), strict=True):
        dur = (j - i + 1) * p.dt
        if 0.08 <= dur <= 1.5 + 2 * p.rtt:
            k = i + int(np.argmin(x[i : j + 1]))
            dips.append(Dip(float(t[k]), float(x[k] / max(lvl[k], 1e-9)), dur))
    return dips


def comb_match(
    times: list[float], t0: float, t1: float, periods: np.ndarray, tol: float
) -> tuple[float, float, int, int]:
    """The regular comb (period from `periods`, anchored at one of the dips) that the dips fill
    best: (share of the comb's teeth with a dip within tol, period, teeth matched, teeth).
    Extra dips (bandwidth probes, noise) do not hurt; missing ProbeRTTs do. Fewer than two
    matched teeth is no evidence of a period at all."""
    best = (0.0, 0.0, 0, 0)
    if len(times) < 2:
        return best
    ta = np.asarray(times, dtype=np.float64)
    srt = np.sort(ta)
    # every (period, anchor) comb at once: rows = combs in (period, anchor) order, columns =
    # tooth index k relative to the anchor, masked to the teeth inside [t0, t1]
    per = np.repeat(np.asarray(periods, dtype=np.float64), len(ta))
    anc = np.tile(ta, len(periods))
    k0 = -np.floor_divide(anc - t0, per).astype(np.int64)
    k1 = np.floor_divide(t1 - anc, per).astype(np.int64)
    ks = np.arange(int(k0.min()), int(k1.max()) + 1)
    teeth = anc[:, None] + per[:, None] * ks[None, :]
    valid = (ks[None, :] >= k0[:, None]) & (ks[None, :] <= k1[:, None])
    # distance from each tooth to its nearest dip
    j = np.clip(np.searchsorted(srt, teeth), 1, len(srt) - 1)
    near = np.minimum(np.abs(teeth - srt[j - 1]), np.abs(teeth - srt[j])) <= tol
    hit = np.sum(near & valid, axis=1)
    n = np.sum(valid, axis=1)
    ok = (n >= 2) & (hit >= 2)
    if not ok.any():
        return best
    frac = np.where(ok, hit / np.maximum(n, 1), -1.0)
    # the first comb with the highest (share, matched teeth), as a scan in that order would keep
    top = frac == frac.max()
    i = int(np.nonzero(top & (hit == hit[top].max()))[0][0])
    return (float(frac[i]), round(float(per[i]), 2), int(hit[i]), int(n[i]))


@dataclass
class Finding:
    name: str
    score: float  # 0: no sign of it, 1: every signature present
    evidence: dict[str, Any] = field(default_factory=dict)
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "score": self.score, "summary": self.summary, "evidence": self.evidence}


def _ca_span(a: TraceAnalysis) -> tuple[float, float]:
    return a.ss_end, a.ca_end


def detect_bbr1(a: TraceAnalysis) -> Finding:
    p = a.prepared
    t0, t1 = _ca_span(a)
    dips = find_dips(p, a.keep, t0, t1, max_depth=0.45)
    # ProbeRTT comes when the min-RTT sample is 10 s old: dips 10 s apart (+ its own ~0.3 s)
    frac, per, hit, teeth = comb_match([d.t for d in dips], t0, t1, np.arange(9.4, 11.01, 0.1), 0.6)
    i0, i1 = int(np.searchsorted(p.t, t0)), int(np.searchsorted(p.t, t1))
    key = ("period", i0, i1)
    if key not in p.cache:
        p.cache[key] = periodicity(p.smooth[i0:i1], p.rtt, 6.0, 10.5, p.dt)
    period, share = p.cache[key]
    s_bw = min(1.0, share / 0.25)
    score = float(0.6 * frac + 0.4 * s_bw)
    return Finding(
        "bbr1",
        score,
        {
            "probe_rtt_dips": [d.to_dict() for d in dips[:12]],
            "probe_rtt_period_s": per,
            "probe_rtt_matched": [hit, teeth],
            "probe_bw_period_rtts": period,
            "probe_bw_share": share,
        },
        f"{len(dips)} deep dips, {hit} of {teeth} expected ProbeRTTs on a {per:.1f} s comb; strongest "
        f"6-10 RTT oscillation at {period:.1f} RTT holding {share:.0%} of the band (ProbeBW)",
    )


def detect_bbr3(a: TraceAnalysis) -> Finding:
    p = a.prepared
    t0, t1 = _ca_span(a)
    dips = [d for d in find_dips(p, a.keep, t0, t1, max_depth=0.8) if d.depth > 0.2]
    # ProbeRTT (to half the BDP) when the min-RTT sample is 5 s old
    frac, per, hit, teeth = comb_match([d.t for d in dips], t0, t1, np.arange(4.6, 6.01, 0.1), 0.5)
    # flat cruise: stretches >= 1.5 s where the smoothed BiF stays within ±5 % of its mean
    i0, i1 = int(np.searchsorted(p.t, t0)), int(np.searchsorted(p.t, t1))
    x = p.smooth[i0:i1]
    w = round(1.5 / p.dt)
    flats = 0.0
    if len(x) > w:
        win = sliding_window_view(x, w)[:: max(1, w // 10)]
        m = win.mean(axis=1)
        rng = (win.max(axis=1) - win.min(axis=1)) / np.maximum(m, 1e-9)
        # windows touching a loss recovery do not count: BiF there is pinned by the receive window
        ok = sliding_window_view(a.keep[i0:i1], w)[:: max(1, w // 10)].all(axis=1)
        flats = float(np.mean((rng < 0.1) & (m > 0.4) & ok))
    score = float(0.6 * frac + 0.4 * min(1.0, flats / 0.3))
    return Finding(
        "bbr3",
        score,
        {
            "probe_rtt_dips": [d.to_dict() for d in dips[:12]],
            "probe_rtt_period_s": per,
            "probe_rtt_matched": [hit, teeth],
            "flat_cruise_share": flats,
        },
        f"{len(dips)} half-depth dips, {hit} of {teeth} expected ProbeRTTs on a {per:.1f} s comb; "
        f"{flats:.0%} of congestion avoidance in flat ≥1.5 s cruise",
    )


DETECTORS = (detect_bbr1, detect_bbr3)


def run_detectors(a: TraceAnalysis) -> list[Finding]:
    return [d(a) for d in DETECTORS]
