"""The checks: for each CCA, a path that forces its defining behaviour, downloads through it
and rows comparing what the ground truth shows with the specification."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ccscope.errors import LabError
from ccscope.lab.registry import lab_cca
from ccscope.lab.validate.client import Ctx, Flow
from ccscope.lab.validate.series import (
    CA_OPEN,
    Event,
    LinkPath,
    Row,
    Series,
    ca_epochs,
    ca_events,
    fit_cubic,
    med,
    missing_row,
    per_round,
    reductions,
    slope,
)

# --- the checks -------------------------------------------------------------------------------

# Paths, each chosen to force one behaviour (RTTs include the lab's own 2 x 1 ms).
P_DROPTAIL = LinkPath(10, 30, 20)  # BDP 35 segments + 30 queued: regular overflow losses
P_SHALLOW = LinkPath(10, 8, 20)  # queue << BDP: the pipe-size / RTT-ratio decreases stand out
P_MID = LinkPath(10, 15, 20)  # maxRTT/minRTT ~ 1.45: H-TCP's adaptive beta mid-range
P_FAT = LinkPath(20, 100, 50)  # BDP 170 segments: windows of 170-270 for high-speed laws
P_LONG = LinkPath(10, 60, 100)  # RTT 202 ms: CUBIC's cubic region (not the Reno-friendly one)
P_YEAH = LinkPath(10, 8, 50)  # queueing delay < BaseRTT/8: YeAH's fast mode
P_ILLINOIS = LinkPath(10, 30, 50)  # the queue empties after each loss
P_HYBLA = LinkPath(10, 40, 25)  # RTT 52 ms: rho ~ 2
P_RANDOM = LinkPath(10, 200, 100, loss=0.002)  # window << BDP, so every loss is a random one
P_DEEP = LinkPath(10, 100, 20)  # room for a standing queue: delay-based holding
# At 4 Mbit/s one queued segment adds 3 ms: well above the ~1 ms of host scheduling noise on
# RTT samples, so a delay-based CCA's few-segment queue is resolved.
P_DEEP_SLOW = LinkPath(4, 100, 20)
P_BBR = LinkPath(10, 50, 20)

BETA = {
    "reno": 0.5,
    "cubic": 0.7,
    "cc-cubic": 0.7,
    "bic": 0.8,
    "scalable": 0.875,
    "hybla": 0.5,
    "veno": 0.5,
    "nv": 0.8,
    "dctcp": 0.5,
}
BETA_TOL = 0.05


def _median_row(
    cca: str, label: str, values: list[float], expected: float, note: str, *, missing: str,
    tol: float = BETA_TOL,
) -> Row:  # fmt: skip
    """The median of `values` against `expected`, or, without values, a row saying why."""
    if not values:
        return missing_row(cca, label, expected, tol, missing)
    return Row(cca, label, med(values), expected, tol, n=len(values), note=note)


def _beta_rows(
    s: Series, cca: str, expected: float, *, label: str = "beta (ssthresh/cwnd at loss)", note: str = ""
) -> list[Row]:
    betas = [e.beta for e in ca_events(s, ("recovery", "loss"))]
    why = note or f"median of {len(betas)} losses, {s.path.describe()}"
    return [_median_row(cca, label, betas, expected, why,
                        missing=f"no congestion-avoidance loss ({s.path.describe()})")]  # fmt: skip


def check_beta(ctx: Ctx, cca: str, *, seconds: float = 8.0) -> list[Row]:
    s = ctx.one(cca, P_DROPTAIL, seconds, tag="beta")
    rows = _beta_rows(s, cca, BETA[cca])
    if cca == "reno":
        rows += _growth_rows(s, cca, 1.0, 0.15, "growth per RTT in CA (segments)")
    return rows


def _growth_rows(
    s: Series,
    cca: str,
    expected: float,
    tol: float,
    label: str,
    *,
    relative: bool = False,
    min_cwnd: float = 0.0,
) -> list[Row]:
    """Slope of cwnd (or ln cwnd) against elapsed round trips over each CA epoch."""
    r = s.rounds()
    slopes = []
    for i0, i1, _ in ca_epochs(s):
        sel = np.arange(i0, i1)
        sel = sel[s.cwnd[sel] >= min_cwnd]
        if len(sel) < 10 or r[sel[-1]] - r[sel[0]] < 3:
            continue
        y = np.log(s.cwnd[sel]) if relative else s.cwnd[sel]
        slopes.append(slope(r[sel], y))
    if not slopes:
        return [missing_row(cca, label, expected, tol, "no usable congestion-avoidance epoch")]
    return [
        Row(
            cca,
            label,
            med(slopes),
            expected,
            tol,
            n=len(slopes),
            note=f"median over {len(slopes)} epochs, {s.path.describe()}",
        )
    ]


def check_cubic_curve(ctx: Ctx, cca: str) -> list[Row]:
    """Fit W(t) = C (t - K)^3 + W_max to each epoch; K is predicted from the loss that opened
    it: K = cbrt((W_max - cwnd_0) / C), W_max = cwnd at loss, or (1 + beta)/2 of it when the
    window shrank since the previous loss (fast convergence)."""
    s = ctx.one(cca, P_LONG, 16.0, tag="cubic")
    beta, c_spec = 0.7, 0.4
    cs, ks, kexp, rms = [], [], [], []
    last_max = 0.0
    evs = reductions(s)
    epochs = {e.i: (i0, i1) for i0, i1, e in ca_epochs(s)}
    for e in evs:
        if e.kind == "loss":
            last_max = 0.0  # an RTO resets CUBIC's history
        if e.kind not in ("recovery", "loss"):
            continue
        w = e.cwnd_before
        w_max = w * (1 + beta) / 2 if w < last_max else w
        last_max = w_max
        if e.i not in epochs or e.slow_start:
            continue
        i0, i1 = epochs[e.i]
        if s.cwnd[i0] >= w_max:
            continue
        k_e = math.cbrt((w_max - s.cwnd[i0]) / c_spec)
        t = s.t[i0:i1] - s.t[i0]
        # The fit needs the plateau: an epoch cut short by a loss before W_max cannot tell
        # C from K (both only scale the concave part).
        if t[-1] < 0.9 * k_e or s.cwnd[i1 - 1] < w_max - 2:
            continue
        c, k, _wo, res = fit_cubic(t, s.cwnd[i0:i1])
        if not math.isfinite(c):
            continue
        cs.append(c)
        ks.append(k)
        kexp.append(k_e)
        rms.append(res)
    if not cs:
        return [
            missing_row(cca, "C (cubic fit)", c_spec, 0.1, "no CA epoch after a loss"),
            missing_row(cca, "K (s, cubic fit)", math.nan, 0.0, "no CA epoch after a loss"),
        ]
    note = f"{len(cs)} epochs, {s.path.describe()}, fit rms {med(rms):.2f} segments"
    k_exp = med(kexp)
    return [
        Row(cca, "C (cubic fit, segments/s^3)", med(cs), c_spec, 0.1, n=len(cs), note=note),
        Row(
            cca,
            "K (s, cubic fit)",
            med(ks),
            k_exp,
            0.15 * k_exp + 0.1,
            n=len(ks),
            note=note + "; expected K = cbrt((W_max - cwnd_0)/C)",
        ),
    ]


def check_scalable_fat(ctx: Ctx) -> list[Row]:
    s = ctx.one("scalable", P_FAT, 10.0, tag="mimd")
    return _growth_rows(
        s, "scalable", 0.01, 0.003, "growth per RTT / cwnd (MIMD, cwnd >= 100)", relative=True, min_cwnd=100
    ) + _beta_rows(s, "scalable", 0.875, label="beta at cwnd >= 100 (ssthresh/cwnd)")


# HighSpeed TCP, RFC 3649: b(w) falls log-linearly from 0.5 at W_low = 38 to 0.1 at
# W_high = 83000; a(w) = w^2 p(w) 2 b(w) / (2 - b(w)) with p(w) = 0.078 / w^1.2.
def hs_b(w: float) -> float:
    if w <= 38:
        return 0.5
    return 0.5 + (0.1 - 0.5) * (math.log(w) - math.log(38)) / (math.log(83000) - math.log(38))


def hs_a(w: float) -> float:
    """The table's a(w): the largest whole number of segments per RTT the RFC's a(w) reached."""
    if w <= 38:
        return 1.0
    b = hs_b(w)
    return float(max(1, math.floor(w * w * (0.078 / w**1.2) * 2 * b / (2 - b))))


def check_highspeed(ctx: Ctx) -> list[Row]:
    s = ctx.one("highspeed", P_FAT, 14.0, tag="hstcp")
    rows = []
    growth, expect = [], []
    for i0, i1, _ in ca_epochs(s):
        for rd in per_round(s, i0, i1):
            if rd["cwnd"] > 38:
                growth.append(rd["growth"])
                expect.append(hs_a(rd["cwnd"]))
    if growth:
        # Per-round growth is an integer step process: compare mean growth with mean a(w).
        w_mid = med([float(x) for x in s.cwnd[s.cwnd > 38]])
        rows.append(
            Row(
                "highspeed",
                f"a(w) segments per RTT (w ~ {w_mid:.0f})",
                float(np.mean(growth)),
                float(np.mean(expect)),
                0.25 * float(np.mean(expect)),
                n=len(growth),
                note=f"mean over {len(growth)} rounds vs RFC 3649 table a(w); {s.path.describe()}",
            )
        )
    else:
        rows.append(
            missing_row("highspeed", "a(w) segments per RTT", math.nan, 0.0, "no CA round above W_low")
        )
    evs = [e for e in ca_events(s, ("recovery", "loss")) if e.cwnd_before > 38]
    w = f" (w ~ {med([e.cwnd_before for e in evs]):.0f})" if evs else ""
    rows.append(
        _median_row(
            "highspeed", f"beta = 1 - b(w){w}", [e.beta for e in evs],
            med([1 - hs_b(e.cwnd_before) for e in evs]) if evs else 0.6,
            f"{len(evs)} losses; RFC 3649 b(w); {s.path.describe()}", missing="no loss above W_low",
        )
    )  # fmt: skip
    return rows


def max_rtt_bounds(s: Series, i: int) -> tuple[float, float]:
    """Bounds on the largest RTT *sample* seen while Open before sample i, which RTT-ratio CCAs
    (H-TCP's maxRTT, Illinois' d_m) key on but TCP_INFO does not report: the largest srtt (too
    low: srtt moves 1/8 of the way to each sample) and the largest sample srtt's steps imply
    (srtt + 7 x its change over one 1 ms tick: exact when one ACK came in that tick, too high
    when several did). On a busy host a scheduling stall adds tens of ms to a few samples, so
    the two can lie far apart."""
    open_ = s.ca_state[:i] == CA_OPEN
    if not np.any(open_):
        return float(s.srtt[i]), float(s.srtt[i])
    srtt = s.srtt[:i]
    implied = srtt + 7 * np.diff(srtt, prepend=srtt[0])
    return float(np.max(srtt[open_])), float(max(np.max(implied[open_]), np.max(srtt[open_])))


def _band(pairs: Sequence[tuple[float, float]], slack: float) -> tuple[float, float]:
    """(expected, tolerance) for a quantity known to lie in [lo, hi] per event: the median
    band's middle, and its half-width plus the measurement slack."""
    lo, hi = med([a for a, _ in pairs]), med([b for _, b in pairs])
    return (lo + hi) / 2, (hi - lo) / 2 + slack


