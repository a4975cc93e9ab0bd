"""Validation suite: does every lab CCA do what its specification says?

Each check downloads an object from a lab server through a client-side `ccscope-link` shell
whose link forces the CCA's defining behaviour (a drop-tail bottleneck for multiplicative
decrease, a long fat path for growth laws, a deep buffer for delay-based holding, random loss,
a competing flow, an ECN marker), then reads the server's own TCP_INFO ground truth (1 ms
samples: cwnd, ssthresh, ca_state, srtt, min_rtt, delivery and pacing rate) and compares what
it sees with the specification. Every check yields rows

    {cca, parameter, measured, expected, tolerance, pass, note}

with `pass` = |measured - expected| <= tolerance (one-sided limits are written as
expected 0 or 1 with the limit as tolerance). A second part compares the BPF CUBIC with the
kernel's under the standard profiles A and B (see `compare_cubic`).

    ccscope lab validate [--ccas reno,cubic,...] [--fast] [--json]

brings its own lab up (instance 3, /run/ccscope/lab-validate unless told otherwise), loads
the zoo CCAs it needs, and at the end takes the lab down and unloads exactly what it loaded.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ccscope.errors import CCScopeError, LabError
from ccscope.lab.groundtruth import GroundTruthRecord, find_record
from ccscope.lab.registry import lab_cca

DEFAULT_STATE_DIR = Path("/run/ccscope/lab-validate")
DEFAULT_INSTANCE = 3
LAB_DELAY_MS = 1.0  # the lab's own path: near zero, so each check's client shell sets the RTT
HEADER_BYTES = 52  # IPv4 + TCP + timestamp option: wire packet = MSS + 52
CA_OPEN, CA_DISORDER, CA_CWR, CA_RECOVERY, CA_LOSS = 0, 1, 2, 3, 4
INF_SSTHRESH = 0x7FFFFFFF


# --- the client-side link ---------------------------------------------------------------------


@dataclass(frozen=True)
class LinkPath:
    """The bottleneck in front of the client: a rate-limited drop-tail queue on the downlink,
    `delay_ms` each way, optional random loss or a dropped Nth packet; the uplink (ACKs) only
    carries the delay."""

    rate_mbit: float = 10.0
    buffer_pkts: int = 30
    delay_ms: float = 20.0
    loss: float = 0.0
    drop_nth: tuple[int, ...] = ()
    mtu: int = 1500
    seed: int = 1

    @property
    def rate_bps(self) -> float:
        return self.rate_mbit * 1e6

    @property
    def base_rtt_s(self) -> float:
        return (2 * self.delay_ms + 2 * LAB_DELAY_MS) / 1000.0

    def bdp_pkts(self, mss: int) -> float:
        return self.rate_bps / 8 * self.base_rtt_s / (mss + HEADER_BYTES)

    def bytes_for(self, seconds: float) -> int:
        """Payload the link carries in `seconds` (an object size that lasts that long)."""
        return int(self.rate_bps / 8 * seconds * 0.95)

    def link_args(self) -> list[str]:
        a = [
            "--down-rate",
            f"{self.rate_mbit:g}mbit",
            "--down-buffer",
            f"{self.buffer_pkts}p",
            "--delay",
            f"{self.delay_ms:g}",
            "--mtu",
            str(self.mtu),
            "--seed",
            str(self.seed),
        ]
        if self.loss:
            a += ["--down-loss", f"{self.loss:g}"]
        if self.drop_nth:
            a += ["--down-drop-nth", ",".join(str(n) for n in self.drop_nth)]
        return a

    def describe(self) -> str:
        s = f"{self.rate_mbit:g} Mbit/s, {self.buffer_pkts}p drop-tail, RTT {self.base_rtt_s * 1000:.0f} ms"
        if self.loss:
            s += f", loss {self.loss:g}"
        if self.drop_nth:
            s += f", drop #{','.join(map(str, self.drop_nth))}"
        return s


# --- ground truth as arrays ---------------------------------------------------------------------


@dataclass
class Series:
    """One connection's TCP_INFO samples as float arrays (times in s, windows in segments)."""

    cca: str
    run_id: str
    path: LinkPath
    t: np.ndarray
    cwnd: np.ndarray
    ssthresh: np.ndarray
    ca_state: np.ndarray
    srtt: np.ndarray  # s
    min_rtt: np.ndarray  # s (the kernel's windowed minimum)
    delivery: np.ndarray  # B/s
    pacing: np.ndarray  # B/s
    acked: np.ndarray  # bytes
    retrans: np.ndarray  # cumulative retransmitted segments
    mss: int
    start_ns: int
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_record(cls, rec: GroundTruthRecord, path: LinkPath) -> Series:
        c = rec.columns()
        if len(c["t_ns"]) < 10:
            raise LabError(f"{rec.csv_path}: only {len(c['t_ns'])} samples")
        # Samples before the first RTT measurement carry srtt 0: hold the first real value.
        rtt = c["rtt_us"].astype(float)
        rtt[rtt <= 0] = float(rtt[rtt > 0][0]) if np.any(rtt > 0) else path.base_rtt_s * 1e6
        mrtt = c["min_rtt_us"].astype(float)
        mrtt[(mrtt <= 0) | (mrtt >= 0xFFFFFFFF)] = np.nan
        mrtt = np.fmin.accumulate(np.where(np.isnan(mrtt), np.inf, mrtt))
        mrtt[~np.isfinite(mrtt)] = rtt[~np.isfinite(mrtt)]
        mss = c["snd_mss"]
        t_ns = np.maximum.accumulate(c["t_ns"])
        return cls(
            cca=str(rec.meta.get("cca")),
            run_id=str(rec.run_id),
            path=path,
            t=(t_ns - t_ns[0]) / 1e9,
            cwnd=c["snd_cwnd"].astype(float),
            ssthresh=c["snd_ssthresh"].astype(float),
            ca_state=c["ca_state"].astype(int),
            srtt=rtt / 1e6,
            min_rtt=mrtt / 1e6,
            delivery=c["delivery_rate"].astype(float),
            pacing=c["pacing_rate"].astype(float),
            acked=c["bytes_acked"].astype(float),
            retrans=c["total_retrans"].astype(float),
            mss=int(np.median(mss[mss > 0])) if np.any(mss > 0) else 1448,
            start_ns=int(t_ns[0]),
            meta=rec.meta,
        )

    @property
    def duration(self) -> float:
        return float(self.t[-1])

    @property
    def pkt_bytes(self) -> int:
        return self.mss + HEADER_BYTES

    def queue_pkts(self) -> np.ndarray:
        """Packets queued at the bottleneck, from the queueing delay (srtt - min RTT)."""
        return np.maximum(self.srtt - self.min_rtt, 0.0) * self.path.rate_bps / 8 / self.pkt_bytes

    def standing_queue(self) -> np.ndarray:
        """Segments beyond the pipe: cwnd - rate x minRTT. Needs no RTT sample, so the few ms of
        scheduling noise on ACKs do not inflate it (a cwnd-limited sender keeps cwnd in flight)."""
        pipe = self.path.rate_bps / 8 / self.pkt_bytes * self.min_rtt
        return self.cwnd - pipe

    def rounds(self) -> np.ndarray:
        """Round trips elapsed at each sample (integral of dt / srtt): the clock of per-RTT laws."""
        dt = np.diff(self.t, prepend=self.t[0])
        return np.cumsum(dt / np.maximum(self.srtt, 1e-4))

    def throughput_bps(self, t0: float, t1: float) -> float:
        i0, i1 = np.searchsorted(self.t, [t0, t1])
        i1 = min(i1, len(self.t) - 1)
        if i1 <= i0 or self.t[i1] <= self.t[i0]:
            return 0.0
        return float((self.acked[i1] - self.acked[i0]) * 8 / (self.t[i1] - self.t[i0]))


