"""The condition space: every network and server condition a lab measurement can be made under,
as data, and a seeded sampler over it.

A `Draw` is one point of the space: the Internet path between server and vantage point, a shared
bottleneck with cross traffic on it, where the measurement sits (access paths, a second bottleneck
upstream), the server's settings and the measurement's two profiles. It is frozen, round-trips
through JSON and has a stable id (a digest of its content and seed).

Seeds come from a split namespace: the top four bits of a draw's 64-bit seed are its split's code,
so a training draw and an evaluation draw can never share a seed, and every factor group samples
from its own stream derived from the seed, so holding one group at its mildest value (for
leave-one-factor-out) leaves every other group's values as they were. Only `random.Random.random()`
is used (its sequence for a given seed is stable across Python versions); every distribution is
built on it here.

`FACTORS` is the table `classifier/README.md` shows (`markdown_table()` writes it).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ccscope.classifier.stopping import StoppingRule
from ccscope.profile import PUBLISHED_PROFILES, STANDARD_PROFILES, Direction, Profile, kbit_spec

SPACE_VERSION = 1
# A split's code is the top 4 bits of every seed drawn for it: disjoint by construction.
SPLITS: dict[str, int] = {"train": 0, "eval": 1, "calib": 2, "test": 3}
GROUPS = ("rtt", "loss", "cross", "access", "server", "profile")
CROSS_CCAS = ("reno", "cubic", "bbr")
PROGRAMS = ("lab", "nginx")
_SEED_BITS = 60
MIN_BDP_SEGMENTS = 8.0  # a drawn profile's MTU is capped so profile A's BDP holds this many packets


class ConditionError(ValueError):
    """A malformed draw, an unknown space, split or factor group."""


# --- the table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Factor:
    name: str
    group: str
    range: str
    distribution: str
    mildest: str
    lo: float = 0.0
    hi: float = 0.0


FACTORS: tuple[Factor, ...] = (
    Factor("internet_rtt_ms", "rtt", "2–400 ms", "log-uniform", "20 ms", 2.0, 400.0),
    Factor("jitter_ms", "rtt", "0–10 ms", "0 w.p. 0.3, else uniform (per packet, no reordering)", "0",
           0.0, 10.0),
    Factor("loss", "loss", "0–1 %", "0 w.p. 0.35, else log-uniform 0.01–1 % (both directions)", "0",
           1e-4, 1e-2),
    Factor("ge_loss", "loss", "p 1e-4–2e-3, r 0.2–0.8, bad-state loss 0.5–1",
           "w.p. 0.25: p log-uniform, r and bad-state loss uniform (bursts of 1/r packets)", "off",
           1e-4, 2e-3),
    Factor("reorder", "loss", "0.1–2 % of packets, held back 1–10 ms",
           "w.p. 0.2: probability log-uniform, gap uniform", "off", 1e-3, 2e-2),
    Factor("share_rate_mbit", "cross", "1–100 Mbit/s (or none)",
           "w.p. 0.55: log-uniform; buffer uniform 0.5–4 × its BDP", "no shared bottleneck", 1.0, 100.0),
    Factor("udp_share", "cross", "5–50 % of the shared rate",
           "w.p. 0.5 of shared draws: uniform (constant-rate UDP)", "none", 0.05, 0.5),
    Factor("elastic_flows", "cross", "0–4 TCP flows of reno/cubic/bbr",
           "of shared draws: P(0..4) = .30/.25/.20/.15/.10; CCA uniform; on/off with exponential "
           "durations, means log-uniform on 1–10 s / off 0.5–10 s", "none", 0, 4),
    Factor("access_shells", "access", "0–2 shells around the profile shell",
           "P(0, 1, 2) = .40/.35/.25; each: one-way delay log-uniform 1–60 ms, jitter 0 (w.p. 0.6) "
           "or uniform 0–2 ms, rate log-uniform 5–100 Mbit/s w.p. 0.3", "none", 0, 2),
    Factor("upstream_bottleneck", "access", "1.25–10 × the profile's rate",
           "w.p. 0.25: log-uniform ratio, buffer uniform 0.5–4 × BDP", "none", 1.25, 10.0),
    Factor("program", "server", "lab server (HTTPS) or nginx (HTTP, sendfile)", "nginx w.p. 0.3",
           "lab server"),
    Factor("initcwnd", "server", "4, 10, 32, 64 segments", "P = .20/.50/.20/.10", "10"),
    Factor("gso", "server", "on, off (the server's device)", "off w.p. 0.3", "on"),
    Factor("mss", "server", "default, 1400, 1000, 536 bytes (TCP_MAXSEG)", "P = .55/.20/.10/.15",
           "default"),
    Factor("object_bytes", "server", "100 KB–10 MB", "log-uniform", "10 MB (runs to the time cap)",
           1e5, 1e7),
    Factor("app_limit", "server", "0.3–1.2 × the profile's rate, for all or the tail of the transfer",
           "w.p. 0.2: rate uniform; from byte 0 w.p. 0.5, else after 20–80 % of the object",
           "off", 0.3, 1.2),
    Factor("profile_kind", "profile", "standard A/B, nebby-A/B, or drawn",
           "P = .15/.10/.75", "standard A/B"),
    Factor("profile_rate_kbit", "profile", "50 kbit/s–2 Mbit/s", "log-uniform", "200 kbit/s",
           50.0, 2000.0),
    Factor("profile_buffer_bdp", "profile", "0.5–4 × BDP", "uniform", "2", 0.5, 4.0),
    Factor("sack", "profile", "on, off", "off w.p. 0.4", "on"),
    Factor("mtu", "profile", "100–1500",
           "100 w.p. 0.3, 1500 w.p. 0.3, else log-uniform; capped so profile A's BDP holds ≥ 8 packets",
           "100", 100, 1500),
    Factor("profile_delays_ms", "profile", "A 20–80 ms, B = A + 30–100 ms (one way)", "uniform",
           "A 50, B 100", 20.0, 80.0),
)  # fmt: skip
_F = {f.name: f for f in FACTORS}


def markdown_table() -> str:
    """The factor table as Markdown, for classifier/README.md's "Condition space" section."""
    rows = ["| factor | group | range | distribution | mildest |", "|---|---|---|---|---|"]
    rows += [f"| `{f.name}` | {f.group} | {f.range} | {f.distribution} | {f.mildest} |" for f in FACTORS]
    return "\n".join(rows)