def _htcp_expected(s: Series, evs: list[Event]) -> list[float]:
    """The draft's beta at each backoff: 0.5 when the throughput at this congestion event
    differs by more than 20% from the previous one (the bandwidth switch), else
    minRTT / maxRTT clamped to [0.5, 0.8], maxRTT being the largest srtt seen while Open (as
    Linux keeps it). Throughput = median delivery rate over the two RTTs before the event."""
    out = []
    prev_b = None
    for e in evs:
        lo = np.searchsorted(s.t, e.t - 2 * float(s.srtt[e.i]))
        b = float(np.median(s.delivery[lo : e.i])) if e.i > lo else float(s.delivery[e.i])
        open_ = s.ca_state[: e.i] == CA_OPEN
        max_rtt = float(np.max(s.srtt[: e.i][open_])) if np.any(open_) else float(s.srtt[e.i])
        ratio = min(max(float(s.min_rtt[e.i]) / max_rtt, 0.5), 0.8)
        switch = prev_b is not None and abs(b - prev_b) > 0.2 * prev_b
        out.append(0.5 if switch or prev_b is None else ratio)
        prev_b = b
    return out


def check_htcp(ctx: Ctx, *, both: bool = True) -> list[Row]:
    rows = []
    for path, tag in ((P_MID, "htcp-mid"), (P_SHALLOW, "htcp-shallow"))[: 2 if both else 1]:
        s = ctx.one("htcp", path, 10.0, tag=tag)
        evs = [e for e in reductions(s) if e.kind in ("recovery", "loss")]
        exp = _htcp_expected(s, evs)
        # Compare where the RTT ratio rules; the bandwidth-switch backoffs get their own row.
        pairs = [(e, x) for e, x in zip(evs, exp, strict=True) if not e.slow_start]
        ratio = [(e.beta, x) for e, x in pairs if x > 0.5]
        switch = [e.beta for e, x in pairs if x == 0.5]
        # The RTT rule's beta is a band: minRTT over the two bounds on the largest RTT sample.
        band = []
        for e, x in pairs:
            if x > 0.5:
                lo_max, hi_max = max_rtt_bounds(s, e.i)
                mn = float(s.min_rtt[e.i])
                band.append((min(max(mn / hi_max, 0.5), 0.8), min(max(mn / lo_max, 0.5), 0.8)))
        label = f"beta = RTTmin/RTTmax in [0.5,0.8] ({path.buffer_pkts}p queue)"
        if ratio:
            rows.append(
                Row(
                    "htcp",
                    label,
                    med([b for b, _ in ratio]),
                    *_band(band, 0.05),
                    n=len(ratio),
                    note=f"{len(ratio)} backoffs under the RTT rule, {len(switch)} after "
                    f">20% throughput changes; maxRTT between the largest srtt and the largest "
                    f"sample srtt implies; {path.describe()}",
                )
            )
        else:
            rows.append(
                missing_row(
                    "htcp",
                    label,
                    0.65,
                    0.08,
                    f"every backoff followed a throughput change "
                    f"({len(switch)}): no RTT-rule backoff to compare",
                )
            )
        if switch and path is P_MID:
            rows.append(
                Row(
                    "htcp",
                    "beta after a >20% throughput change",
                    med(switch),
                    0.5,
                    BETA_TOL,
                    n=len(switch),
                    note="the bandwidth switch",
                )
            )
    return rows


