"""Trace -> features: the stages of the bytes-in-flight method (METHOD.md §3, thesis §6.2.4).

1. `prepare`: resample BiF onto a uniform grid, in units of the path's bandwidth-delay product
   (so profiles A and B and any Internet RTT are on one scale), and low-pass it at 1/RTT.
2. `find_slow_start_end`: where congestion avoidance begins.
3. `segment`: cut congestion avoidance at back-offs (loss recoveries and sharp drops).
4. `fit_segment`: normalise a segment to [0, 1] x [0, 1], sample 200 points, fit degree 1..3
   polynomials and pick the degree by MSE + λ·degree·Σ|coeffs|.
5. `trace_features`: one explainable vector per trace (segment shapes plus back-off ratio,
   growth per RTT, level against the BDP, loss rate, periodicity).

Everything is plain numpy and deterministic.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ccscope.profile import first_rate_bps
from ccscope.trace import Trace

DT = 0.01  # the coarsest grid step (s); a trace's own step is finer on short paths (grid_step)
MIN_DT = 0.002
N_SAMPLES = 200  # points per normalised segment (as the thesis)
POLY_LAMBDA = 1e-4  # penalty weight; see fit_segment
MIN_SEGMENT_RTTS = 4.0  # shorter stretches carry no shape
MIN_CA_RTTS = 20.0  # congestion avoidance shorter than this is "too short"
# A window of fewer segments than this moves in steps of a whole segment per round trip at most:
# AIMD, cubic and delay-based growth all look alike, whatever the controller.
MIN_WINDOW_SEGMENTS = 5.0
DEFAULT_MSS = 48  # the standard profiles' MTU 100 minus IP/TCP headers and timestamps


class InsufficientData(Exception):
    """The trace cannot carry a verdict; the message is the reason shown to people."""


@dataclass
class Prepared:
    """A trace on a uniform grid, BiF in BDPs, plus what was learnt while preparing it."""

    t: np.ndarray  # seconds, uniform step dt
    raw: np.ndarray  # the window series / BDP, step-interpolated: the pipe where SACK tells it, else BiF
    pipe: np.ndarray  # pipe estimate / BDP (BiF less segments held out of order)
    smooth: np.ndarray  # raw, low-passed at 1/RTT
    rtt: float  # seconds: the path's base RTT
    bdp: float  # bytes
    mss: float  # bytes
    retransmits: np.ndarray  # times (s) of retransmissions
    profile: str | None
    packets: int
    rate_bps: float
    goodput_bps: float
    notes: list[str] = field(default_factory=list)
    cache: dict[Any, Any] = field(default_factory=dict)  # intermediate results shared by detectors
    sack: bool = False  # the trace knows SACKed bytes: raw and pipe are the measured pipe
    dt: float = DT  # the grid step (s)
    rate_source: str = "profile"  # where rate_bps came from: "profile" or "trace"


def _path_numbers(tr: Trace) -> tuple[float, float, float, float, str, list[str]]:
    """RTT (s), BDP (bytes), MSS (bytes), bottleneck rate (payload bit/s) and where the rate
    came from ("profile" or "trace"), read in the trace's own units: the profile when the trace
    carries one, else what the capture itself shows (its largest segment, the rate its ACKs
    advanced at, the RTT of its handshake and ACKs)."""
    notes: list[str] = []
    prof = tr.profile or {}
    rtt_ms = tr.base_rtt_ms
    if not rtt_ms or rtt_ms <= 0:
        rtt_ms = float(prof.get("base_rtt_ms") or 0.0) + float(tr.internet_rtt_ms or 0.0)
    if not rtt_ms or rtt_ms <= 0:
        raise InsufficientData("the trace shows no round-trip time (no handshake, no ACK timing, no profile)")
    mtu = prof.get("mtu")
    seen_mss = tr.extra.get("mss")
    if isinstance(seen_mss, int | float) and seen_mss > 0:
        mss = float(seen_mss)
    elif isinstance(mtu, int | float) and mtu > 60:
        mss = float(mtu) - 52.0
    else:
        mss = float(DEFAULT_MSS)
        notes.append(f"segment size unknown: assumed {DEFAULT_MSS} bytes")
    rate = None
    try:
        rate = first_rate_bps(str((prof.get("down") or {}).get("rate", "")) or "inf")
    except Exception:
        rate = None
    source = "profile"
    if rate is not None and isinstance(mtu, int | float) and mtu > 60:
        # BiF counts payload bytes while the link carries whole packets (at MTU 100, 48 payload
        # bytes in every 100): rates and BDPs here are in payload bytes, so a window that just
        # fills the pipe is 1 BDP
        rate *= min(1.0, mss / float(mtu))
    if rate is None:
        source = "trace"
        seen = tr.extra.get("delivery_rate_bps")
        dur = tr.duration
        goodput = 8.0 * tr.bytes_acked / dur if dur > 0 and tr.bytes_acked > 0 else 0.0
        if isinstance(seen, int | float) and seen > 0:
            # a saturating download is ACK-clocked at the bottleneck rate
            rate = max(float(seen), goodput)
        elif goodput > 0:
            rate = goodput
        else:
            raise InsufficientData("no bottleneck rate in the profile and none readable from the trace")
        notes.append(f"no bottleneck rate in the trace's profile: read {rate / 1e3:.0f} kbit/s from its ACKs")
    bdp = rate / 8.0 * rtt_ms / 1000.0
    return rtt_ms / 1000.0, bdp, mss, rate, source, notes


def lowpass(x: np.ndarray, dt: float, cutoff_hz: float) -> np.ndarray:
    """FFT low-pass: drop what varies faster than the cut-off (thesis: 1/RTT).

    A Gaussian roll-off instead of a brick wall, so sharp back-offs do not ring; the series is
    mirrored first so the ends do not wrap around into each other.
    """
    if len(x) < 4:
        return x.copy()
    # mirror a few cut-off periods at each end (the filter's reach), then pad to a power of
    # two: FFT lengths with large prime factors are slow
    m = min(len(x) - 1, max(8, int(5.0 / (cutoff_hz * dt))))
    ext = np.concatenate([x[m:0:-1], x, x[-2 : -m - 2 : -1]])
    n = 1 << (len(ext) - 1).bit_length()
    ext = np.pad(ext, (0, n - len(ext)), mode="edge")
    spec = np.fft.rfft(ext)
    f = np.fft.rfftfreq(n, dt)
    # gain 0.5 at the cut-off, ~1 well below it
    spec *= np.exp(-math.log(2.0) * (f / cutoff_hz) ** 2)
    y = np.fft.irfft(spec, n=n)
    return y[m : m + len(x)]


def pipe_estimate(
    t: np.ndarray, bif: np.ndarray, dupacks: np.ndarray, mss: float, at: np.ndarray | None = None
) -> np.ndarray:
    """Bytes actually in the network: BiF minus the segments the receiver holds out of order.

    Without SACK the sender keeps sending new data on duplicate ACKs while the cumulative ACK
    waits at the first hole, so max_seq - max_ack keeps growing through a recovery although
    the pipe does not (METHOD §1: "correct for retransmissions and dup-ACKs"). Every duplicate
    ACK is one more segment held by the receiver; an ACK that advances by A bytes while
    segments are held releases A/MSS - 1 of them (the one is the retransmitted hole).

    `at`: indices into t/bif to return the estimate at (default: every packet)."""
    idx = np.arange(len(bif)) if at is None else at
    if len(bif) < 2 or len(dupacks) == 0:
        return bif[idx].astype(np.float64)
    d = np.diff(bif, prepend=bif[0]).astype(np.float64)
    adv = np.nonzero(d < 0)[0]
    dup = np.sort(dupacks)
    # BiF at each duplicate ACK caps what the receiver can hold: after a timeout the sender
    # resends segments the receiver already has and their duplicate ACKs hold nothing new
    cap_dup = bif[np.clip(np.searchsorted(t, dup, side="right") - 1, 0, len(bif) - 1)] / mss
    ev_t = np.concatenate([dup, t[adv]])
    ev_v = np.concatenate([np.ones(len(dup)), d[adv] / mss])
    ev_cap = np.concatenate([cap_dup, bif[adv] / mss])
    order = np.argsort(ev_t, kind="stable")
    ev_t, ev_v, ev_cap = ev_t[order], ev_v[order], ev_cap[order]
    held = _held_segments(ev_v, ev_cap)
    j = np.searchsorted(ev_t, t[idx], side="right") - 1
    h_at = np.where(j >= 0, held[np.clip(j, 0, None)], 0.0)
    return np.maximum(bif[idx] - h_at * mss, 0.0)


def _held_segments(v: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Segments held by the receiver after each event: h = min(cap, max(0, h + a)) with a = +1
    for a duplicate ACK and A/MSS - 1 (never above 0) for an ACK advancing A bytes.

    Without the cap this is Lindley's recursion, h_k = S_k - min(0, min_{j<=k} S_j) over the
    cumulative sum S: one vectorised pass. Where the cap binds (after a timeout), the pass
    restarts from the capped value; past a few restarts a plain loop finishes the series."""
    a = np.where(v > 0, 1.0, np.minimum(v + 1.0, 0.0))
    out = np.empty(len(a))
    k, h0, restarts = 0, 0.0, 0
    while k < len(a):
        if restarts > 8:  # the cap binds often (timeouts): finish with a plain loop
            h, rest = h0, []
            for ai, ci in zip(a[k:].tolist(), cap[k:].tolist(), strict=True):
                h += ai
                if h < 0.0:
                    h = 0.0
                if h > ci:
                    h = ci
                rest.append(h)
            out[k:] = rest
            return out
        s = h0 + np.cumsum(a[k:])
        h = s - np.minimum(np.minimum.accumulate(s), 0.0)
        over = np.nonzero(h > cap[k:])[0]
        if len(over) == 0:
            out[k:] = h
            return out
        m = int(over[0])
        out[k : k + m] = h[:m]
        h0 = out[k + m] = float(cap[k + m])
        k += m + 1
        restarts += 1
    return out


