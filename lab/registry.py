"""Which lab server runs which congestion control, and where.

Every CCA gets a fixed address in LAB_PREFIX (inside 198.18.0.0/15, the RFC 2544 benchmarking
range, which no Internet host uses) and a name `<cca>.lab.test`. The table is
append-only: an address, once given, stays with its CCA so old ground truth keeps its meaning.
New (e.g. BPF zoo) CCAs go at the end.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

LAB_PREFIX = "198.18.0.0/24"  # instance 0's prefix
LAB_NET = ipaddress.ip_network("198.18.0.0/16")  # every instance: instance N uses 198.18.N.0/24
LAB_DOMAIN = "lab.test"
MAX_INSTANCE = 255
_NET = ipaddress.ip_network(LAB_PREFIX)
_FIRST_HOST = 11  # .1-.10 stay free for lab infrastructure


def lab_prefix(instance: int = 0) -> str:
    """Several labs can run side by side (tests, benches, vantage points): one /24 each.
    Names stay `<cca>.lab.test`; each lab's own hosts file maps them to its prefix."""
    if not 0 <= instance <= MAX_INSTANCE:
        raise ValueError(f"lab instance must be in 0..{MAX_INSTANCE}")
    return f"198.18.{instance}.0/24"


CROSS_HOST = 2  # the cross-traffic sources' address: 198.18.N.2


def infra_addr(instance: int = 0, host: int = CROSS_HOST) -> str:
    """An infrastructure address (.1-.10) of a lab instance."""
    if not 1 <= host < _FIRST_HOST:
        raise ValueError(f"infrastructure hosts are .1-.{_FIRST_HOST - 1}")
    return str(ipaddress.ip_network(lab_prefix(instance)).network_address + host)


@dataclass(frozen=True)
class LabCCA:
    name: str  # the lab's name for it: hostname, ground-truth directory, label
    addr: str
    kernel: str  # what TCP_CONGESTION takes (BPF zoo CCAs register as cc_<name>)

    @property
    def hostname(self) -> str:
        return f"{self.name}.{LAB_DOMAIN}"

    def addr_in(self, instance: int) -> str:
        """This CCA's address in lab instance `instance` (same host part in every /24)."""
        host = int(ipaddress.ip_address(self.addr)) - int(_NET.network_address)
        return str(ipaddress.ip_network(lab_prefix(instance)).network_address + host)


# Order matters: position i gets 198.18.0.(11+i). Append only.
_ORDER: tuple[tuple[str, str], ...] = (
    ("reno", "reno"), ("cubic", "cubic"), ("bbr", "bbr"),
    # The BPF zoo (lab/ccas): present once `ccscope-cca load <name>` registered cc_<name>.
    ("bic", "cc_bic"), ("htcp", "cc_htcp"), ("vegas", "cc_vegas"), ("bbr2", "cc_bbr2"),
    ("bbr3", "cc_bbr3"), ("westwood", "cc_westwood"), ("illinois", "cc_illinois"),
    ("scalable", "cc_scalable"), ("highspeed", "cc_highspeed"), ("yeah", "cc_yeah"),
    ("veno", "cc_veno"), ("hybla", "cc_hybla"), ("lp", "cc_lp"), ("nv", "cc_nv"),
    ("dctcp", "cc_dctcp"), ("cdg", "cc_cdg"), ("cc-cubic", "cc_cubic"),
    # Parameter variants of zoo CCAs (classifier issue 4): never trained on, they measure how
    # often an unfamiliar CCA is called Unknown. Loaded with `ccscope-cca load B --as K --param ..`.
    ("cubic-b50", "cc_cubic_b50"), ("bbr3-g15", "cc_bbr3_g15"), ("bic-b50", "cc_bic_b50"),
    ("vegas-a6", "cc_vegas_a6"),
)  # fmt: skip

REGISTRY: tuple[LabCCA, ...] = tuple(
    LabCCA(name, str(_NET.network_address + _FIRST_HOST + i), kernel)
    for i, (name, kernel) in enumerate(_ORDER)
)
_BY_NAME = {c.name: c for c in REGISTRY}
_BY_KERNEL = {c.kernel: c for c in REGISTRY}
_BY_ADDR = {c.addr: c for c in REGISTRY}
DEFAULT_CCAS: tuple[str, ...] = ("reno", "cubic", "bbr")


def lab_cca(name: str) -> LabCCA:
    """The entry for a lab name (`bic`) or a kernel name (`cc_bic`)."""
    try:
        return _BY_NAME.get(name) or _BY_KERNEL[name]
    except KeyError:
        known = ", ".join(_BY_NAME)
        raise KeyError(
            f"no lab address for CCA {name!r} (known: {known}; new ones are appended to "
            "ccscope/lab/registry.py)"
        ) from None


def cca_for_address(addr: str) -> LabCCA | None:
    """The CCA served at `addr`, in whichever lab instance it is."""
    try:
        a = ipaddress.ip_address(addr)
    except ValueError:
        return None
    if a not in LAB_NET:
        return None
    host = int(a) & 0xFF
    return _BY_ADDR.get(str(_NET.network_address + host))


def is_lab_address(ip: str) -> bool:
    """True for any address inside any lab instance's prefix (servers and infrastructure)."""
    try:
        a = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        a = a.ipv4_mapped
    return a in LAB_NET