def check_westwood(ctx: Ctx) -> list[Row]:
    """After a loss Westwood+ sets ssthresh (and, once recovered, cwnd) to BWE x RTTmin."""
    s = ctx.one("westwood", P_SHALLOW, 8.0, tag="westwood")
    evs = ca_events(s, ("recovery",))
    if not evs:
        return [missing_row("westwood", "ssthresh / (BWE x RTTmin)", 1.0, 0.15, "no CA loss")]
    ratios, betas, pipes = [], [], []
    for e in evs:
        lo = np.searchsorted(s.t, e.t - 4 * float(s.srtt[e.i]))
        bwe = float(np.median(s.delivery[lo : e.i]))
        pipe = bwe * float(s.min_rtt[e.i]) / s.mss
        ratios.append(e.ssthresh_end / pipe)
        betas.append(e.ssthresh_end / e.cwnd_before)
        pipes.append(pipe / e.cwnd_before)
    pipe_pkts = P_SHALLOW.bdp_pkts(s.mss)
    return [
        Row(
            "westwood",
            "ssthresh / (BWE x RTTmin)",
            med(ratios),
            1.0,
            0.15,
            n=len(evs),
            note=f"BWE = delivery rate before the loss; {s.path.describe()}",
        ),
        Row(
            "westwood",
            "ssthresh/cwnd at loss = pipe/cwnd",
            med(betas),
            med(pipes),
            0.08,
            n=len(evs),
            note=f"pipe = BWE x RTTmin; Reno would give 0.5 (path pipe {pipe_pkts:.0f} segments)",
        ),
    ]