@dataclass
class Event:
    """A window reduction: `i` is the first sample in the reduced state, `i_end` the first one
    back in Open (or the same sample for a cut made in Open)."""

    i: int
    i_end: int
    t: float
    kind: str  # "cwr", "recovery", "loss" (RTO) or "open" (a cut the CCA made without a state change)
    cwnd_before: float
    ssthresh_after: float
    cwnd_end: float
    ssthresh_end: float
    slow_start: bool  # the reduction ended slow start

    @property
    def beta(self) -> float:
        return self.ssthresh_after / self.cwnd_before if self.cwnd_before else math.nan


_KIND = {CA_CWR: "cwr", CA_RECOVERY: "recovery", CA_LOSS: "loss"}


def reductions(s: Series, *, open_cut: float = 0.9) -> list[Event]:
    """Every window reduction: entries into CWR/Recovery/Loss, plus cuts of cwnd by more than
    `open_cut` made while Open (delay-based CCAs cut without changing the TCP state)."""
    ev: list[Event] = []
    n = len(s.t)
    reduced = s.ca_state >= CA_CWR
    i = 1
    while i < n:
        if reduced[i] and not reduced[i - 1]:
            j = i
            while j < n and reduced[j]:
                j += 1
            k = min(j, n - 1)
            ss_before = s.ssthresh[i - 1]
            ev.append(
                Event(
                    i=i,
                    i_end=k,
                    t=float(s.t[i]),
                    kind=_KIND[int(s.ca_state[i])],
                    cwnd_before=float(s.cwnd[i - 1]),
                    ssthresh_after=float(s.ssthresh[i]),
                    cwnd_end=float(s.cwnd[k]),
                    ssthresh_end=float(s.ssthresh[k]),
                    slow_start=bool(ss_before >= INF_SSTHRESH or s.cwnd[i - 1] < ss_before),
                )
            )
            i = j
            continue
        if (
            not reduced[i]
            and not reduced[i - 1]
            and s.cwnd[i] < open_cut * s.cwnd[i - 1]
            and s.cwnd[i - 1] >= 4
        ):
            ss_before = s.ssthresh[i - 1]
            ev.append(
                Event(
                    i=i,
                    i_end=i,
                    t=float(s.t[i]),
                    kind="open",
                    cwnd_before=float(s.cwnd[i - 1]),
                    ssthresh_after=float(s.ssthresh[i]),
                    cwnd_end=float(s.cwnd[i]),
                    ssthresh_end=float(s.ssthresh[i]),
                    slow_start=bool(ss_before >= INF_SSTHRESH or s.cwnd[i - 1] < ss_before),
                )
            )
        i += 1
    return ev


