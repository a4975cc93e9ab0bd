"""What a validation check reads: the client-side link's path, the server's ground truth
(TCP_INFO samples) as arrays and the events and rounds read off them, and the result rows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ccscope.errors import LabError
from ccscope.lab.groundtruth import GroundTruthRecord

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


def med(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.median(xs)) if xs else math.nan


def missing_row(cca: str, parameter: str, expected: float, tol: float, why: str) -> Row:
    return Row(cca, parameter, None, expected, tol, note=why)