def check_hybla(ctx: Ctx, *, both: bool = True) -> list[Row]:
    rows = []
    for path in (P_HYBLA, P_FAT)[: 2 if both else 1]:
        s = ctx.one("hybla", path, 8.0, tag=f"hybla{path.delay_ms:g}")
        rho = float(s.min_rtt[-1]) / 0.025
        g = _growth_rows(
            s,
            "hybla",
            rho * rho,
            0.2 * rho * rho,
            f"growth per RTT = rho^2 (RTT {s.min_rtt[-1] * 1000:.0f} ms)",
        )[0]
        g.note += f"; rho = minRTT/25 ms = {rho:.2f}"
        rows.append(g)
        if path is P_HYBLA:
            rows += _beta_rows(s, "hybla", 0.5)
    return rows


def check_veno(ctx: Ctx) -> list[Row]:
    rows = []
    s = ctx.one("veno", P_DROPTAIL, 8.0, tag="veno-cong")
    rows += _beta_rows(s, "veno", 0.5, label="beta, congestive loss (backlog N >= 3)")
    # Growth where Veno sees N >= beta: one segment every other RTT.
    growth = []
    for i0, i1, _ in ca_epochs(s):
        for rd in per_round(s, i0, i1):
            n_backlog = rd["cwnd"] * rd["qdelay"] / (rd["qdelay"] + float(np.median(s.min_rtt)))
            if n_backlog >= 4:  # a margin above beta = 3: the estimate is a smoothed one
                growth.append(rd["growth"])
    rows.append(
        Row(
            "veno",
            "growth per RTT with backlog N >= 3",
            float(np.mean(growth)) if growth else None,
            0.5,
            0.15,
            n=len(growth),
            note=f"mean over {len(growth)} rounds (Reno: 1)",
        )
    )
    s = ctx.one("veno", P_RANDOM, 10.0, tag="veno-rand")
    rows += _beta_rows(s, "veno", 0.8, label="beta, random loss (backlog N < 3)")
    return rows


def check_illinois(ctx: Ctx) -> list[Row]:
    s = ctx.one("illinois", P_ILLINOIS, 14.0, tag="illinois")
    rows = []
    evs = ca_events(s, ("recovery", "loss"))
    if evs:
        band = []
        for e in evs:
            lo = np.searchsorted(s.t, e.t - float(s.srtt[e.i]))
            base = float(s.min_rtt[e.i])
            da = float(np.mean(s.srtt[lo : e.i])) - base
            # d_m = largest RTT sample - base: a larger d_m means a smaller cut (larger beta).
            lo_max, hi_max = max_rtt_bounds(s, e.i)
            band.append((1 - illinois_b(da, lo_max - base), 1 - illinois_b(da, hi_max - base)))
        rows.append(
            Row(
                "illinois",
                "beta at loss = 1 - b(d_a/d_m)",
                med([e.beta for e in evs]),
                *_band(band, BETA_TOL),
                n=len(evs),
                note=f"{len(evs)} losses; d_m between the largest srtt and the largest RTT sample "
                f"srtt implies; {s.path.describe()}",
            )
        )
    else:
        rows.append(missing_row("illinois", "beta at loss", 0.5, BETA_TOL, "no CA loss"))
    # alpha(d_a) per round: alpha_max = 10 at d_a <= d_1 = d_m/100, falling hyperbolically to
    # alpha_min = 0.3 at d_m (d_m = largest queueing delay seen). The queueing delay is the
    # round's mean srtt - minRTT; d_m its running maximum while Open.
    qd = np.where(s.ca_state == CA_OPEN, s.srtt - s.min_rtt, 0.0)
    dmax = np.maximum.accumulate(qd)
    low, high = [], []
    for i0, i1, _ in ca_epochs(s):
        for rd in per_round(s, i0, i1):
            if rd["cwnd"] < 15:
                continue
            dm = float(dmax[np.searchsorted(s.t, rd["t"])])
            a = illinois_alpha(rd["qdelay"], dm)
            (high if rd["qdelay"] >= 0.5 * dm else low).append((rd["growth"], a))
    for name, pts in (("d_a < d_m/2", low), ("d_a >= d_m/2", high)):
        label = f"alpha = f(d_a, d_m), rounds with {name} (segments/RTT)"
        if not pts:
            rows.append(missing_row("illinois", label, math.nan, 0.0, "no such round"))
            continue
        m, e = float(np.mean([g for g, _ in pts])), float(np.mean([a for _, a in pts]))
        rows.append(
            Row(
                "illinois",
                label,
                m,
                e,
                0.3 * e + 0.2,
                n=len(pts),
                note=f"mean over {len(pts)} rounds of growth vs the spec's alpha(d_a)",
            )
        )
    return rows


