"""Network profiles: what the bottleneck in front of the client looks like.

A `Profile` is the one description of an emulated link that every component uses: the
measurement plane turns it into `ccscope-link` options, traces carry it in their metadata, and
the classifier reads the base RTT and BDP from it. Rate and buffer are kept as the link
emulator's own spec strings (`200kbit`, `500pps:1500p,334pps`, `2bdp`) so there is exactly one
grammar, owned by the emulator; this module only reads the simple forms it needs for BDP
arithmetic.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ccscope.errors import ProfileError

_RATE_RE = re.compile(r"^(?P<num>\d+(?:\.\d+)?)(?P<unit>bit|kbit|mbit|gbit|pps)$")
_RATE_SCALE = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def kbit_spec(rate_kbit: float) -> str:
    """A rate in kbit/s as a rate spec, six significant digits and never in exponent form
    (`f"{x:g}"` gives `1.11195e+06` from 1.1 Gbit/s, which no rate parser here reads)."""
    x = float(f"{rate_kbit:.6g}")
    return f"{x:f}".rstrip("0").rstrip(".") + "kbit"


def first_rate_bps(spec: str) -> float | None:
    """Bits per second of the first step of a rate spec; None for `inf` or packet rates."""
    head = spec.split(",", 1)[0].split(":", 1)[0].strip().lower()
    if head in ("", "inf"):
        return None
    m = _RATE_RE.match(head)
    if not m:
        raise ProfileError(f"unreadable rate spec {spec!r}")
    if m["unit"] == "pps":
        return None
    return float(m["num"]) * _RATE_SCALE[m["unit"]]


@dataclass(frozen=True)
class Direction:
    """One direction of the emulated link (down = toward the client)."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0
    rate: str = "inf"
    buffer: str = "inf"
    drop_nth: tuple[int, ...] = ()
    drop_window_over: int | None = None
    # Gilbert–Elliott bursty loss (p, r[, bad_loss[, good_loss]]), () for none; see capture/link
    ge_loss: tuple[float, ...] = ()
    reorder: float = 0.0  # probability a packet is held back and overtaken
    reorder_gap_ms: float = 1.0

    def __post_init__(self) -> None:
        if self.delay_ms < 0 or self.jitter_ms < 0:
            raise ProfileError("delay and jitter must be >= 0")
        if not 0.0 <= self.loss < 1.0:
            raise ProfileError("loss must be in [0, 1)")
        if self.ge_loss and (not 2 <= len(self.ge_loss) <= 4 or not all(0 <= x <= 1 for x in self.ge_loss)):
            raise ProfileError("ge_loss is (p, r[, bad_loss[, good_loss]]), each in [0, 1]")
        if not 0.0 <= self.reorder <= 1.0 or self.reorder_gap_ms <= 0:
            raise ProfileError("reorder must be in [0, 1] and its gap > 0 ms")
        first_rate_bps(self.rate)  # validates the simple forms early

    def link_args(self, prefix: str) -> list[str]:
        args = [
            f"--{prefix}-delay",
            _num(self.delay_ms),
            f"--{prefix}-rate",
            self.rate,
            f"--{prefix}-buffer",
            self.buffer,
        ]
        if self.jitter_ms:
            args += [f"--{prefix}-jitter", _num(self.jitter_ms)]
        if self.loss:
            args += [f"--{prefix}-loss", _num(self.loss)]
        if self.ge_loss:
            args += [f"--{prefix}-ge-loss", ",".join(_num(x) for x in self.ge_loss)]
        if self.reorder:
            args += [
                f"--{prefix}-reorder",
                _num(self.reorder),
                f"--{prefix}-reorder-gap",
                _num(self.reorder_gap_ms),
            ]
        if self.drop_nth:
            args += [f"--{prefix}-drop-nth", ",".join(str(n) for n in self.drop_nth)]
        if self.drop_window_over is not None:
            args += [f"--{prefix}-drop-window-over", str(self.drop_window_over)]
        return args