# --- a draw -------------------------------------------------------------------------------


@dataclass(frozen=True)
class InternetPath:
    rtt_ms: float = 20.0
    jitter_ms: float = 0.0
    loss: float = 0.0
    ge_loss: tuple[float, ...] = ()  # (p, r, bad_loss): Gilbert–Elliott, () for none
    reorder: float = 0.0
    reorder_gap_ms: float = 1.0


@dataclass(frozen=True)
class ElasticFlow:
    cca: str
    on_mean_s: float
    off_mean_s: float


@dataclass(frozen=True)
class Sharing:
    rate_mbit: float | None = None  # None: no shared bottleneck (and no cross traffic)
    buffer_bdp: float = 1.0
    udp_share: float = 0.0  # constant-rate UDP, as a share of rate_mbit
    flows: tuple[ElasticFlow, ...] = ()

    @property
    def has_cross_traffic(self) -> bool:
        return self.rate_mbit is not None and (self.udp_share > 0 or bool(self.flows))


@dataclass(frozen=True)
class AccessPath:
    delay_ms: float
    jitter_ms: float = 0.0
    rate_mbit: float | None = None


@dataclass(frozen=True)
class Placement:
    access: tuple[AccessPath, ...] = ()  # outermost first
    upstream_ratio: float | None = None  # a second bottleneck at this multiple of the profile rate
    upstream_buffer_bdp: float = 1.0


@dataclass(frozen=True)
class Server:
    program: str = "lab"
    initcwnd: int = 10
    gso: bool = True
    mss: int | None = None
    object_bytes: int = 10_000_000
    app_limit: float | None = None  # capped send rate as a multiple of the profile's rate
    app_limit_after: float = 0.0  # the cap starts after this fraction of the object

    def key(self) -> tuple[Any, ...]:
        """What a lab bring-up fixes (the rest is chosen per request)."""
        return (self.initcwnd, self.gso, self.mss)


@dataclass(frozen=True)
class ProfilePair:
    kind: str = "standard"  # "standard" (A/B), "nebby" (nebby-A/B) or "space" (drawn)
    rate_kbit: float = 200.0
    buffer_bdp: float = 2.0
    sack: bool = True
    mtu: int = 100
    delay_a_ms: float = 50.0
    delay_b_ms: float = 100.0