def illinois_b(da: float, dm: float, bmin: float = 0.125, bmax: float = 0.5) -> float:
    """TCP-Illinois' decrease factor: bmin up to d_2 = d_m/10, bmax from d_3 = 8 d_m/10, linear
    between (paper eq. 5)."""
    d2, d3 = dm / 10, 8 * dm / 10
    if dm <= 0 or da <= d2:
        return bmin
    if da >= d3:
        return bmax
    return bmin + (bmax - bmin) * (da - d2) / (d3 - d2)


def illinois_alpha(da: float, dm: float, amax: float = 10.0, amin: float = 0.3) -> float:
    """TCP-Illinois' increase per RTT for average queueing delay da and maximum dm (paper eq. 4),
    ignoring the theta-round hold before alpha_max returns."""
    d1 = dm / 100
    if dm <= 0 or da <= d1:
        return amax
    span = dm - d1
    return span * amin * amax / (span * amin + (da - d1) * (amax - amin))


def check_yeah(ctx: Ctx) -> list[Row]:
    """Fast mode (queue < BaseRTT/8): Scalable growth (one segment per min(cwnd, 100) ACKs, so
    +1 per RTT below 100 segments) and, on loss, a cut of only the queue it built, at least
    cwnd/8 (beta = 0.875 when the queue is small). Reno would halve."""
    s = ctx.one("yeah", P_YEAH, 10.0, tag="yeah")
    rows = _growth_rows(s, "yeah", 1.0, 0.15, "fast-mode growth per RTT, cwnd < 100 (STCP floor)")
    evs = ca_events(s, ("recovery", "loss"))
    label, expected = "beta, fast mode", 0.875
    if evs:
        q = s.queue_pkts()
        label += " = 1 - max(Q, cwnd/8)/cwnd"
        expected = med([
            1 - min(max(float(q[e.i - 1]), e.cwnd_before / 8), e.cwnd_before / 2) / e.cwnd_before for e in evs
        ])  # fmt: skip
    note = f"{len(evs)} losses; {s.path.describe()}"
    rows.append(_median_row("yeah", label, [e.beta for e in evs], expected, note, missing="no CA loss"))
    return rows


def _holding(s: Series, cca: str, expected: float, tol: float, label: str) -> Row:
    """Median standing queue (cwnd - pipe) over the second half of the transfer, once slow start
    has settled; the RTT-based estimate goes in the note."""
    half = s.t >= s.duration / 2
    q = s.standing_queue()[half]
    q_rtt = float(np.median(s.queue_pkts()[half]))
    lost = int(s.retrans[-1] - s.retrans[np.argmax(half)])
    return Row(
        cca,
        label,
        float(np.median(q)),
        expected,
        tol,
        n=int(half.sum()),
        note=f"queue = cwnd - rate x minRTT ((srtt - minRTT) x rate gives {q_rtt:.1f}); {lost} "
        f"retransmissions in that half; {s.path.describe()}",
    )


def check_vegas(ctx: Ctx) -> list[Row]:
    s = ctx.one("vegas", P_DEEP_SLOW, 8.0, tag="vegas")
    # alpha = 2 .. beta = 4 segments by Vegas' own estimate, which takes each round's minimum
    # RTT: one segment of slack either side for its difference from the standing queue.
    return [_holding(s, "vegas", 3.0, 2.0, "queue held (segments), alpha=2..beta=4")]


def check_nv(ctx: Ctx) -> list[Row]:
    s = ctx.one("nv", P_DEEP_SLOW, 8.0, tag="nv")
    # NV calls cwnd > (pipe + pad) congestion: the queue stays at or below pad = 10 segments.
    return [
        _holding(s, "nv", 5.0, 6.0, "queue held (segments), 0..pad=10"),
        *_beta_rows(
            ctx.one("nv", P_SHALLOW, 8.0, tag="nv-loss"), "nv", 0.8, label="beta on loss (loss_dec_factor)"
        ),
    ]


def check_cdg(ctx: Ctx) -> list[Row]:
    s = ctx.one("cdg", P_DEEP, 10.0, tag="cdg")
    evs = reductions(s)
    delay = [e for e in evs if e.kind == "open" and not e.slow_start]
    loss = [e for e in evs if e.kind in ("recovery", "loss")]
    return [
        Row(
            "cdg",
            "delay-gradient backoff (cwnd after/before)",
            med([e.cwnd_end / e.cwnd_before for e in delay]),
            0.7,
            BETA_TOL,
            n=len(delay),
            note=f"{len(delay)} backoffs without loss",
        ),
        Row(
            "cdg",
            "share of backoffs without loss",
            len(delay) / max(1, len(delay) + len(loss)),
            1.0,
            0.3,
            n=len(delay) + len(loss),
            note=f"{s.path.describe()}; a loss-based CCA would overflow the {s.path.buffer_pkts}p queue",
        ),
        _holding(s, "cdg", 0.0, s.path.buffer_pkts / 2, "queue held (segments) < buffer/2"),
    ]