def ca_events(s: Series, kinds: Sequence[str] = ("recovery",)) -> list[Event]:
    """Reductions of the given kinds made in congestion avoidance (not the slow-start exit),
    each preceded by at least two RTTs without a reduction (a settled window)."""
    out = []
    evs = reductions(s)
    for k, e in enumerate(evs):
        if e.kind not in kinds or e.slow_start:
            continue
        prev_end = evs[k - 1].i_end if k else 0
        if k == 0 or s.t[e.i] - s.t[prev_end] < 2 * float(s.srtt[e.i]):
            continue
        out.append(e)
    return out


def ca_epochs(s: Series, *, min_rtts: float = 3.0) -> list[tuple[int, int, Event]]:
    """Congestion-avoidance stretches: from the end of one reduction to the start of the next
    (sample indices [i0, i1)), with the reduction that opened it."""
    evs = reductions(s)
    out = []
    for k, e in enumerate(evs):
        i0 = e.i_end
        i1 = evs[k + 1].i if k + 1 < len(evs) else len(s.t) - 1
        # After an RTO the window slow-starts again: the epoch begins once cwnd >= ssthresh.
        ss = np.nonzero(s.cwnd[i0:i1] >= s.ssthresh[i0:i1])[0]
        if not len(ss):
            continue
        i0 += int(ss[0])
        if i1 - i0 < 10 or s.t[i1] - s.t[i0] < min_rtts * float(np.median(s.srtt[i0:i1])):
            continue
        out.append((i0, i1, e))
    return out