def grid_step(rtt: float) -> float:
    """The grid step for a path of base RTT `rtt` (s): at most DT, and at least five points per
    round trip, so the 1/RTT low-pass and the RTT/4 one of the detectors stay below Nyquist on
    short paths (an imported capture at 15 ms one way)."""
    return float(min(DT, max(MIN_DT, rtt / 5.0)))


def prepare(tr: Trace) -> Prepared:
    if len(tr.t) < 2:
        raise InsufficientData("the trace is empty")
    rtt, bdp, mss, rate, rate_source, notes = _path_numbers(tr)
    t0, t1 = float(tr.t[0]), float(tr.t[-1])
    if t1 - t0 < 10 * rtt:
        raise InsufficientData(f"the trace lasts {t1 - t0:.2f} s, under 10 round trips")
    dt = grid_step(rtt)
    grid = np.arange(t0, t1, dt)
    # BiF holds its value until the next packet: "previous" interpolation
    idx = np.searchsorted(tr.t, grid, side="right") - 1
    dup = np.asarray(tr.events.get("dupack", []), dtype=np.float64)
    ii = np.clip(idx, 0, len(tr.bif) - 1)
    sack = "sacked" in tr.columns
    if not sack and not (tr.profile or {}).get("sack"):
        # the shipped model learnt from SACK profiles; a SACK-less trace (the published profiles,
        # an imported CSV) spends much longer in loss recovery, which it has not seen
        notes.append(
            "the trace carries no SACK information (SACK off, or an imported capture): the model "
            "was trained on the standard SACK profiles, so loss-based verdicts are less certain"
        )
    if sack:
        # With SACK the capture knows what the receiver holds above a hole: BiF less those bytes
        # is the pipe (checked against the server's TCP_INFO in the lab), and it is the window
        # even inside a recovery, where BiF itself jumps with every SACKed segment.
        raw = tr.pipe[ii].astype(np.float64) / bdp
        pipe = raw
    else:
        raw = tr.bif[ii].astype(np.float64) / bdp
        pipe = pipe_estimate(tr.t, tr.bif, dup, mss, at=ii) / bdp
    smooth = lowpass(raw, dt, 1.0 / rtt)
    retx = np.asarray(tr.events.get("retransmit", []), dtype=np.float64)
    pk = tr.extra.get("packets")
    packets = int(pk) if isinstance(pk, int | float) else len(tr.t)
    prof = (tr.profile or {}).get("name")
    goodput = 8.0 * tr.bytes_acked / (t1 - t0)
    return Prepared(
        grid - t0,
        raw,
        pipe,
        smooth,
        rtt,
        bdp,
        mss,
        retx - t0,
        prof,
        packets,
        rate,
        goodput,
        notes,
        sack=sack,
        dt=dt,
        rate_source=rate_source,
    )


@dataclass
class Backoff:
    start: float  # s: the drop begins (the peak)
    end: float  # s: the drop's trough (recovery over)
    peak: float  # BiF/BDP before
    trough: float  # BiF/BDP after
    cause: str  # "loss" (a retransmission cluster) or "drop" (a sharp fall without loss)