def check_lp(ctx: Ctx) -> list[Row]:
    """LP alone fills the link; once a Reno flow joins, LP yields (its share of the link).
    Utilisation is measured from 2 s on: before that LP's slow start has overflowed the
    100-packet buffer and LP waits at the floor until that queue has drained."""
    path = P_DEEP
    lp_bytes, reno_bytes, join = path.bytes_for(10.0), path.bytes_for(6.0), 6.0
    lp, reno = ctx.run([Flow("lp", lp_bytes), Flow("reno", reno_bytes, join)], path, tag="lp", timeout=150)
    off = (reno.start_ns - lp.start_ns) / 1e9
    alone = lp.throughput_bps(2.0, off - 0.2) / path.rate_bps
    t0, t1 = off + 1.0, off + reno.duration - 0.5  # both running, Reno out of slow start
    x_lp = lp.throughput_bps(t0, t1)
    x_reno = reno.throughput_bps(t0 - off, t1 - off)
    share = x_lp / max(x_lp + x_reno, 1.0)
    return [
        Row(
            "lp",
            "link share while a Reno flow competes",
            share,
            0.0,
            0.15,
            note=f"LP {x_lp / 1e6:.2f} vs Reno {x_reno / 1e6:.2f} Mbit/s over {t1 - t0:.1f} s; fair "
            "share would be 0.5",
        ),
        Row(
            "lp",
            "utilisation alone",
            alone,
            1.0,
            0.3,
            note=f"LP alone for {off:.1f} s, measured from 2 s; {path.describe()}",
        ),
    ]


_NFT_TABLE = "zooval_ce"