def slope(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3 or float(np.ptp(x)) == 0.0:
        return math.nan
    return float(np.polyfit(x, y, 1)[0])


def per_round(s: Series, i0: int, i1: int) -> list[dict[str, float]]:
    """The epoch cut into whole round trips: growth and mean queueing delay of each."""
    r = s.rounds()
    out = []
    k0 = math.ceil(r[i0])
    while True:
        a, b = np.searchsorted(r, [k0, k0 + 1])
        if b >= i1 or a >= b:
            break
        out.append(
            {
                "t": float(s.t[a]),
                "growth": float(s.cwnd[b] - s.cwnd[a]),
                "cwnd": float(s.cwnd[a]),
                "qdelay": float(np.mean(s.srtt[a:b] - s.min_rtt[a:b])),
                "queue": float(np.mean(s.queue_pkts()[a:b])),
            }
        )
        k0 += 1
    return out


def fit_cubic(t: np.ndarray, w: np.ndarray) -> tuple[float, float, float, float]:
    """Least-squares W(t) = C (t - K)^3 + W_o: linear in (C, W_o) for a fixed K, so K is found
    by a grid search. Returns (C, K, W_o, rms residual in segments)."""
    best = (math.nan, math.nan, math.nan, math.inf)
    span = float(t[-1] - t[0])
    for k in np.linspace(float(t[0]), float(t[0]) + 1.5 * span + 1.0, 800):
        x = (t - k) ** 3
        a = np.vstack([x, np.ones_like(x)]).T
        coef, *_ = np.linalg.lstsq(a, w, rcond=None)
        if coef[0] <= 0:
            continue
        rms = float(np.sqrt(np.mean((a @ coef - w) ** 2)))
        if rms < best[3]:
            best = (float(coef[0]), float(k), float(coef[1]), rms)
    return best


# --- result rows ------------------------------------------------------------------------------


@dataclass
class Row:
    cca: str
    parameter: str
    measured: float | None
    expected: float
    tolerance: float
    passed: bool = False
    note: str = ""
    n: int = 0  # events / rounds / runs behind `measured`

    def __post_init__(self) -> None:
        m = self.measured
        ok = m is not None and math.isfinite(m)
        self.passed = bool(ok and abs(float(m) - self.expected) <= self.tolerance + 1e-9)
        if ok:
            self.measured = round(float(m), 4)
        else:
            self.measured = None
        self.expected = round(float(self.expected), 4)
        self.tolerance = round(float(self.tolerance), 4)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pass"] = d.pop("passed")
        return d


def _med(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.median(xs)) if xs else math.nan


def _missing(cca: str, parameter: str, expected: float, tol: float, why: str) -> Row:
    return Row(cca, parameter, None, expected, tol, note=why)


# --- running downloads through a client shell -----------------------------------------------


@dataclass
class Flow:
    """One download in a shell: `cca` is the lab name, started `start_s` after the shell."""

    cca: str
    nbytes: int
    start_s: float = 0.0


class Ctx:
    """A running validation lab: where its hosts file and ground truth are, and how to run a
    download through a client-side link and get the server's TCP_INFO back."""

    def __init__(self, state_dir: Path, *, log: Callable[[str], None] | None = None) -> None:
        from ccscope.capture.shell import link_binary

        self.state_dir = state_dir
        self.hosts = state_dir / "hosts"
        self.gt_dir = state_dir / "groundtruth"
        self.link = link_binary()
        self.log = log or (lambda _m: None)
        self.downloads = 0
        self.instance = DEFAULT_INSTANCE
        self.kernel_names: list[str] = []
        self.loaded_here: list[str] = []
        self._lock = threading.Lock()

    def run(
        self,
        flows: Sequence[Flow],
        path: LinkPath,
        *,
        tag: str,
        pre: Sequence[str] = (),
        timeout: float | None = None,
    ) -> list[Series]:
        """Run the flows (concurrently, each after its start delay) in one client shell behind
        `path`; returns each flow's ground truth. `pre` are shell commands run first inside the
        shell's namespace (e.g. a sysctl)."""
        ids = [f"val-{tag}-{f.cca}-{uuid.uuid4().hex[:8]}" for f in flows]
        secs = max(f.start_s + f.nbytes * 8 / path.rate_bps for f in flows)
        timeout = timeout or 3 * secs + 30
        parts = list(pre)
        for f, rid in zip(flows, ids, strict=True):
            fetch = [
                sys.executable,
                "-m",
                "ccscope.capture.fetch",
                f"http://{f.cca}.lab.test/obj/{f.nbytes}",
                "--lab",
                "--run-id",
                rid,
                "--timeout",
                f"{timeout:g}",
                "--max-bytes",
                str(f.nbytes + 1),
            ]
            parts.append(f"(sleep {f.start_s:g}; exec {shlex.join(fetch)}) &")
        parts.append("wait")
        from ccscope.capture.shell import link_argv

        # `pre` commands set sysctls of the client's namespace: they need root there.
        argv = link_argv(
            ["--quiet", "--hosts", str(self.hosts), *path.link_args()],
            ["/bin/sh", "-c", "\n".join(parts)],
            keep_root=bool(pre),
        )
        t0 = time.monotonic()
        # Clients that resolve lab names themselves must use this lab's hosts file too (the
        # shell's --hosts and $CCSCOPE_LAB_DIR agree), not whichever lab is the default.
        env = {**os.environ, "CCSCOPE_LAB_DIR": str(self.state_dir)}
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 30, check=False, env=env)
        results = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
        errors = [r.get("error") for r in results if r.get("error")]
        if p.returncode != 0 or errors or len(results) != len(flows):
            raise LabError(
                f"download {tag} failed (exit {p.returncode}): {errors or p.stderr.strip()[-400:]}"
            )
        out = []
        for rid in ids:
            rec = find_record(run_id=rid, gt_dir=self.gt_dir, wait_s=20.0)
            if rec is None:
                raise LabError(f"no ground truth for run {rid}")
            out.append(Series.from_record(rec, path))
        with self._lock:
            self.downloads += len(flows)
        self.log(
            f"  {tag}: {' + '.join(f.cca for f in flows)} over {path.describe()} "
            f"in {time.monotonic() - t0:.1f} s"
        )
        return out

    def one(self, cca: str, path: LinkPath, seconds: float, *, tag: str, pre: Sequence[str] = ()) -> Series:
        return self.run([Flow(cca, path.bytes_for(seconds))], path, tag=tag, pre=pre)[0]


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