@dataclass(frozen=True)
class Draw:
    space: str
    split: str
    index: int
    seed: int
    path: InternetPath = field(default_factory=InternetPath)
    sharing: Sharing = field(default_factory=Sharing)
    placement: Placement = field(default_factory=Placement)
    server: Server = field(default_factory=Server)
    profile: ProfilePair = field(default_factory=ProfilePair)
    fixed: tuple[str, ...] = ()  # factor groups held at their mildest values
    version: int = SPACE_VERSION

    # -- identity and JSON --

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Draw:
        try:
            sh = dict(d.get("sharing") or {})
            sh["flows"] = tuple(ElasticFlow(**f) for f in sh.get("flows", ()))
            pl = dict(d.get("placement") or {})
            pl["access"] = tuple(AccessPath(**a) for a in pl.get("access", ()))
            pa = dict(d.get("path") or {})
            pa["ge_loss"] = tuple(float(x) for x in pa.get("ge_loss", ()))
            return cls(
                space=str(d["space"]),
                split=str(d["split"]),
                index=int(d["index"]),
                seed=int(d["seed"]),
                path=InternetPath(**pa),
                sharing=Sharing(**sh),
                placement=Placement(**pl),
                server=Server(**(d.get("server") or {})),
                profile=ProfilePair(**(d.get("profile") or {})),
                fixed=tuple(d.get("fixed", ())),
                version=int(d.get("version", SPACE_VERSION)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConditionError(f"malformed draw: {type(e).__name__}: {e}") from e

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, s: str) -> Draw:
        try:
            return cls.from_dict(json.loads(s))
        except ValueError as e:
            raise ConditionError(f"malformed draw: {e}") from e

    @property
    def id(self) -> str:
        """A digest of the whole draw (content, seed, split): equal ids mean equal draws."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    # -- what it means for a measurement --

    def profiles(self) -> tuple[Profile, Profile]:
        """The draw's two measurement profiles (slots A and B: the shorter added delay first)."""
        p = self.profile
        if p.kind == "standard":
            return STANDARD_PROFILES["A"], STANDARD_PROFILES["B"]
        if p.kind == "nebby":
            return PUBLISHED_PROFILES["NEBBY-A"], PUBLISHED_PROFILES["NEBBY-B"]
        return tuple(  # type: ignore[return-value]
            Profile(
                name=f"space-{slot}",
                down=Direction(delay_ms=d, rate=kbit_spec(p.rate_kbit), buffer=f"{p.buffer_bdp:g}bdp"),
                up=Direction(delay_ms=d, rate=kbit_spec(p.rate_kbit), buffer=f"{p.buffer_bdp:g}bdp"),
                mtu=p.mtu,
                sack=p.sack,
            )
            for slot, d in (("A", p.delay_a_ms), ("B", p.delay_b_ms))
        )

    @property
    def profile_rate_bps(self) -> float:
        return self.profile.rate_kbit * 1e3 if self.profile.kind == "space" else 200e3

    def internet_link(self) -> Profile:
        """The Internet path shell (outermost around the measurement, cross traffic inside it)."""
        a, s = self.path, self.sharing
        d = Direction(
            delay_ms=round(a.rtt_ms / 2.0, 3),
            jitter_ms=a.jitter_ms,
            loss=a.loss,
            ge_loss=a.ge_loss,
            reorder=a.reorder,
            reorder_gap_ms=a.reorder_gap_ms,
            rate=f"{s.rate_mbit:g}mbit" if s.rate_mbit is not None else "inf",
            buffer=f"{s.buffer_bdp:g}bdp" if s.rate_mbit is not None else "inf",
        )
        return Profile(name="internet", down=d, up=d, mtu=1500, sack=True)

    def layers(self) -> list[Profile]:
        """Shells between the Internet path and the profile shell, outermost first: the second
        bottleneck upstream, then the access paths (the vantage point's own network)."""
        out: list[Profile] = []
        pl = self.placement
        if pl.upstream_ratio is not None:
            rate = pl.upstream_ratio * self.profile_rate_bps
            rtt_s = (self.path.rtt_ms + 2 * self.profile.delay_b_ms) / 1e3
            buf = max(1500, round(pl.upstream_buffer_bdp * rate / 8 * rtt_s))
            d = Direction(rate=kbit_spec(rate / 1e3), buffer=f"{buf}B")
            out.append(Profile(name="upstream", down=d, up=d, mtu=1500, sack=True))
        for i, ap in enumerate(pl.access):
            d = Direction(
                delay_ms=ap.delay_ms,
                jitter_ms=ap.jitter_ms,
                rate=f"{ap.rate_mbit:g}mbit" if ap.rate_mbit is not None else "inf",
            )
            out.append(Profile(name=f"access{i + 1}", down=d, up=d, mtu=1500, sack=True))
        return out

    def rtt_ms(self, slot: str) -> float:
        """Base RTT of one profile's measurement: Internet path, access paths and profile."""
        prof = self.profiles()[0 if slot == "A" else 1]
        return self.path.rtt_ms + sum(2 * a.delay_ms for a in self.placement.access) + prof.base_rtt_ms

    def duration_cap_s(self, slot: str) -> float:
        """How long one profile's download may run: the evidence cap of adaptive stopping's rule
        (StoppingRule.cap_s: 120 round trips, 25-150 s), which a census measurement also keeps;
        a 10 MB object at 50 kbit/s would otherwise take half an hour."""
        return StoppingRule().cap_s(self.rtt_ms(slot) / 1e3)

    def expected_duration_s(self, slot: str) -> float:
        """A rough guess at one download's length (for wall-time estimates)."""
        p = self.profiles()[0 if slot == "A" else 1]
        rate = self.profile_rate_bps
        overhead = 1.0 + 40.0 / max(60, p.mtu - 40)  # headers per segment
        natural = self.server.object_bytes * 8 * overhead / rate + 10 * self.rtt_ms(slot) / 1e3
        return min(self.duration_cap_s(slot), natural)

    def describe(self) -> str:
        a, s, pl, sv, p = self.path, self.sharing, self.placement, self.server, self.profile
        bits = [f"rtt {a.rtt_ms:.0f}ms"]
        if a.jitter_ms:
            bits.append(f"jit {a.jitter_ms:.1f}")
        if a.loss:
            bits.append(f"loss {a.loss * 100:.2f}%")
        if a.ge_loss:
            bits.append("GE")
        if a.reorder:
            bits.append("reord")
        if s.rate_mbit is not None:
            bits.append(f"share {s.rate_mbit:.0f}M u{s.udp_share:.2f} tcp{len(s.flows)}")
        if pl.access:
            bits.append(f"{len(pl.access)} access")
        if pl.upstream_ratio:
            bits.append(f"up x{pl.upstream_ratio:.1f}")
        bits.append(f"{sv.program} iw{sv.initcwnd}{'' if sv.gso else ' nogso'} {sv.object_bytes // 1000}KB")
        if sv.mss:
            bits.append(f"mss{sv.mss}")
        if sv.app_limit:
            bits.append(f"app x{sv.app_limit:.2f}")
        prof = p.kind if p.kind != "space" else f"{p.rate_kbit:.0f}k {p.buffer_bdp:.1f}bdp mtu{p.mtu}"
        bits.append(prof + ("" if p.sack or p.kind != "space" else " nosack"))
        return ", ".join(bits)


# --- mildest values -----------------------------------------------------------------------

MILDEST: dict[str, Callable[[Draw], Draw]] = {
    "rtt": lambda d: replace(d, path=replace(d.path, rtt_ms=20.0, jitter_ms=0.0)),
    "loss": lambda d: replace(d, path=replace(d.path, loss=0.0, ge_loss=(), reorder=0.0, reorder_gap_ms=1.0)),
    "cross": lambda d: replace(d, sharing=Sharing()),
    "access": lambda d: replace(d, placement=Placement()),
    "server": lambda d: replace(d, server=Server()),
    "profile": lambda d: replace(d, profile=ProfilePair()),
}


# --- sampling -----------------------------------------------------------------------------


class _Rng:
    """Distributions over random.Random.random() alone (stable across Python versions)."""

    def __init__(self, seed: int) -> None:
        self._r = random.Random(seed)

    def u(self, lo: float = 0.0, hi: float = 1.0) -> float:
        return lo + (hi - lo) * self._r.random()

    def log_u(self, lo: float, hi: float) -> float:
        return math.exp(self.u(math.log(lo), math.log(hi)))

    def p(self, prob: float) -> bool:
        return self._r.random() < prob

    def choice(self, items: Sequence[Any], weights: Sequence[float] | None = None) -> Any:
        w = list(weights) if weights is not None else [1.0] * len(items)
        x = self._r.random() * sum(w)
        for item, wi in zip(items, w, strict=True):
            x -= wi
            if x < 0:
                return item
        return items[-1]

    def exp(self, mean: float) -> float:
        return -mean * math.log(1.0 - self._r.random())


def _r3(x: float) -> float:
    return float(f"{x:.4g}")


def _sample_rtt(r: _Rng) -> InternetPath:
    f = _F["internet_rtt_ms"]
    rtt = _r3(r.log_u(f.lo, f.hi))
    jitter = 0.0 if r.p(0.3) else _r3(r.u(0.0, _F["jitter_ms"].hi))
    return InternetPath(rtt_ms=rtt, jitter_ms=jitter)


def _sample_loss(r: _Rng) -> dict[str, Any]:
    f = _F["loss"]
    loss = 0.0 if r.p(0.35) else _r3(r.log_u(f.lo, f.hi))
    ge: tuple[float, ...] = ()
    g = _F["ge_loss"]
    if r.p(0.25):
        ge = (_r3(r.log_u(g.lo, g.hi)), _r3(r.u(0.2, 0.8)), _r3(r.u(0.5, 1.0)))
    reorder, gap = 0.0, 1.0
    o = _F["reorder"]
    if r.p(0.2):
        reorder, gap = _r3(r.log_u(o.lo, o.hi)), _r3(r.u(1.0, 10.0))
    return {"loss": loss, "ge_loss": ge, "reorder": reorder, "reorder_gap_ms": gap}


def _sample_cross(r: _Rng) -> Sharing:
    if not r.p(0.55):
        return Sharing()
    f = _F["share_rate_mbit"]
    rate = _r3(r.log_u(f.lo, f.hi))
    buf = _r3(r.u(0.5, 4.0))
    u = _F["udp_share"]
    udp = _r3(r.u(u.lo, u.hi)) if r.p(0.5) else 0.0
    n = r.choice((0, 1, 2, 3, 4), (0.30, 0.25, 0.20, 0.15, 0.10))
    flows = tuple(
        ElasticFlow(r.choice(CROSS_CCAS), _r3(r.log_u(1.0, 10.0)), _r3(r.log_u(0.5, 10.0))) for _ in range(n)
    )
    return Sharing(rate_mbit=rate, buffer_bdp=buf, udp_share=udp, flows=flows)


def _sample_access(r: _Rng) -> Placement:
    n = r.choice((0, 1, 2), (0.40, 0.35, 0.25))
    access = tuple(
        AccessPath(
            delay_ms=_r3(r.log_u(1.0, 60.0)),
            jitter_ms=0.0 if r.p(0.6) else _r3(r.u(0.0, 2.0)),
            rate_mbit=_r3(r.log_u(5.0, 100.0)) if r.p(0.3) else None,
        )
        for _ in range(n)
    )
    up = _F["upstream_bottleneck"]
    if r.p(0.25):
        return Placement(access, _r3(r.log_u(up.lo, up.hi)), _r3(r.u(0.5, 4.0)))
    return Placement(access)


def _sample_server(r: _Rng) -> Server:
    program = "nginx" if r.p(0.3) else "lab"
    iw = r.choice((4, 10, 32, 64), (0.20, 0.50, 0.20, 0.10))
    gso = not r.p(0.3)
    mss = r.choice((None, 1400, 1000, 536), (0.55, 0.20, 0.10, 0.15))
    o = _F["object_bytes"]
    size = int(round(r.log_u(o.lo, o.hi), -3))
    app, after = None, 0.0
    a = _F["app_limit"]
    if r.p(0.2):
        app = _r3(r.u(a.lo, a.hi))
        after = 0.0 if r.p(0.5) else _r3(r.u(0.2, 0.8))
    return Server(program, iw, gso, mss, size, app, after)


def _sample_profile(r: _Rng) -> ProfilePair:
    kind = r.choice(("standard", "nebby", "space"), (0.15, 0.10, 0.75))
    # drawn even for the fixed kinds, so the stream (and the other factors) do not shift
    f = _F["profile_rate_kbit"]
    rate = _r3(r.log_u(f.lo, f.hi))
    buf = _r3(r.u(0.5, 4.0))
    sack = not r.p(0.4)
    mtu = int(r.choice((100, 1500, None), (0.3, 0.3, 0.4)) or round(r.log_u(100, 1500)))
    da = _r3(r.u(20.0, 80.0))
    db = _r3(da + r.u(30.0, 100.0))
    if kind == "standard":
        return ProfilePair()
    if kind == "nebby":
        return ProfilePair(kind="nebby", sack=False)
    # a profile we choose must be able to show a CCA: at least MIN_BDP_SEGMENTS packets in
    # profile A's own BDP (a window of a few segments grows by whole segments whatever the
    # controller), so a slow rate gets a smaller MTU; the draws above are unchanged
    cap = rate * 1e3 * (2.0 * da / 1e3) / 8.0 / MIN_BDP_SEGMENTS
    mtu = max(100, min(mtu, int(cap)))
    return ProfilePair("space", rate, buf, sack, mtu, da, db)


def _sample_other_profiles(r: _Rng) -> ProfilePair:
    """Profiles like the published traces': 50–400 kbit/s, 1×BDP drop-tail, SACK off, MTU 100,
    added delays 15–95 ms one way."""
    rate = _r3(r.log_u(50.0, 400.0))
    da = _r3(r.u(15.0, 60.0))
    db = _r3(r.u(da + 10.0, 95.0))
    return ProfilePair("space", rate, 1.0, False, 100, da, db)


# The demo's set-up (ccscope/demo.py): a 10 ms one-way Internet path, no loss, the lab server,
# 420 KB objects, standard profiles, from one of its two vantage points.
DEMO_VANTAGES = (AccessPath(5.0), AccessPath(60.0, 1.0))


def _sample_demo_access(r: _Rng) -> Placement:
    return Placement((r.choice(DEMO_VANTAGES),))


@dataclass(frozen=True)
class Space:
    """A named sub-space: some groups drawn differently, some held fixed."""

    name: str
    doc: str
    samplers: dict[str, Callable[[_Rng], Any]] = field(default_factory=dict)
    fixed: dict[str, Callable[[Draw], Draw]] = field(default_factory=dict)


_FULL_SAMPLERS: dict[str, Callable[[_Rng], Any]] = {
    "rtt": _sample_rtt,
    "loss": _sample_loss,
    "cross": _sample_cross,
    "access": _sample_access,
    "server": _sample_server,
    "profile": _sample_profile,
}

SPACES: dict[str, Space] = {
    s.name: s
    for s in (
        Space("full", "every factor drawn over its whole range"),
        Space(
            "other-profiles",
            "the profile drawn like the published traces' (SACK off, 1×BDP, 50–400 kbit/s, MTU 100); "
            "the rest over the full space",
            samplers={"profile": _sample_other_profiles},
        ),
        Space(
            "demo",
            "`make demo`'s set-up: 20 ms Internet RTT, no loss or cross traffic, the lab server with "
            "420 KB objects, standard profiles, one of the demo's two vantage points",
            samplers={"access": _sample_demo_access},
            fixed={
                "rtt": MILDEST["rtt"],
                "loss": MILDEST["loss"],
                "cross": MILDEST["cross"],
                "server": lambda d: replace(d, server=Server(object_bytes=420_000)),
                "profile": MILDEST["profile"],
            },
        ),
        Space("mild", "every factor group at its mildest value", fixed=dict(MILDEST)),
    )
}


def draw_seed(split: str, space: str, index: int) -> int:
    """The 64-bit seed of draw `index` of `space` in `split`: the split's code in the top four
    bits, 60 bits of sha256 below, so two splits never share a seed."""
    if split not in SPLITS:
        raise ConditionError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
    if index < 0:
        raise ConditionError("draw index must be >= 0")
    h = hashlib.sha256(f"ccscope-draw/{SPACE_VERSION}/{split}/{space}/{index}".encode()).digest()
    return (SPLITS[split] << _SEED_BITS) | (int.from_bytes(h[:8], "big") & ((1 << _SEED_BITS) - 1))


def split_of_seed(seed: int) -> str:
    code = seed >> _SEED_BITS
    for name, c in SPLITS.items():
        if c == code:
            return name
    raise ConditionError(f"seed {seed} carries no known split")


def _group_rng(seed: int, group: str) -> _Rng:
    return _Rng(int.from_bytes(hashlib.sha256(f"{seed}/{group}".encode()).digest()[:8], "big"))


def sample(space: str = "full", split: str = "train", index: int = 0, fixed: Sequence[str] = ()) -> Draw:
    """Draw `index` of `space` for `split`, with the groups in `fixed` held at their mildest."""
    if space not in SPACES:
        raise ConditionError(f"unknown space {space!r} (known: {', '.join(SPACES)})")
    bad = [g for g in fixed if g not in GROUPS]
    if bad:
        raise ConditionError(f"unknown factor group(s) {', '.join(bad)} (known: {', '.join(GROUPS)})")
    sp = SPACES[space]
    seed = draw_seed(split, space, index)
    vals = {g: sp.samplers.get(g, _FULL_SAMPLERS[g])(_group_rng(seed, g)) for g in GROUPS}
    path = replace(vals["rtt"], **vals["loss"])
    d = Draw(
        space=space,
        split=split,
        index=index,
        seed=seed,
        path=path,
        sharing=vals["cross"],
        placement=vals["access"],
        server=vals["server"],
        profile=vals["profile"],
    )
    for fix in sp.fixed.values():
        d = fix(d)
    for g in fixed:
        d = MILDEST[g](d)
    return replace(d, fixed=tuple(sorted(set(fixed))))


def draws(
    n: int, space: str = "full", split: str = "train", start: int = 0, fixed: Sequence[str] = ()
) -> list[Draw]:
    return [sample(space, split, i, fixed) for i in range(start, start + n)]


def iter_factor_values(ds: Sequence[Draw]) -> Iterator[dict[str, Any]]:
    """One flat row per draw (for summaries of a sample of the space)."""
    for d in ds:
        yield {
            "id": d.id,
            "internet_rtt_ms": d.path.rtt_ms,
            "jitter_ms": d.path.jitter_ms,
            "loss": d.path.loss,
            "ge": bool(d.path.ge_loss),
            "reorder": d.path.reorder,
            "share_rate_mbit": d.sharing.rate_mbit,
            "cross_traffic": d.sharing.has_cross_traffic,
            "access_shells": len(d.placement.access),
            "upstream": d.placement.upstream_ratio is not None,
            "program": d.server.program,
            "initcwnd": d.server.initcwnd,
            "gso": d.server.gso,
            "mss": d.server.mss,
            "object_bytes": d.server.object_bytes,
            "app_limit": d.server.app_limit,
            "profile_kind": d.profile.kind,
            "sack": d.profile.sack,
            "mtu": d.profile.mtu,
        }


# --- jobs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrawJob:
    """One measurement: a CCA served under a draw, run `run` (both of the draw's profiles)."""

    draw: Draw
    cca: str
    run: int = 0

    @property
    def key(self) -> str:
        return f"{self.draw.id}/{self.cca}/run{self.run}"

    @property
    def transport(self) -> str:
        return "quic" if is_quic_label(self.cca) else "tcp"

    @property
    def seed(self) -> int:
        """The emulators' seed for this job (every shell derives its own from it)."""
        return int.from_bytes(hashlib.sha256(self.key.encode()).digest()[:4], "big")


def plan_jobs(ds: Sequence[Draw], ccas: Sequence[str], runs: int = 1) -> list[DrawJob]:
    return [DrawJob(d, c, r) for d in ds for c in ccas for r in range(runs)]


# --- QUIC ---------------------------------------------------------------------------------


def is_quic_label(cca: str) -> bool:
    """A QUIC lab class is named `stack:cca` (lab/quic/registry.py); a TCP CCA never has a colon."""
    return ":" in cca


def quic_draw(d: Draw) -> Draw:
    """The draw as a QUIC measurement meets it: the lab's QUIC servers take no initcwnd, GSO,
    MSS or application-limited rate and there is no QUIC nginx, so the server group keeps only
    the object size; QUIC's ACK frames always carry ranges, so a drawn profile's SACK switch
    means nothing and reads as on. Everything else (the packet-size adaptation included, which
    classifier/collect.py applies when it measures) is the draw as sampled."""
    prof = replace(d.profile, sack=True) if d.profile.kind == "space" else d.profile
    return replace(d, server=Server(object_bytes=d.server.object_bytes), profile=prof)


def plan_quic_jobs(ds: Sequence[Draw], labels: Sequence[str], runs: int = 1) -> list[DrawJob]:
    """`plan_jobs` for QUIC classes (`stack:cca`), each draw adapted by `quic_draw`."""
    return [DrawJob(quic_draw(d), c, r) for d in ds for c in labels for r in range(runs)]