def _loss_clusters(retx: np.ndarray, gap: float) -> list[tuple[float, float]]:
    """Retransmissions closer than `gap` belong to one recovery episode."""
    if len(retx) == 0:
        return []
    r = np.sort(retx)
    out = []
    s = p = float(r[0])
    for x in r[1:]:
        if x - p > gap:
            out.append((s, p))
            s = float(x)
        p = float(x)
    out.append((s, p))
    return out


def find_backoffs(p: Prepared, drop_frac: float = 0.25) -> list[Backoff]:
    """Back-offs: every loss-recovery episode, plus sharp falls of the smoothed BiF by more than
    `drop_frac` of its level within 3 RTT (delay-based and rate-based senders back off without
    loss; BBR's ProbeRTT is such a fall)."""
    rtt, s, t = p.rtt, p.smooth, p.t
    out: list[Backoff] = []
    # Slow start's first flights leave idle gaps that look like falls: nothing counts before the
    # window first fills the pipe.
    filled = np.nonzero(s >= 1.0)[0]
    t_fill = float(t[filled[0]]) if len(filled) else float(t[-1])
    # One recovery retransmits one hole per RTT, and RTTs then include a full 2xBDP queue (3x
    # the base RTT): gaps up to 4 base RTTs still belong to one episode.
    for a, b in _loss_clusters(p.retransmits[p.retransmits >= t_fill - rtt], 4.0 * rtt):
        i0 = int(np.clip(np.searchsorted(t, a - rtt), 0, len(t) - 1))
        i1 = int(np.clip(np.searchsorted(t, b + rtt), 0, len(t) - 1))
        # the trough: the lowest level within 3 RTT after recovery ends
        i2 = int(np.clip(np.searchsorted(t, b + 4 * rtt), i1 + 1, len(t)))
        j = i1 + int(np.argmin(s[i1:i2])) if i2 > i1 else i1
        # the window at the loss: the level just before the first retransmission (after it,
        # BiF grows with every new segment sent on duplicate ACKs and says nothing of cwnd)
        ia = int(np.clip(np.searchsorted(t, a), i0 + 1, len(t)))
        pk = float(np.max(s[i0:ia]))
        out.append(Backoff(t[i0], t[j], pk, float(s[j]), "loss"))
    # sharp falls: compare with the running maximum over the last 3 RTT (vectorised: only the
    # few points that qualify are visited one by one)
    w = max(1, round(3 * rtt / p.dt))
    start = max(w, int(np.searchsorted(t, t_fill)))
    covered = [(b.start - rtt, b.end + rtt) for b in out]
    if len(s) > start:
        runmax = np.empty(len(s))
        runmax[w:] = sliding_window_view(s, w)[:-1].max(axis=1)
        runmax[:w] = np.inf
        cand = np.nonzero((runmax > 0.4) & (s < (1 - drop_frac) * runmax))[0]
        cand = cand[cand >= start]
        rises = np.nonzero(np.diff(s) > 0)[0]  # s[k + 1] > s[k]
        nxt = 0
        for i in cand:
            if i < nxt:
                continue
            lo = i - w
            k = lo + int(np.argmax(s[lo:i]))
            # follow the fall to its trough: the first point after i where the series rises
            r = int(np.searchsorted(rises, i))
            j = int(rises[r]) if r < len(rises) else len(s) - 1
            if not any(a <= t[k] <= b for a, b in covered):
                out.append(Backoff(float(t[k]), float(t[j]), float(s[k]), float(s[j]), "drop"))
            nxt = j + w
    out.sort(key=lambda b: b.start)
    return out


def find_slow_start_end(p: Prepared, backoffs: list[Backoff]) -> float:
    """Slow start ends with the first back-off; a sender that never backs off (delay-based,
    paced) left it where the smoothed BiF stopped growing by more than 10 % per RTT."""
    s, rtt = p.smooth, p.rtt
    first = backoffs[0].end if backoffs else float(p.t[-1])
    lag = max(1, round(rtt / p.dt))
    for i in range(lag, len(s)):
        if p.t[i] >= first:
            break
        if s[i] > 1.0 and s[i] < 1.1 * s[i - lag]:
            # growth stalled without a back-off: a delay- or rate-based exit (Vegas, BBR)
            return float(p.t[i])
    # Growth below 20 % over 3 RTT without ever filling the pipe (CDG, LP back off on delay
    # below the BDP) also ends it, before any loss: on a long lossy path such a sender's first
    # back-off may be a random loss a minute in, and everything before it is not slow start.
    for i in range(3 * lag, len(s) - 2 * lag):
        if p.t[i] >= first:
            break
        if s[i] > 0.2 and s[i + 2 * lag] < 1.2 * s[i - lag]:
            return float(p.t[i])
    return first