@dataclass(frozen=True)
class Profile:
    """A complete client-side bottleneck: both directions plus interface settings."""

    name: str
    down: Direction = field(default_factory=Direction)
    up: Direction = field(default_factory=Direction)
    mtu: int = 100
    sack: bool = False
    per_flow_queues: bool = False

    @property
    def base_rtt_ms(self) -> float:
        """RTT the profile itself adds (the Internet path comes on top)."""
        return self.down.delay_ms + self.up.delay_ms

    def bdp_bytes(self, internet_rtt_ms: float = 0.0) -> float | None:
        """Bandwidth-delay product of the downlink bottleneck over the whole path."""
        bps = first_rate_bps(self.down.rate)
        if bps is None:
            return None
        return bps / 8.0 * (self.base_rtt_ms + internet_rtt_ms) / 1000.0

    def link_args(self) -> list[str]:
        args = [*self.down.link_args("down"), *self.up.link_args("up"), "--mtu", str(self.mtu)]
        if not self.sack:
            args.append("--no-sack")
        if self.per_flow_queues:
            args.append("--per-flow")
        return args

    def with_(self, **changes: Any) -> Profile:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["base_rtt_ms"] = self.base_rtt_ms
        d["bdp_bytes"] = self.bdp_bytes()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Profile:
        try:
            dirs = {
                k: Direction(
                    **{
                        **d[k],
                        "drop_nth": tuple(d[k].get("drop_nth", ())),
                        "ge_loss": tuple(float(x) for x in d[k].get("ge_loss", ())),
                    }
                )
                for k in ("down", "up")
            }
            return cls(
                name=str(d["name"]),
                mtu=int(d.get("mtu", 100)),
                sack=bool(d.get("sack", False)),
                per_flow_queues=bool(d.get("per_flow_queues", False)),
                **dirs,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ProfileError(f"malformed profile: {e}") from e


def nebby_profile(
    name: str, one_way_delay_ms: float, rate: str = "200kbit", *, sack: bool = False
) -> Profile:
    """The published passive profile: 200 kbit/s, 2xBDP drop-tail, tiny MTU, SACK off (unless
    `sack`)."""
    d = Direction(delay_ms=one_way_delay_ms, rate=rate, buffer="2bdp")
    return Profile(name=name, down=d, up=d, mtu=100, sack=sack)


# ccscope's standard profiles are the published ones with SACK on. Without SACK the client's
# cumulative ACK repairs one hole per round trip (NewReno), so slow start's overshoot of the
# 2xBDP queue leaves a loss recovery of 100-700 RTTs that often outlasts the download: the trace
# then shows slow start and one back-off, never how the window grows, and Reno, DCTCP and Veno
# look the same. With SACK the recovery takes a few RTTs and a 400 KB download holds several
# congestion-avoidance cycles (classifier/README.md). SACK is also what every real client
# negotiates, so the server's loss recovery is the one its users get. BiF stays highest
# sequence sent minus cumulative ACK; the capture also tracks the SACK scoreboard so the pipe
# (BiF less SACKed bytes) is known through a recovery.
STANDARD_PROFILES: dict[str, Profile] = {
    "A": nebby_profile("A", 50.0, sack=True),
    "B": nebby_profile("B", 100.0, sack=True),
}
# The published method's profiles exactly (SACK off), for comparison runs and imported traces.
PUBLISHED_PROFILES: dict[str, Profile] = {
    "NEBBY-A": nebby_profile("nebby-A", 50.0),
    "NEBBY-B": nebby_profile("nebby-B", 100.0),
}


# QUIC cannot use the tiny MTU: every QUIC endpoint must be able to send 1200-byte UDP payloads
# (RFC 9000 §14) and servers start there, so the client's link needs an IP MTU of at least 1228;
# 1280 (IPv6's minimum) leaves room for IPv6 too. A QUIC packet then carries ~25x the bytes of a
# 100-byte TCP one, and there are two ways to adapt a profile:
#   "packets" (the default): rate scaled by the packet-size ratio, delays and the 2xBDP buffer
#       kept, so the path holds the same number of packets per RTT as the TCP profile (~25 at
#       100 ms) and the window dynamics read the same; a download needs ~25x the bytes for as
#       many round trips (a 1 MB object lasts ~3 s, not ~80 s);
#   "rate": rate and delays kept, MTU raised: the BDP drops to ~2 packets, the window sits at
#       the stacks' minimum and the trace is mostly noise, but any object lasts as long.
QUIC_MTU = 1280
QUIC_PACKET_BYTES = 1228  # 1200-byte UDP payload + IPv4 and UDP headers
QUIC_ADAPT = ("packets", "rate")


def quic_profile(base: Profile, keep: str = "packets") -> Profile:
    """The QUIC variant of a profile (see QUIC_ADAPT); a profile already fit for QUIC is kept."""
    if base.mtu >= QUIC_MTU:
        return base
    if keep not in QUIC_ADAPT:
        raise ProfileError(f"unknown QUIC adaptation {keep!r} (choose from {', '.join(QUIC_ADAPT)})")
    if keep == "rate":
        return replace(base, name=f"{base.name}-quic-rate", mtu=QUIC_MTU)
    scale = QUIC_PACKET_BYTES / base.mtu

    def scaled(d: Direction) -> Direction:
        bps = first_rate_bps(d.rate)
        return d if bps is None else replace(d, rate=f"{round(bps * scale / 1000.0)}kbit")

    return replace(base, name=f"{base.name}-quic", down=scaled(base.down), up=scaled(base.up), mtu=QUIC_MTU)


def get_profile(name: str) -> Profile:
    key = name.upper()
    if key in STANDARD_PROFILES:
        return STANDARD_PROFILES[key]
    if key in PUBLISHED_PROFILES:
        return PUBLISHED_PROFILES[key]
    base, _, keep = key.partition("-QUIC")
    if keep in ("", "-RATE") and key != base and base in STANDARD_PROFILES:
        return quic_profile(STANDARD_PROFILES[base], "rate" if keep else "packets")
    known = ", ".join(
        [*STANDARD_PROFILES, *(p.name for p in PUBLISHED_PROFILES.values())]
        + [f"{k}-quic, {k}-quic-rate" for k in STANDARD_PROFILES]
    )
    raise ProfileError(f"unknown profile {name!r} (known: {known})")


def check_profile_choice(spec: str) -> str:
    """A measurement's profile field: "default" (the worker's profiles) or known profile names
    joined by "+" ("A+B"); raises ProfileError naming the unknown one."""
    if spec in ("", "default"):
        return "default"
    names = spec.split("+")
    for n in names:
        if not n:
            raise ProfileError(f"empty profile name in {spec!r}")
        get_profile(n)
    return spec


def _num(x: float) -> str:
    return f"{x:g}"