@contextlib.contextmanager
def ce_marker(server_addr: str, pps: float, burst: int) -> Iterator[None]:
    """Marks CE on the server's ECT(0) packets beyond `pps` with a `burst`-packet bucket: a
    virtual queue drained at the bottleneck rate, i.e. step marking once `burst` packets wait
    (the link emulator has no AQM; there is no ECN-capable qdisc in this kernel)."""
    table = f"{_NFT_TABLE}_{os.getpid()}"
    rules = (
        f"table ip {table} {{\n chain ce_marker {{\n  type filter hook forward priority -10; policy accept;\n"
        f"  ip saddr {server_addr} tcp sport {{ 80, 443 }} ip ecn ect0 limit rate over {int(pps)}/second "
        f"burst {burst} packets ip ecn set ce\n }}\n}}\n"
    )
    p = subprocess.run(["nft", "-f", "-"], input=rules, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise LabError(f"cannot install the CE marker: {p.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "ip", table], capture_output=True, check=False)


def check_dctcp(ctx: Ctx) -> list[Row]:
    path, k = P_DEEP, 20
    addr = lab_cca("dctcp").addr_in(ctx.instance)
    pps = path.rate_bps / 8 / 1500  # = the link: the virtual queue is the real one
    with ce_marker(addr, pps, k):
        # The client must ask for ECN (the namespace default, 2, only answers it).
        s = ctx.one("dctcp", path, 8.0, tag="dctcp", pre=["sysctl -qw net.ipv4.tcp_ecn=1"])
    evs = [e for e in reductions(s) if not e.slow_start]
    cwr = [e for e in evs if e.kind == "cwr"]
    loss = [e for e in evs if e.kind in ("recovery", "loss")]
    # Marking holds the queue from about K up (DCTCP's sawtooth swings above it), well below
    # the 100-segment buffer a loss-based sender fills.
    q = _holding(s, "dctcp", float(k), 1.5 * k, f"queue held (segments), CE marking at K={k}")
    q.note += (
        f"; virtual-queue CE marker at {pps:.0f} pkt/s. The queue rides above K by DCTCP's "
        "reaction lag (classic-ECN client echoing until CWR, alpha gain 1/16): the bound "
        "checked is K..buffer/2"
    )
    return [
        Row(
            "dctcp",
            "ECN reductions (CWR) / all reductions",
            len(cwr) / max(1, len(evs)),
            1.0,
            0.2,
            n=len(evs),
            note=f"{len(cwr)} CWR, {len(loss)} loss recoveries",
        ),
        Row(
            "dctcp",
            "cut per CE window = 1 - alpha/2",
            med([e.beta for e in cwr]),
            0.8,
            0.2,
            n=len(cwr),
            note="alpha adapts to the marked fraction: cuts lie in (0.5, 1), Reno's is 0.5; the "
            "client is a classic-ECN receiver (ECE held until CWR), which inflates alpha",
        ),
        q,
    ]


@dataclass(frozen=True)
class BBRSpec:
    """The constants a BBR version's validation checks (gains are the specification's, the
    pacing rate also carries BBR's 1% pacing margin)."""

    version: str
    startup_gain: float
    drain_gain: float
    probe_down_gain: float
    probe_up_gain: float = 1.25
    pacing_margin: float = 0.01
    beta: float = 0.7


BBR_SPECS = {
    # draft-cardwell-iccrg-bbr-congestion-control-02 / Linux v2alpha
    "bbr2": BBRSpec("BBRv2", startup_gain=2.885, drain_gain=1 / 2.885, probe_down_gain=0.75),
    # draft-ietf-ccwg-bbr (BBRv3)
    "bbr3": BBRSpec("BBRv3", startup_gain=2.77, drain_gain=0.35, probe_down_gain=0.9),
}
P_BBR_SHALLOW = LinkPath(10, 5, 20)  # buffer 1/7 BDP: every ProbeBW_UP overflows it
P_BBR_LOSS = LinkPath(10, 200, 50, loss=0.002)  # BDP 85: one loss per round stays < 2% of inflight


def check_bbr(ctx: Ctx, cca: str) -> list[Row]:
    """Startup/Drain pacing gains; ProbeBW: pacing gain UP / DOWN / 1.0, a probe every 2-3 s;
    ProbeRTT: cwnd at half the BDP for 200 ms + one round, when the min-RTT sample is 5 s old."""
    spec = BBR_SPECS[cca]
    s = ctx.one(cca, P_BBR, 22.0, tag=cca)
    rows = _bbr_startup_rows(s, cca, spec)
    steady = s.t > 2.0
    bdp = float(np.median(s.delivery[steady])) * float(np.median(s.min_rtt[steady])) / s.mss
    # ProbeRTT episodes: cwnd at or below 0.6 BDP for a while.
    low = steady & (s.cwnd <= 0.6 * bdp)
    starts, ends = _runs(low, s.t, min_len=0.05)
    durs = [b - a for a, b in zip(starts, ends, strict=True)]
    gaps = list(np.diff(starts))
    cw = [float(np.median(s.cwnd[(s.t >= a) & (s.t <= b)])) / bdp for a, b in zip(starts, ends, strict=True)]
    # ProbeRTT comes once the min-RTT sample is 5 s old. The connection's first RTT
    # samples, and each ProbeRTT's end, start that clock; a lower RTT seen meanwhile (the
    # queue drained in ProbeBW_DOWN) restarts it, so single gaps run from 5 s to well past
    # 10 s (a 12 s gap has been seen with v2's deeper DOWN). The shortest interval, from
    # the start or from the previous ProbeRTT, is the timer itself.
    spans = [starts[0]] + [b - a for a, b in zip(ends, starts[1:], strict=False)] if starts else []
    rows.append(
        Row(
            cca,
            "ProbeRTT interval (s): shortest, from start or last ProbeRTT",
            min(spans) if spans else None,
            5.0,
            0.5,
            n=len(spans),
            note=f"{len(starts)} ProbeRTT episodes in {s.duration:.0f} s at "
            f"{', '.join(f'{a:.1f}' for a in starts)} s; gaps between starts "
            f"{', '.join(f'{g:.1f}' for g in gaps)} s",
        )
    )
    rows.append(
        Row(
            cca,
            "ProbeRTT duration (s)",
            med(durs),
            0.2 + float(np.median(s.min_rtt)),
            0.1,
            n=len(durs),
            note="200 ms + one round",
        )
    )
    rows.append(
        Row(
            cca,
            "ProbeRTT cwnd / BDP",
            med(cw),
            0.5,
            0.15,
            n=len(cw),
            note=f"BDP {bdp:.0f} segments (delivery rate x minRTT)",
        )
    )
    # ProbeBW: pacing rate relative to the cruise level (the median outside ProbeRTT).
    outside = steady & ~_mask(s.t, starts, ends, pad=0.3)
    cruise = float(np.median(s.pacing[outside]))
    g = s.pacing / cruise
    up_s, up_e = _runs(outside & (g > 1.12), s.t, min_len=0.01)
    up = [float(np.max(g[(s.t >= a) & (s.t <= b)])) for a, b in zip(up_s, up_e, strict=True)]
    down = outside & (g < 0.95) & (np.abs(g - spec.probe_down_gain) < 0.1)
    rows.append(
        Row(
            cca,
            "ProbeBW_UP pacing gain",
            med(up),
            spec.probe_up_gain,
            0.08,
            n=len(up),
            note="peak pacing rate / cruise pacing rate per probe",
        )
    )
    rows.append(
        Row(
            cca,
            "ProbeBW_DOWN pacing gain",
            float(np.median(g[down])) if down.any() else None,
            spec.probe_down_gain,
            0.05,
            n=int(down.sum()),
            note=f"{100 * down.mean():.0f}% of samples in DOWN",
        )
    )
    rows.append(
        Row(
            cca,
            "ProbeBW cycle (s between probes)",
            med(list(np.diff(up_s))),
            2.5,
            0.75,
            n=max(0, len(up_s) - 1),
            note="2 s + up to 1 s at random, or 63 rounds",
        )
    )
    return rows


def _bbr_startup_rows(s: Series, cca: str, spec: BBRSpec) -> list[Row]:
    """Startup and Drain pacing gains: pacing rate / max delivery rate so far (BBR paces at
    gain x its max-filtered bw; a single delivery-rate sample dips when the host stalls)
    once the delivery rate has reached the link's. Startup ends at the first sample paced
    below that; Drain is the stretch paced below 0.6 x it that follows."""
    ratio = s.pacing / np.maximum(np.maximum.accumulate(s.delivery), 1.0)
    full = s.delivery * 8 >= 0.9 * s.path.rate_bps
    below = np.nonzero((s.delivery > 0) & (ratio < 1.0))[0]
    end = int(below[0]) if len(below) else len(s.t)
    startup = full & (np.arange(len(s.t)) < end)
    drain = np.zeros(len(s.t), dtype=bool)
    if len(below):
        after = np.arange(len(s.t)) >= end
        back = np.nonzero(after & (ratio >= 0.9))[0]
        stop = int(back[0]) if len(back) else len(s.t)
        drain = after & (np.arange(len(s.t)) < stop) & (ratio < 0.6)
    keep = 1 - spec.pacing_margin
    return [
        Row(
            cca,
            "Startup pacing gain",
            float(np.median(ratio[startup]) / keep) if startup.any() else None,
            spec.startup_gain,
            0.1,
            n=int(startup.sum()),
            note=f"pacing / delivery rate in Startup at link rate (/ {keep:g}, BBR's pacing margin); "
            f"Startup ends at {s.t[min(end, len(s.t) - 1)]:.2f} s",
        ),
        Row(
            cca,
            "Drain pacing gain",
            float(np.median(ratio[drain]) / keep) if drain.any() else None,
            spec.drain_gain,
            0.05,
            n=int(drain.sum()),
            note="pacing / delivery rate after Startup",
        ),
    ]


def check_bbr_loss(ctx: Ctx, cca: str) -> list[Row]:
    """Loss response outside bandwidth probing. A round with loss sets inflight_lo to
    max(inflight_latest, beta x inflight_lo), inflight_lo starting from the cwnd Recovery
    began with (in flight + ACKed); inflight_latest is what the round delivered, rate x RTT
    (~1 BDP on an otherwise idle path). So after a random loss in ProbeBW cwnd comes back
    at ~rate x RTT, not at beta x cwnd (2 BDP) nor at Reno's half. A long path keeps one loss per round
    below 2% of inflight, so inflight_hi is left alone."""
    spec = BBR_SPECS[cca]
    path = P_BBR_LOSS
    s = ctx.one(cca, path, 20.0, tag=f"{cca}-loss")
    bdp = path.bdp_pkts(s.mss)
    evs = [e for e in reductions(s) if e.kind == "recovery" and not e.slow_start]
    # What a round delivers is rate x RTT (the RTT at the loss, queueing and host delay
    # included), which is the inflight_latest the spec keeps.
    after = [
        e.cwnd_end / (path.rate_bps / 8 * s.srtt[e.i] / s.pkt_bytes)
        for e in evs
        if e.cwnd_before >= 1.5 * bdp
    ]
    # Drop-tail losses come from ProbeBW_UP: inflight_hi = max(inflight when the lost packets
    # were sent, beta x BDP), i.e. the pipe plus the buffer; cwnd resumes there.
    sh = ctx.one(cca, P_BBR_SHALLOW, 12.0, tag=f"{cca}-shallow")
    room = P_BBR_SHALLOW.bdp_pkts(sh.mss) + P_BBR_SHALLOW.buffer_pkts
    hi = [e.cwnd_end / room for e in reductions(sh) if e.kind == "recovery" and not e.slow_start]
    return [
        Row(
            cca,
            "probe loss: cwnd after recovery / (BDP + buffer)",
            med(hi),
            1.0,
            0.15,
            n=len(hi),
            note=f"inflight_hi = max(inflight at the loss, {spec.beta:g} x BDP); {P_BBR_SHALLOW.describe()}",
        ),
        Row(
            cca,
            "loss outside probing: cwnd after recovery / (rate x RTT)",
            med(after),
            max(1.0, spec.beta),
            0.15,
            n=len(after),
            note=f"recoveries from cwnd >= 1.5 BDP (BDP {bdp:.0f}); inflight_lo = max(delivered "
            f"in the round, {spec.beta:g} x inflight_lo); {path.describe()}",
        ),
    ]


def _runs(mask: np.ndarray, t: np.ndarray, *, min_len: float) -> tuple[list[float], list[float]]:
    """Start and end times of the stretches where `mask` holds, at least `min_len` long."""
    m = np.concatenate([[False], mask, [False]]).astype(int)
    d = np.diff(m)
    a, b = np.nonzero(d == 1)[0], np.nonzero(d == -1)[0] - 1
    out = [(float(t[i]), float(t[j])) for i, j in zip(a, b, strict=True) if t[j] - t[i] >= min_len]
    return [x for x, _ in out], [y for _, y in out]


def _mask(t: np.ndarray, starts: Sequence[float], ends: Sequence[float], *, pad: float) -> np.ndarray:
    m = np.zeros(len(t), dtype=bool)
    for a, b in zip(starts, ends, strict=True):
        m |= (t >= a - pad) & (t <= b + pad)
    return m