def _beta_rows(
    s: Series, cca: str, expected: float, *, label: str = "beta (ssthresh/cwnd at loss)", note: str = ""
) -> list[Row]:
    evs = ca_events(s, ("recovery", "loss"))
    if not evs:
        return [
            _missing(cca, label, expected, BETA_TOL, f"no congestion-avoidance loss ({s.path.describe()})")
        ]
    betas = [e.beta for e in evs]
    return [
        Row(
            cca,
            label,
            _med(betas),
            expected,
            BETA_TOL,
            n=len(betas),
            note=note or f"median of {len(betas)} losses, {s.path.describe()}",
        )
    ]


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
        return [_missing(cca, label, expected, tol, "no usable congestion-avoidance epoch")]
    return [
        Row(
            cca,
            label,
            _med(slopes),
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
            _missing(cca, "C (cubic fit)", c_spec, 0.1, "no CA epoch after a loss"),
            _missing(cca, "K (s, cubic fit)", math.nan, 0.0, "no CA epoch after a loss"),
        ]
    note = f"{len(cs)} epochs, {s.path.describe()}, fit rms {_med(rms):.2f} segments"
    k_exp = _med(kexp)
    return [
        Row(cca, "C (cubic fit, segments/s^3)", _med(cs), c_spec, 0.1, n=len(cs), note=note),
        Row(
            cca,
            "K (s, cubic fit)",
            _med(ks),
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
        w_mid = _med([float(x) for x in s.cwnd[s.cwnd > 38]])
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
        rows.append(_missing("highspeed", "a(w) segments per RTT", math.nan, 0.0, "no CA round above W_low"))
    evs = [e for e in ca_events(s, ("recovery", "loss")) if e.cwnd_before > 38]
    if evs:
        exp = _med([1 - hs_b(e.cwnd_before) for e in evs])
        w = _med([e.cwnd_before for e in evs])
        rows.append(
            Row(
                "highspeed",
                f"beta = 1 - b(w) (w ~ {w:.0f})",
                _med([e.beta for e in evs]),
                exp,
                BETA_TOL,
                n=len(evs),
                note=f"{len(evs)} losses; RFC 3649 b(w); {s.path.describe()}",
            )
        )
    else:
        rows.append(_missing("highspeed", "beta = 1 - b(w)", 0.6, BETA_TOL, "no loss above W_low"))
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
    lo, hi = _med([a for a, _ in pairs]), _med([b for _, b in pairs])
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
                    _med([b for b, _ in ratio]),
                    *_band(band, 0.05),
                    n=len(ratio),
                    note=f"{len(ratio)} backoffs under the RTT rule, {len(switch)} after "
                    f">20% throughput changes; maxRTT between the largest srtt and the largest "
                    f"sample srtt implies; {path.describe()}",
                )
            )
        else:
            rows.append(
                _missing(
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
                    _med(switch),
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
        return [_missing("westwood", "ssthresh / (BWE x RTTmin)", 1.0, 0.15, "no CA loss")]
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
            _med(ratios),
            1.0,
            0.15,
            n=len(evs),
            note=f"BWE = delivery rate before the loss; {s.path.describe()}",
        ),
        Row(
            "westwood",
            "ssthresh/cwnd at loss = pipe/cwnd",
            _med(betas),
            _med(pipes),
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
                _med([e.beta for e in evs]),
                *_band(band, BETA_TOL),
                n=len(evs),
                note=f"{len(evs)} losses; d_m between the largest srtt and the largest RTT sample "
                f"srtt implies; {s.path.describe()}",
            )
        )
    else:
        rows.append(_missing("illinois", "beta at loss", 0.5, BETA_TOL, "no CA loss"))
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
            rows.append(_missing("illinois", label, math.nan, 0.0, "no such round"))
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
    if evs:
        exp = []
        for e in evs:
            q = float(s.queue_pkts()[e.i - 1])
            exp.append(1 - min(max(q, e.cwnd_before / 8), e.cwnd_before / 2) / e.cwnd_before)
        rows.append(
            Row(
                "yeah",
                "beta, fast mode = 1 - max(Q, cwnd/8)/cwnd",
                _med([e.beta for e in evs]),
                _med(exp),
                BETA_TOL,
                n=len(evs),
                note=f"{len(evs)} losses; {s.path.describe()}",
            )
        )
    else:
        rows.append(_missing("yeah", "beta, fast mode", 0.875, BETA_TOL, "no CA loss"))
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
            _med([e.cwnd_end / e.cwnd_before for e in delay]),
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
            _med([e.beta for e in cwr]),
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
            _med(durs),
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
            _med(cw),
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
            _med(up),
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
            _med(list(np.diff(up_s))),
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
            _med(hi),
            1.0,
            0.15,
            n=len(hi),
            note=f"inflight_hi = max(inflight at the loss, {spec.beta:g} x BDP); {P_BBR_SHALLOW.describe()}",
        ),
        Row(
            cca,
            "loss outside probing: cwnd after recovery / (rate x RTT)",
            _med(after),
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


# --- the suite --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    name: str
    ccas: tuple[str, ...]  # lab names the check downloads from
    fn: Callable[[Ctx], list[Row]]
    fast: bool = False  # part of the quick subset the tests run


# Longest first, so the worker pool finishes together.
CHECKS: tuple[Check, ...] = (
    Check("cubic-curve", ("cubic",), lambda c: check_cubic_curve(c, "cubic")),
    Check("cc-cubic-curve", ("cc-cubic",), lambda c: check_cubic_curve(c, "cc-cubic")),
    Check("bbr3", ("bbr3",), lambda c: check_bbr(c, "bbr3")),
    Check("bbr2", ("bbr2",), lambda c: check_bbr(c, "bbr2")),
    Check("bbr2-loss", ("bbr2",), lambda c: check_bbr_loss(c, "bbr2")),
    Check("veno", ("veno",), check_veno),
    Check("htcp", ("htcp",), check_htcp),
    Check("lp", ("lp", "reno"), check_lp),
    Check("hybla", ("hybla",), check_hybla),
    Check("nv", ("nv",), check_nv),
    Check("illinois", ("illinois",), check_illinois),
    Check("yeah", ("yeah",), check_yeah),
    Check("highspeed", ("highspeed",), check_highspeed),
    Check("scalable-mimd", ("scalable",), check_scalable_fat),
    Check("cdg", ("cdg",), check_cdg),
    Check("beta-reno", ("reno",), lambda c: check_beta(c, "reno"), fast=True),
    Check("beta-cubic", ("cubic",), lambda c: check_beta(c, "cubic"), fast=True),
    Check("beta-cc-cubic", ("cc-cubic",), lambda c: check_beta(c, "cc-cubic")),
    Check("beta-bic", ("bic",), lambda c: check_beta(c, "bic"), fast=True),
    Check("beta-scalable", ("scalable",), lambda c: check_beta(c, "scalable"), fast=True),
    Check("beta-dctcp-noecn", ("dctcp",), lambda c: check_beta(c, "dctcp")),
    Check("westwood", ("westwood",), check_westwood),
    Check("vegas", ("vegas",), check_vegas, fast=True),
    Check("dctcp-ecn", ("dctcp",), check_dctcp),
)
ZOO = (
    "bic",
    "cc-cubic",
    "highspeed",
    "htcp",
    "hybla",
    "illinois",
    "lp",
    "nv",
    "scalable",
    "vegas",
    "veno",
    "westwood",
    "yeah",
    "cdg",
    "dctcp",
    "bbr2",
    "bbr3",
)


def select_checks(ccas: Sequence[str] | None = None, *, fast: bool = False) -> list[Check]:
    """Checks that concern any of `ccas` (lab or kernel names; all when None)."""
    want = None if ccas is None else {lab_cca(c).name for c in ccas}
    out = []
    for ch in CHECKS:
        if fast and not ch.fast:
            continue
        subject = ch.ccas[0]  # LP's check also needs Reno, but it is about LP
        if want is None or subject in want:
            out.append(ch)
    return out


@dataclass
class Report:
    rows: list[Row]
    cubic_compare: list[dict[str, Any]]
    errors: list[dict[str, str]]
    ccas_loaded: list[str]
    seconds: float
    downloads: int
    check_seconds: dict[str, float]

    @property
    def ok(self) -> bool:
        return (
            not self.errors
            and all(r.passed for r in self.rows)
            and all(c["pass"] for c in self.cubic_compare)  # indistinguishable or equivalent
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "rows": [r.to_dict() for r in self.rows],
            "cubic_bpf_vs_kernel": self.cubic_compare,
            "errors": self.errors,
            "ccas_loaded": self.ccas_loaded,
            "seconds": round(self.seconds, 1),
            "downloads": self.downloads,
            "check_seconds": self.check_seconds,
        }


def _registered() -> set[str]:
    from ccscope.lab import ccas as zoo

    return set(zoo.kernel_available())


def _used_by_other_labs(names: Sequence[str], own: Path) -> set[str]:
    """Kernel CCA names that another running lab (a state.json under /run/ccscope with a live
    emulator) serves: unloading them would break that lab's new connections."""
    used: set[str] = set()
    for st_file in Path("/run/ccscope").glob("*/state.json"):
        if st_file.parent.resolve() == own.resolve():
            continue
        try:
            st = json.loads(st_file.read_text())
            pid = int(st["pids"]["link"]["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not Path(f"/proc/{pid}").exists():
            continue
        used |= {srv.get("kernel_cca") for srv in st.get("servers", [])} & set(names)
    return used


@contextlib.contextmanager
def validation_lab(
    ccas: Sequence[str],
    *,
    instance: int = DEFAULT_INSTANCE,
    state_dir: str | Path | None = None,
    keep: bool = False,
    log: Callable[[str], None] | None = None,
) -> Iterator[Ctx]:
    """A lab with servers for `ccas` (lab names), zoo CCAs loaded as needed. On exit the lab goes
    down and the CCAs this call registered are unregistered again, except any another running
    lab has started to serve meanwhile (those stay, recorded by the loader, and are logged)."""
    from ccscope.lab import ccas as zoo
    from ccscope.lab.lab import Lab, LabParams

    names = tuple(dict.fromkeys(lab_cca(c).name for c in ccas))
    kernel = [lab_cca(c).kernel for c in names]
    before = _registered()
    missing = [k for k in kernel if k.startswith(zoo.PREFIX) and k not in before]
    mine: list[str] = []
    lab = Lab(state_dir or DEFAULT_STATE_DIR)
    say = log or (lambda _m: None)
    try:
        for k in missing:
            mine += zoo.load(zoo.base_of(k))
        lab.up(LabParams(delay_ms=LAB_DELAY_MS, ccas=names, instance=instance))
        ctx = Ctx(lab.dir, log=log)
        ctx.instance = instance
        ctx.kernel_names = kernel
        ctx.loaded_here = list(mine)
        yield ctx
    finally:
        try:
            lab.down(purge=not keep)
            if not keep:
                shutil.rmtree(lab.dir / "cubic-compare", ignore_errors=True)
        finally:
            keep_loaded = _used_by_other_labs(mine, lab.dir)
            if keep_loaded:
                say(f"left registered (another running lab serves them): {', '.join(sorted(keep_loaded))}")
            drop = [m for m in mine if m not in keep_loaded]
            if drop:
                zoo.unload(drop)


def run_validation(
    ccas: Sequence[str] | None = None,
    *,
    fast: bool = False,
    cubic_n: int | None = None,
    cubic_profiles: Sequence[str] | None = None,
    jobs: int = 3,
    instance: int = DEFAULT_INSTANCE,
    state_dir: str | Path | None = None,
    keep: bool = False,
    log: Callable[[str], None] | None = None,
) -> Report:
    """Run the selected checks (and, unless cubic_n is 0, the BPF-vs-kernel CUBIC comparison)."""
    t0 = time.monotonic()
    checks = select_checks(ccas, fast=fast)
    if cubic_n is None:
        cubic_n = 4 if fast else 5  # 4 + 4 traces: 70 label splits, so p can reach 0.03
    if cubic_profiles is None:
        cubic_profiles = ("A",) if fast else ("A", "B")
    do_cubic = cubic_n > 0 and (ccas is None or {"cubic", "cc-cubic"} & {lab_cca(c).name for c in ccas})
    needed = [c for ch in checks for c in ch.ccas] + (["cubic", "cc-cubic"] if do_cubic else [])
    if not needed:
        raise LabError("nothing to validate for " + ",".join(ccas or []))
    rows: list[Row] = []
    errors: list[dict[str, str]] = []
    timings: dict[str, float] = {}
    say = log or (lambda _m: None)
    with validation_lab(needed, instance=instance, state_dir=state_dir, keep=keep, log=log) as ctx:
        loaded = sorted(k for k in ctx.kernel_names if k.startswith("cc_"))

        def run(ch: Check) -> list[Row]:
            t = time.monotonic()
            try:
                return ch.fn(ctx)
            except Exception as e:  # one broken check must not hide the others' results
                errors.append({"check": ch.name, "error": f"{type(e).__name__}: {e}"})
                return []
            finally:
                timings[ch.name] = round(time.monotonic() - t, 1)
                say(f"{ch.name} done in {timings[ch.name]:.0f} s")

        cubic: list[dict[str, Any]] = []
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
            futs = [ex.submit(run, ch) for ch in checks]
            for f in futs:
                rows += f.result()
        if do_cubic:
            t = time.monotonic()
            try:
                cubic = compare_cubic(ctx, cubic_profiles, cubic_n, jobs=jobs)
            except (CCScopeError, OSError, subprocess.SubprocessError, ValueError) as e:
                errors.append({"check": "cubic-compare", "error": f"{type(e).__name__}: {e}"})
            timings["cubic-compare"] = round(time.monotonic() - t, 1)
        downloads = ctx.downloads + (2 * cubic_n * len(cubic_profiles) if do_cubic else 0)
    return Report(rows, cubic, errors, loaded, time.monotonic() - t0, downloads, timings)


def format_report(rep: Report) -> str:
    lines = [f"{'cca':<10} {'parameter':<52} {'measured':>9} {'expected':>9} {'tol':>7}  ok"]
    for r in rep.rows:
        m = "-" if r.measured is None else f"{r.measured:.3f}"
        lines.append(
            f"{r.cca:<10} {r.parameter[:52]:<52} {m:>9} {r.expected:>9.3f} {r.tolerance:>7.3f}  "
            f"{'yes' if r.passed else 'NO'}"
        )
    for c in rep.cubic_compare:
        lines.append(
            f"cubic BPF vs kernel, profile {c['profile']}: distance ratio {c['ratio']:.3f} "
            f"(cross {c['cross_median_distance_bdp']:.3f} / within "
            f"{c['within_median_distance_bdp']:.3f} BDP), "
            f"p = {c['p_value']:.3f}, n = {c['n']} each -> "
            f"{'indistinguishable' if c['indistinguishable'] else 'distinguishable'}, "
            f"excess {c['excess_distance_bdp']:+.3f} BDP "
            f"({'equivalent' if c['equivalent'] else 'NOT equivalent'})"
        )
    for e in rep.errors:
        lines.append(f"error in {e['check']}: {e['error']}")
    n_ok = sum(r.passed for r in rep.rows)
    lines.append(f"{n_ok}/{len(rep.rows)} rows pass; {rep.downloads} downloads in {rep.seconds:.0f} s")
    return "\n".join(lines)


# --- CLI --------------------------------------------------------------------------------------


def register(subparsers: Any) -> Any:
    """Adds `validate` to the `ccscope lab` subcommands."""
    p = subparsers.add_parser(
        "validate",
        help="check each CCA's defining behaviour from ground truth",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--ccas", help="comma-separated lab names (default: all checks)")
    p.add_argument("--fast", action="store_true", help="the quick subset (what the tests run)")
    p.add_argument("--cubic-n", type=int, help="downloads per CUBIC implementation and profile (0: skip)")
    p.add_argument("--jobs", type=int, default=3, help="checks run at once (default 3)")
    p.add_argument("--instance", type=int, default=DEFAULT_INSTANCE)
    p.add_argument("--state-dir", default=str(DEFAULT_STATE_DIR))
    p.add_argument("--keep", action="store_true", help="keep the ground truth when the lab goes down")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_validate)
    return p


def cmd_validate(args: Any) -> int:
    ccas = [c.strip() for c in args.ccas.split(",") if c.strip()] if args.ccas else None
    log = None if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    try:
        if ccas:
            for c in ccas:
                lab_cca(c)
    except KeyError as e:
        raise LabError(str(e.args[0])) from None
    rep = run_validation(
        ccas,
        fast=args.fast,
        cubic_n=args.cubic_n,
        jobs=args.jobs,
        instance=args.instance,
        state_dir=args.state_dir,
        keep=args.keep,
        log=log,
    )
    print(json.dumps(rep.to_dict(), indent=2) if args.json else format_report(rep))
    return 0 if rep.ok else 1