def find_tail_start(p: Prepared) -> float:
    """The download's end drains the window: drop the final fall to zero."""
    s = p.smooth
    lvl = float(np.median(s[len(s) // 2 :])) if len(s) else 0.0
    above = np.nonzero(s > 0.5 * lvl)[0]
    end = float(p.t[above[-1]]) if len(above) else float(p.t[-1])
    return max(float(p.t[0]), end - 2 * p.rtt)


def find_plateaus(ps: np.ndarray, t: np.ndarray, rtt: float, t0: float, t1: float) -> list[float]:
    """Levels of the flat stretches (>= 4 RTT within ±4 %) of the smoothed pipe, in time order,
    merged when neighbours sit at the same level. In a recovery the pipe holds ssthresh, so the
    sequence of plateaus is the sequence of reduced windows."""
    return [lvl for _, lvl in plateau_starts(ps, t, rtt, t0, t1)]


def plateau_starts(
    ps: np.ndarray, t: np.ndarray, rtt: float, t0: float, t1: float
) -> list[tuple[int, float]]:
    """`find_plateaus` with the grid index where each plateau begins."""
    i0, i1 = int(np.searchsorted(t, t0)), int(np.searchsorted(t, t1))
    dt = float(t[1] - t[0]) if len(t) > 1 else DT
    w = max(4, round(4 * rtt / dt))
    x = ps[i0:i1]
    if len(x) <= w:
        return []
    win = sliding_window_view(x, w)[::2]
    m = win.mean(axis=1)
    flat = ((win.max(axis=1) - win.min(axis=1)) < 0.08 * np.maximum(m, 1e-9)) & (m > 0.6)
    out: list[tuple[int, float]] = []
    # only where a flat stretch begins (the previous window was not flat) can a plateau start
    rising = np.nonzero(flat & ~np.concatenate([[False], flat[:-1]]))[0]
    for k, lvl in zip(rising.tolist(), m[rising].tolist(), strict=True):
        if not (out and abs(lvl - out[-1][1]) < 0.04 * out[-1][1]):
            out.append((i0 + 2 * k, lvl))
    return out


def first_loss_beta(p: Prepared, ps: np.ndarray, backoffs: list[Backoff]) -> float:
    """β at the first loss (slow start's end for a loss-based sender), from the smoothed pipe:
    the first plateau within 15 RTT of the loss is ssthresh (the pipe holds it through the
    recovery), the pipe's peak before it the window when the loss was detected (raw BiF keeps
    growing through a recovery without SACK). NaN without a loss or a plateau after it."""
    first = next((b for b in backoffs if b.cause == "loss"), None)
    if first is None:
        return math.nan
    pl = plateau_starts(ps, p.t, p.rtt, first.start, first.start + 15 * p.rtt)
    if not pl:
        return math.nan
    i0 = int(np.searchsorted(p.t, first.start - 2 * p.rtt))
    peak = float(ps[i0 : pl[0][0] + 1].max())
    return min(pl[0][1] / max(peak, 1e-9), 1.5)


@dataclass
class Segment:
    start: float
    end: float
    cause_before: str  # what ended the previous segment
    beta: float | None  # trough / peak of the back-off that opened it
    degree: int = 0
    coeffs: list[float] = field(default_factory=list)  # highest power first, of the chosen degree
    coeffs3: list[float] = field(default_factory=list)  # the cubic fit, always (a fixed-length feature)
    mse: float = 0.0
    growth: float = 0.0  # MSS per RTT over the segment's first half
    rise: float = 0.0  # (end level - start level) in BDPs
    level: float = 0.0  # mean BiF/BDP

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_s": self.start,
            "end_s": self.end,
            "after": self.cause_before,
            "beta": self.beta,
            "degree": self.degree,
            "coeffs": self.coeffs,
            "growth_mss_per_rtt": self.growth,
            "rise_bdp": self.rise,
            "level_bdp": self.level,
        }


_US = np.linspace(0.0, 1.0, N_SAMPLES)
# Least squares on the fixed grid, once: the pseudo-inverse of each degree's Vandermonde matrix
# (what np.polyfit solves for every call), so a fit is one matrix product.
_VANDER = {d: np.vander(_US, d + 1) for d in (1, 2, 3)}
_PINV = {d: np.linalg.pinv(v) for d, v in _VANDER.items()}


def fit_segment(x: np.ndarray, lam: float = POLY_LAMBDA) -> tuple[int, list[float], list[float], float]:
    """Normalise to [0,1] in both axes, sample N_SAMPLES points, fit degrees 1..3 and choose by
    MSE + λ·degree·Σ|coeffs| (the thesis' penalised error; Σ|.| rather than Σ because signed
    coefficients would let a wild fit cancel itself out). On [0,1]-normalised data the MSEs are
    ~1e-3 while Σ|coeffs| is 1-15, so the thesis' λ=0.7 and the public code's 0.02-0.09 pick
    degree 1 for nearly every shape; λ=1e-4 recovers line, parabola and cubic (tested).
    Returns (degree, coeffs of that degree, cubic coeffs, its MSE)."""
    u = np.linspace(0.0, 1.0, len(x))
    y = np.interp(_US, u, x)
    lo, hi = float(y.min()), float(y.max())
    y = (y - lo) / (hi - lo) if hi - lo > 1e-12 else np.zeros_like(y)
    best: tuple[float, int, list[float], float] | None = None
    c3: list[float] = []
    for d in (1, 2, 3):
        c = _PINV[d] @ y
        r = _VANDER[d] @ c - y
        mse = float(r @ r) / N_SAMPLES
        err = mse + lam * d * float(np.abs(c[:-1]).sum())
        if d == 3:
            c3 = [float(v) for v in c]
        if best is None or err < best[0] - 1e-12:
            best = (err, d, [float(v) for v in c], mse)
    assert best is not None
    return best[1], best[2], c3, best[3]


def _slope(t: np.ndarray, x: np.ndarray) -> float:
    """Least-squares slope of x over t (a degree-1 fit without np.polyfit's overhead)."""
    tc = t - t.mean()
    den = float(tc @ tc)
    return float(tc @ (x - x.mean())) / den if den > 0 else 0.0


def segment(p: Prepared, backoffs: list[Backoff], ca_start: float, ca_end: float) -> list[Segment]:
    """The stretches between back-offs inside congestion avoidance, each fitted."""
    bounds: list[tuple[float, float, str, float | None]] = []
    cur, cause, beta = ca_start, "slow start", None
    for b in backoffs:
        if b.end <= ca_start:
            continue
        if b.start > ca_end:
            break
        bounds.append((cur, b.start, cause, beta))
        cur, cause = b.end, b.cause
        beta = b.trough / b.peak if b.peak > 0 else None
    bounds.append((cur, ca_end, cause, beta))
    segs = []
    rtt = p.rtt
    for a, b, c, be in bounds:
        if b - a < MIN_SEGMENT_RTTS * rtt:
            continue
        i0, i1 = int(np.searchsorted(p.t, a)), int(np.searchsorted(p.t, b))
        x = p.smooth[i0:i1]
        if len(x) < 8:
            continue
        deg, co, c3, mse = fit_segment(x)
        half = max(2, len(x) // 2)
        slope = _slope(p.t[i0 : i0 + half], x[:half])  # BDP per second
        growth = slope * p.bdp / p.mss * rtt  # MSS per RTT: AIMD increase is counted in segments
        segs.append(Segment(a, b, c, be, deg, co, c3, mse, growth, float(x[-1] - x[0]), float(np.mean(x))))
    return segs


def periodicity(
    x: np.ndarray, rtt: float, lo_rtts: float, hi_rtts: float, dt: float = DT
) -> tuple[float, float]:
    """Strongest period (in RTTs) within [lo, hi] of the detrended series and the share of the
    band's variance it holds: BBRv1's 8-RTT gain cycle shows as a sharp line near 8."""
    if len(x) < 16:
        return 0.0, 0.0
    # detrend with a moving average 3x longer than the longest period of interest
    w = max(3, round(3 * hi_rtts * rtt / dt))
    c = np.cumsum(np.concatenate([[0.0], np.pad(x, (w // 2, w - 1 - w // 2), mode="edge")]))
    trend = (c[w:] - c[:-w]) / w  # moving average via a cumulative sum: O(n), not O(n·w)
    y = (x - trend) * np.hanning(len(x))
    spec = np.abs(np.fft.rfft(y)) ** 2
    f = np.fft.rfftfreq(len(y), dt)
    with np.errstate(divide="ignore"):
        period = np.where(f > 0, 1.0 / np.maximum(f, 1e-12) / rtt, np.inf)
    band = (period >= lo_rtts) & (period <= hi_rtts)
    if not band.any() or spec[band].sum() <= 0:
        return 0.0, 0.0
    # wider context: everything slower than one RTT
    ctx = (period >= 1.0) & (period <= 4 * hi_rtts)
    j = int(np.argmax(np.where(band, spec, -1)))
    # power in a small neighbourhood of the peak
    near = band & (np.abs(np.arange(len(spec)) - j) <= 1)
    share = float(spec[near].sum() / max(spec[ctx].sum(), 1e-18))
    return float(period[j]), share


@dataclass
class Pulses:
    """Excursions of the window well above its median level (bandwidth probes of BBR, the crest
    of a loss-based sawtooth), described by their typical shape."""

    count: int
    rise: float  # of the excursions lasting >= 3 RTT: share of their time spent climbing (10-90 %)
    top: float  # ... and share spent within 10 % of the peak (a flat top: an in-flight bound held)
    gain: float  # peak / median level, over all excursions
    slope: float  # median rate of their rises, in BDP per RTT (a paced probe: its gain - 1)


def find_pulses(p: Prepared, t0: float, t1: float, thr: float = 0.15) -> Pulses:
    """Runs of the lightly smoothed window (RTT/4, so one-RTT probes survive) above (1 + thr)
    times the median of [t0, t1]. BBRv1 probes for one RTT at 1.25x; BBRv3 climbs for several
    RTT to its in-flight bound and falls back at once (a triangle); a higher probe gain reaches
    the bound sooner and holds it (a trapezoid). Shapes are shares of each excursion's duration,
    so they do not scale with the RTT; medians over the trace.

    The rise rate is the one figure a probe's pacing gain g sets alone: sending at g times the
    bottleneck rate while ACKs return at 1x, in-flight data grows by (g - 1) BDP per RTT (BBR's
    1.25: 0.25; BBRv3 with gain 1.5: 0.5). An in-flight bound, the cwnd or a loss can only slow a rise, so
    the rate is an upper bound's witness. Measured from the last local minimum before the
    excursion (up to 3 RTT back) over 10-90 % of the climb; rates under MIN_RISE (a window drifting
    against its bound) or over MAX_RISE (no ProbeBW gain does that: the jump at a recovery's end
    or the refill after ProbeRTT) are left out."""
    i0, i1 = int(np.searchsorted(p.t, t0)), int(np.searchsorted(p.t, t1))
    nan = math.nan
    if i1 - i0 < 16:
        return Pulses(0, nan, nan, nan, nan)
    x = lowpass(p.raw[i0:i1], p.dt, 4.0 / p.rtt)
    m = float(np.median(x))
    if m <= 0:
        return Pulses(0, nan, nan, nan, nan)
    above = x > m * (1.0 + thr)
    edges = np.diff(np.concatenate([[0], above.astype(np.int8), [0]]))
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    rise, top, gain, slope = [], [], [], []
    n = 0
    back = int(3.0 * p.rtt / p.dt)
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        if (b - a) * p.dt < 0.5 * p.rtt:
            continue  # a blip, not a probe
        n += 1
        k = a + int(np.argmax(x[a:b]))
        h = x[k] - m
        gain.append(float(x[k] / m))
        s = _rise_rate(x, a, k, back) * p.rtt / p.dt
        if MIN_RISE < s < MAX_RISE:
            slope.append(s)
        if (b - a) * p.dt < 3.0 * p.rtt:
            continue  # too short to have a shape beyond its height
        r10 = int(np.nonzero(x[a : k + 1] >= m + 0.1 * h)[0][0])
        r90 = int(np.nonzero(x[a : k + 1] >= m + 0.9 * h)[0][0])
        rise.append((r90 - r10) / (b - a))
        top.append(float(np.mean(x[a:b] >= m + 0.9 * h)))
    return Pulses(
        n,
        float(np.median(rise)) if rise else nan,
        float(np.median(top)) if top else nan,
        float(np.median(gain)) if gain else nan,
        float(np.median(slope)) if slope else nan,
    )


MIN_RISE, MAX_RISE = 0.05, 1.2  # BDP per RTT (find_pulses)


def _rise_rate(x: np.ndarray, a: int, k: int, back: int) -> float:
    """Rate (per grid step) of the climb to x[k] that crossed into an excursion at a: from the
    last local minimum before a (at most `back` steps back), over 10-90 % of the climb."""
    a0 = a
    while a0 > max(0, a - back) and x[a0 - 1] < x[a0]:
        a0 -= 1
    h = float(x[k] - x[a0])
    if k - a0 < 2 or h <= 0:
        return math.nan
    c = x[a0 : k + 1]
    r10 = int(np.argmax(c >= x[a0] + 0.1 * h))
    r90 = int(np.argmax(c >= x[a0] + 0.9 * h))
    return float(c[r90] - c[r10]) / max(r90 - r10, 1)


# The feature vector: names, in order. Every entry is explainable on its own.
FEATURES = (
    "beta",  # median trough/peak of loss back-offs (Reno 0.5, CUBIC 0.7, BIC 0.8, Scalable 0.875)
    "beta_spread",  # IQR of the above: fixed-β AIMD vs adaptive (HTCP, Illinois, Westwood)
    "growth",  # median increase in MSS per RTT after a back-off (Reno 1, Hybla rho^2, ...)
    "log_seg_rtts",  # log of median segment length in RTTs (the back-off period)
    "backoffs_per_100rtt",
    "loss_per_100pkt",  # retransmissions per 100 packets
    "level",  # log median pipe (BiF less held segments) in BDPs after slow start (Vegas ~1.1)
    "level_p10",
    "level_p90",
    "cv",  # coefficient of variation of the pipe after slow start
    "deg_mean",  # mean chosen polynomial degree
    "c3_a",  # median cubic coefficients of the normalised segments
    "c3_b",
    "c3_c",
    "curv",  # median (mid-point level - chord) of the normalised segments: concave > 0
    "drops_per_100rtt",  # back-offs without loss (delay/rate-based)
    "p8_share",  # spectral share of the 6-10 RTT band's peak (BBRv1 gain cycle)
    "flat_frac",  # share of CA time with |d BiF/dt| < 4 % BDP per RTT (BBR cruise, Vegas)
    "ss_rtts",  # log of slow start's length in RTTs
    "recovery_frac",  # share of CA time spent recovering losses (without SACK: one hole per RTT)
    "log_retx_per_episode",  # losses per recovery episode: how far the sender overshot
    "utilisation",  # goodput / bottleneck rate over the whole transfer
    "beta_pipe",  # pipe held during a recovery / window at the loss: ssthresh/W (PRR holds it)
    "plateau",  # that pipe level in BDPs
    "ss_peak",  # log highest smoothed BiF of slow start, in BDPs (how far it overshot)
    "plateau_ratio",  # successive flat pipe levels: each loss follows a recovery's end, so = β
    "first_plateau",  # first flat pipe level / slow-start peak: β after slow start
    "plateaus_per_100rtt",
    "pipe_collapse",  # share of time dup-ACKs outnumber the data outstanding: sends through loss
    "seg_share",  # share of congestion avoidance in clean segments (not recovering)
    "beta_ss",  # first pipe plateau / highest smoothed pipe before it: ssthresh/W at slow start's
    # loss (Reno, HTCP, Westwood 0.5; HighSpeed 0.6 at these windows; Illinois 0.68; CUBIC 0.7;
    # BIC 0.8; Scalable 0.875; Hybla ~0.95)
    "queue_pkts",  # standing queue in segments, late in the transfer: pipe - BDP (Vegas 2-4)
    "pulses_per_100rtt",  # excursions above 1.15x the median level (BBR bandwidth probes)
    "pulse_rise",  # share of a >= 3 RTT excursion spent climbing (BBRv3's triangles: most of it)
    "pulse_top",  # share spent within 10 % of its peak (a flat top: an in-flight bound held)
    "pulse_gain",  # their median peak / median level (BBRv1 ProbeBW ~1.25)
    # the queue a delay-based sender settles on (Vegas alpha..beta segments): the 90th percentile
    # of pipe - BDP over the last 60 % of congestion avoidance (settled_queue), NaN where the pipe
    # never rose above the BDP (random loss kept the window below it: no target to read)
    "queue_eq",
    # the median rate at which those excursions climb, in BDP per RTT: a paced probe's gain - 1
    # (BBR ProbeBW_UP 1.25: 0.25); NaN without a climb between MIN_RISE and MAX_RISE
    "probe_slope",
    # how fast the window climbs back in the first EARLY_RTTS after a back-off, segments per RTT
    # (median over segments): BIC's binary search jumps (W_max - W)/4 per RTT, CUBIC's curve
    # starts steep, Reno adds 1, Illinois's alpha (0.3-10) follows the queueing delay the
    # back-off leaves
    "early_growth",
    # the largest queue held for CREST_RTTS round trips over the last 60 % of congestion
    # avoidance, in segments (held_crest): Vegas shrinks its window once more than beta (4)
    # segments are queued, so it holds no more, even where random loss cuts it before it settles
    "queue_crest",
    # the path in the trace's own units: log base RTT (ms), log BDP in segments, SACK seen (1/0)
    "ctx_rtt",
    "ctx_bdp_pkts",
    "ctx_sack",
    # log of the largest window the trace shows, in segments (low-passed pipe): below their
    # thresholds HighSpeed, BIC and Illinois are Reno by specification (classifier/identical.py)
    "ctx_wmax_pkts",
)


@dataclass
class TraceAnalysis:
    prepared: Prepared
    backoffs: list[Backoff]
    ss_end: float
    ca_end: float
    segments: list[Segment]
    features: dict[str, float]  # name -> value, one per FEATURES name (NaN: not measurable here)
    keep: np.ndarray  # grid points outside loss recovery

    def evidence(self) -> dict[str, Any]:
        p = self.prepared
        return {
            "profile": p.profile,
            "rtt_ms": p.rtt * 1000.0,
            "bdp_bytes": p.bdp,
            "slow_start_end_s": self.ss_end,
            "congestion_avoidance_s": [self.ss_end, self.ca_end],
            "backoffs": len(self.backoffs),
            "retransmissions": len(p.retransmits),
            "segments": [s.to_dict() for s in self.segments[:12]],
            "features": dict(self.features),
            "notes": p.notes,
        }


EARLY_RTTS = 2


def early_growth(p: Prepared, ps: np.ndarray, segs: list[Segment]) -> float:
    """The pipe's climb over the first EARLY_RTTS round trips of each segment (from the end of
    the back-off that opened it), in segments per RTT; the median over segments long enough."""
    k = max(1, round(p.rtt / p.dt))
    out = []
    for sg in segs:
        i0, i1 = int(np.searchsorted(p.t, sg.start)), int(np.searchsorted(p.t, sg.end))
        if i1 - i0 > EARLY_RTTS * k:
            out.append(float(ps[i0 + EARLY_RTTS * k] - ps[i0]) / EARLY_RTTS * p.bdp / p.mss)
    return _median(out, math.nan)


def _median(xs: list[float], default: float) -> float:
    return float(np.median(xs)) if xs else default


# A queue drifting by more than this many segments over the window has not settled: Vegas
# draining slow start's queue at one segment per round trip (on a long path that outlasts the
# download) shows where it is passing, not its target.
SETTLE_SEGMENTS = 6.0
# ... unless it stays near one queue most of the time: a sender at its target that a loss cut
# and that climbed back (light random loss on a long path) drifts by the trend test, yet spends
# SETTLE_SHARE of the window within SETTLE_BAND segments of its most visited queue.
SETTLE_SHARE = 0.5
SETTLE_BAND = 1.5


def settled_queue(pipe: np.ndarray, bdp_segments: float) -> float:
    """The queue a delay-based sender settles on, in segments, from `pipe` (late congestion
    avoidance, in BDPs): the 90th percentile of pipe - BDP where a linear trend moves it by at
    most SETTLE_SEGMENTS over the window; else, where the window spends SETTLE_SHARE of its
    time within SETTLE_BAND segments of its most visited queue (one-segment bins), the 90th
    percentile of that time. NaN where neither holds (it still drifts) or where the queue is
    none (random loss kept the window under the BDP: no target to read)."""
    if len(pipe) < 2:
        return math.nan
    q = (pipe - 1.0) * bdp_segments
    x = np.linspace(0.0, 1.0, len(q))
    drift = float(np.polyfit(x, q, 1)[0])  # the trend's change over the whole window
    if abs(drift) <= SETTLE_SEGMENTS:
        v = float(np.percentile(q, 90))
    else:
        bins, counts = np.unique(np.floor(q), return_counts=True)
        mode = float(bins[int(np.argmax(counts))]) + 0.5
        near = q[np.abs(q - mode) <= SETTLE_BAND]
        v = float(np.percentile(near, 90)) if len(near) >= SETTLE_SHARE * len(q) else math.nan
    return _queue_reading(v)


def _queue_reading(v: float) -> float:
    """A queue read in segments, capped; NaN where it is none (the pipe under the BDP: no
    target to read) or unreadable."""
    return min(v, 400.0) if v > 0 else math.nan


CREST_RTTS = 2
# A queue falling by this much per round trip, over DRAIN_RTTS, is draining, not held: Vegas
# empties slow start's queue by about half a segment per round trip (Vegas α 6 at 110 ms, profile
# B: 83 -> 53 segments over 22 s), and on a long path that lasts into the window read.
DRAIN_SEGMENTS_PER_RTT = 0.25
DRAIN_RTTS = 4


def held_crest(pipe: np.ndarray, bdp_segments: float, rtt_steps: int) -> float:
    """The largest queue `pipe` (in BDPs, one value per grid step; `rtt_steps` per round trip)
    holds for CREST_RTTS round trips, in segments: the maximum over the window of the minimum
    over each CREST_RTTS round trips in a row, read from where the queue first stops draining
    (falls by under DRAIN_SEGMENTS_PER_RTT per round trip over DRAIN_RTTS). NaN where the
    window is shorter, never stops draining, or the pipe never held above the BDP (no queue:
    nothing to read)."""
    r = max(1, rtt_steps)
    q = (pipe - 1.0) * bdp_segments
    w = DRAIN_RTTS * r
    if len(q) <= w:
        return math.nan
    settled = np.nonzero(q[w:] - q[:-w] > -DRAIN_RTTS * DRAIN_SEGMENTS_PER_RTT)[0]
    if not len(settled):
        return math.nan
    q = q[int(settled[0]) :]
    steps = CREST_RTTS * r
    if len(q) < steps:
        return math.nan
    return _queue_reading(float(np.max(sliding_window_view(q, steps).min(axis=1))))


def slow_start_only_reason(p: Prepared) -> str:
    """Why no congestion avoidance was found. Back-offs count only once the window has filled
    the profile's BDP (before that, slow start's idle gaps look like falls). A window held far
    below it by losses, as cross traffic on a shared link upstream of the profile does, is
    therefore not slow start: say so rather than name a phase the sender left long ago."""
    peak = float(np.max(p.smooth)) if len(p.smooth) else 0.0
    if peak < 1.0 and len(p.retransmits):
        episodes = len(_loss_clusters(p.retransmits, 4.0 * p.rtt))
        return (
            f"the window never reached this profile's BDP (at most {peak:.2f} of it) but lost "
            f"packets {episodes} time{'s' if episodes != 1 else ''}: a bottleneck other than the "
            "profile's (a shared or upstream link) held it, and back-offs are read only against "
            "the profile's BDP"
        )
    if peak < 1.0:
        # QUIC traces carry no loss events (the packets are encrypted), so the cause stays open
        return (
            f"the window never reached this profile's BDP (at most {peak:.2f} of it), and "
            "back-offs are read only against it: either slow start never ended, or something "
            "other than the profile (a shared or upstream link, a receive window) held the window"
        )
    return "the trace holds slow start only"


def analyse(tr: Trace) -> TraceAnalysis:
    """All stages for one trace. Raises InsufficientData with a reason."""
    p = prepare(tr)
    rtt = p.rtt
    backoffs = find_backoffs(p)
    ss_end = find_slow_start_end(p, backoffs)
    ca_end = find_tail_start(p)
    ca_len = ca_end - ss_end
    # Nothing (or one segment) outstanding much of the time: the application, not the CCA, sets
    # the pace (no CCA, not even LP, idles a saturating download). Checked from the 4th RTT on,
    # before anything else, since such a trace also never leaves "slow start".
    j0, j1 = int(np.searchsorted(p.t, 4 * rtt)), int(np.searchsorted(p.t, ca_end))
    idle = float(np.mean(p.raw[j0:j1] * p.bdp < 1.5 * p.mss)) if j1 > j0 else 0.0
    if idle > 0.3:
        raise InsufficientData(f"application-limited: at most one segment in flight {idle:.0%} of the time")
    if ss_end >= p.t[-1] - rtt or ca_len <= 0:
        raise InsufficientData(slow_start_only_reason(p))
    if ca_len < MIN_CA_RTTS * rtt:
        raise InsufficientData(
            f"only {ca_len / rtt:.0f} round trips after slow start (need {MIN_CA_RTTS:.0f})"
        )
    i0, i1 = int(np.searchsorted(p.t, ss_end)), int(np.searchsorted(p.t, ca_end))
    ca_all = p.smooth[i0:i1]
    # Levels come from outside loss recoveries: without SACK the sender keeps sending new data
    # on duplicate ACKs while the cumulative ACK is stuck, so BiF there is no window at all.
    keep = np.ones(len(p.t), dtype=bool)
    for b in backoffs:
        if b.cause == "loss":
            keep[int(np.searchsorted(p.t, b.start)) : int(np.searchsorted(p.t, b.end))] = False
    ca = p.smooth[i0:i1][keep[i0:i1]]
    if len(ca) < MIN_SEGMENT_RTTS * rtt / p.dt:
        ca = ca_all  # (almost) always recovering: BBRv1 in a small buffer
    # Levels from the pipe estimate: unlike raw BiF it is a window even inside a recovery.
    ps = lowpass(p.pipe, p.dt, 1.0 / rtt)
    pca = ps[i0:i1]
    peak_segments = float(np.percentile(pca, 95)) * p.bdp / p.mss
    if peak_segments < MIN_WINDOW_SEGMENTS:
        raise InsufficientData(
            f"the window held at most {peak_segments:.1f} segments after slow start (BDP "
            f"{p.bdp / p.mss:.1f} segments): too few to show how a congestion controller grows it"
        )
    level = float(np.median(pca))
    plats = find_plateaus(ps, p.t, rtt, ss_end, ca_end)
    beta_ss = first_loss_beta(p, ps, backoffs)
    plat_ratios = [min(b / a, 1.5) for a, b in itertools.pairwise(plats) if a > 0.2]
    collapse = float(np.mean((p.pipe[i0:i1] < 0.2) & (p.raw[i0:i1] > 1.0)))
    segs = segment(p, backoffs, ss_end, ca_end)
    ca_backoffs = [b for b in backoffs if ss_end < b.start < ca_end]
    betas = [b.trough / b.peak for b in ca_backoffs if b.cause == "loss" and b.peak > 0]
    growth = [s.growth for s in segs]
    seg_rtts = [(s.end - s.start) / rtt for s in segs]
    c3 = np.array([s.coeffs3 for s in segs]) if segs else np.zeros((0, 4))
    curv = []
    for s in segs:
        j0, j1 = int(np.searchsorted(p.t, s.start)), int(np.searchsorted(p.t, s.end))
        x = p.smooth[j0:j1]
        lo, hi = float(x.min()), float(x.max())
        if hi - lo > 1e-9:
            xn = (x - lo) / (hi - lo)
            curv.append(float(xn[len(xn) // 2] - 0.5 * (xn[0] + xn[-1])))
    n_rtt = ca_len / rtt
    retx_ca = int(np.sum((p.retransmits >= ss_end) & (p.retransmits <= ca_end)))
    pk_ca = max(1.0, p.packets * ca_len / max(float(p.t[-1]), 1e-9))
    d = np.gradient(ca, p.dt) * rtt if len(ca) > 1 else np.zeros(1)  # BDP per RTT
    # the BBRv1 detector reads the same spectrum of the same stretch: computed once
    p.cache[("period", i0, i1)] = per8 = periodicity(ca_all, rtt, 6.0, 10.5, p.dt)
    p8 = per8[1]
    # ssthresh from the pipe: 2-4 RTT into each recovery the pipe sits at the reduced window
    beta_pipe, plateau = [], []
    for b in [x for x in backoffs if x.cause == "loss"]:
        j0, j1 = int(np.searchsorted(p.t, b.start + 3 * rtt)), int(np.searchsorted(p.t, b.start + 5 * rtt))
        if j1 > j0 and b.peak > 0.4:
            lvl = float(np.median(p.pipe[j0:j1]))
            plateau.append(lvl)
            beta_pipe.append(min(lvl / b.peak, 1.5))
    episode_retx = [
        float(np.sum((p.retransmits >= b.start) & (p.retransmits <= b.end)))
        for b in ca_backoffs
        if b.cause == "loss"
    ]
    q = np.percentile(betas, [25, 75]) if betas else np.array([0.0, 0.0])
    pulses = find_pulses(p, ss_end, ca_end)
    # over the last 40 % of congestion avoidance: a delay-based sender may take 10 s and more to
    # drain slow start's queue down to its target
    late = float(np.median(pca[int(0.6 * len(pca)) :])) if len(pca) else level
    queue = float(np.clip((late - 1.0) * p.bdp / p.mss, -100.0, 400.0))
    pca_late = pca[int(0.4 * len(pca)) :]
    q_eq = settled_queue(pca_late, p.bdp / p.mss)
    q_crest = held_crest(pca_late, p.bdp / p.mss, round(rtt / p.dt))
    nan = math.nan  # "not measurable in this trace": the classifier marginalises it out
    ss_peak = float(np.max(p.smooth[: max(1, i0)]))
    seg_time = sum(sg.end - sg.start for sg in segs)
    f: dict[str, float] = {
        "beta": _median(betas, nan),
        "beta_spread": float(q[1] - q[0]) if len(betas) >= 2 else nan,
        "growth": _median(growth, nan),
        "log_seg_rtts": math.log(max(_median(seg_rtts, nan), 1.0)) if seg_rtts else nan,
        "backoffs_per_100rtt": 100.0 * len([b for b in ca_backoffs if b.cause == "loss"]) / n_rtt,
        "loss_per_100pkt": 100.0 * retx_ca / pk_ca,
        "level": math.log(max(level, 0.01)),
        "level_p10": math.log(max(float(np.percentile(pca, 10)), 0.01)),
        "level_p90": math.log(max(float(np.percentile(pca, 90)), 0.01)),
        "cv": min(float(np.std(pca) / max(level, 1e-9)), 3.0),
        "deg_mean": _median([float(s.degree) for s in segs], nan),
        "c3_a": float(np.median(c3[:, 0])) if len(c3) else nan,
        "c3_b": float(np.median(c3[:, 1])) if len(c3) else nan,
        "c3_c": float(np.median(c3[:, 2])) if len(c3) else nan,
        "curv": _median(curv, nan),
        "drops_per_100rtt": 100.0 * len([b for b in ca_backoffs if b.cause == "drop"]) / n_rtt,
        "p8_share": p8,
        "flat_frac": float(np.mean(np.abs(d) < 0.04)),
        "ss_rtts": math.log(max((ss_end - float(p.t[0])) / rtt, 1.0)),
        "recovery_frac": 1.0 - float(np.mean(keep[i0:i1])) if i1 > i0 else 0.0,
        "log_retx_per_episode": math.log1p(_median(episode_retx, 0.0)),
        "utilisation": min(p.goodput_bps / p.rate_bps, 2.0) if p.rate_bps > 0 else 0.0,
        "beta_pipe": _median(beta_pipe, nan),
        "plateau": _median(plateau, nan),
        "ss_peak": math.log(max(ss_peak, 0.01)),
        "plateau_ratio": _median(plat_ratios, nan),
        "first_plateau": min(plats[0] / max(ss_peak, 1e-9), 1.5) if plats else nan,
        "plateaus_per_100rtt": float(len(plats)) * 100.0 / n_rtt,
        "pipe_collapse": collapse,
        "seg_share": min(seg_time / max(ca_len, 1e-9), 1.0),
        "beta_ss": beta_ss,
        "queue_pkts": queue,
        "pulses_per_100rtt": 100.0 * pulses.count / n_rtt,
        "pulse_rise": pulses.rise,
        "pulse_top": pulses.top,
        "pulse_gain": pulses.gain,
        "queue_eq": q_eq,
        "probe_slope": pulses.slope,
        "early_growth": early_growth(p, ps, segs),
        "queue_crest": q_crest,
        # the path itself, in the trace's own units: a CCA's shape depends on it (a window of
        # 6 segments cannot show a cubic curve), so the model reads each shape beside its path
        "ctx_rtt": math.log(rtt * 1000.0),
        "ctx_bdp_pkts": math.log(max(p.bdp / p.mss, 0.1)),
        "ctx_sack": 1.0 if p.sack else 0.0,
        "ctx_wmax_pkts": math.log(max(float(np.max(ps)) * p.bdp / p.mss, 0.1)),
    }
    return TraceAnalysis(p, backoffs, ss_end, ca_end, segs, {k: float(v) for k, v in f.items()}, keep)
