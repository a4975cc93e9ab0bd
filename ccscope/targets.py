"""Which targets ccscope may measure: one `TargetPolicy`, used by every client.

The measuring side points a real TCP download at whatever it is given, and the API and the
crawler fetch robots.txt and pages, so the policy is enforced on resolved addresses, not on
names: a name that resolves to loopback, a private range, link-local, multicast or an IPv6 form
embedding such an IPv4 address is refused. Lab mode widens the allowed set by the lab's own
prefixes only (198.18.0.0/16: lab instance N owns 198.18.N.0/24, and nothing else lives
there), never to everything. Callers connect to the vetted address (not a fresh lookup) so DNS
rebinding cannot swap it, and re-vet every redirect hop with the same policy.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from ccscope.errors import TargetRefused, TargetUnresolved
from ccscope.lab.registry import LAB_NET

MAX_URL_LENGTH = 2048
ALLOWED_SCHEMES = {"http": 80, "https": 443}

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_TEREDO = ipaddress.ip_network("2001::/32")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052 well-known prefix: global if its v4 is
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215 local-use: never global
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")  # RFC 2765 IPv4-translated: not routed
_V4_COMPAT = ipaddress.ip_network("::/96")  # deprecated IPv4-compatible (RFC 4291 2.5.5.1)
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")  # deprecated, but routed as private where used


@dataclass(frozen=True)
class Target:
    url: str
    scheme: str
    host: str
    port: int
    path: str  # path + query, ready for the request line
    addresses: tuple[str, ...]


def lab_mode_enabled(explicit: bool = False) -> bool:
    if explicit:
        return True
    # Unset or empty, CCSCOPE_LAB is its default (off): no need to load the settings, whose
    # import (pydantic) is most of the download client's start-up CPU.
    if not any(v for k, v in os.environ.items() if k.upper() == "CCSCOPE_LAB"):
        return False
    from ccscope.settings import settings

    return settings().lab


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a routable IPv6 form carries (mapped, 6to4, NAT64)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refusal(addr: str) -> str | None:
    """Why an address is not a public one, or None if it is."""
    ip: IPAddress = ipaddress.ip_address(addr)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _TEREDO:
            return "Teredo (an IPv4 tunnel)"
        if ip in _NAT64_LOCAL:
            return "local-use NAT64"
        if ip in _SITE_LOCAL:
            return "site-local"
        if ip in _SIIT:
            return "IPv4-translated"
        if ip in _V4_COMPAT and int(ip) > 1:
            return "IPv4-compatible IPv6 (deprecated)"
        v4 = _embedded_v4(ip)
        if v4 is not None:
            why = address_refusal(str(v4))
            if ip.ipv4_mapped is not None:
                return why  # ::ffff:a.b.c.d is just a.b.c.d: say what that is
            return f"embeds {v4} ({why})" if why else None
    checks = (
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (ip.is_unspecified, "unspecified"),
        (ip.is_reserved, "reserved"),
        (ip.is_private, "private"),
        (not ip.is_global, "not globally routable"),
    )
    for bad, why in checks:
        if bad:
            return why
    return None


@dataclass(frozen=True)
class TargetPolicy:
    """Where a client may connect: public addresses, plus the networks in `allowed`.

    `lab` also makes clients outside a ccscope shell resolve `*.lab.test` through the running
    lab's hosts file (inside a shell, the hosts file the shell was given is /etc/hosts)."""

    allowed: tuple[IPNetwork, ...] = ()
    lab: bool = False

    @classmethod
    def public(cls) -> TargetPolicy:
        return cls()

    @classmethod
    def for_lab(cls) -> TargetPolicy:
        return cls(allowed=(LAB_NET,), lab=True)

    @classmethod
    def from_mode(cls, lab: bool = False) -> TargetPolicy:
        """Lab mode if asked for (or CCSCOPE_LAB=1), else public addresses only."""
        return cls.for_lab() if lab_mode_enabled(lab) else cls.public()

    def widened(self, *networks: str) -> TargetPolicy:
        """This policy plus `networks` (CIDR strings); for test servers on loopback."""
        extra = tuple(ipaddress.ip_network(n, strict=False) for n in networks)
        return TargetPolicy(allowed=self.allowed + extra, lab=self.lab)

    def refusal(self, addr: str) -> str | None:
        """Why this policy refuses `addr`, or None."""
        try:
            ip = ipaddress.ip_address(addr.split("%", 1)[0])
        except ValueError:
            return "not an IP address"
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if any(ip.version == n.version and ip in n for n in self.allowed):
            return None
        why = address_refusal(str(ip))
        if why is None:
            return None
        where = "the lab's own prefixes" if self.lab else "lab mode (the lab's own prefixes)"
        return f"{why}; only public addresses and {where} are measured"

    def resolve(self, url: str) -> Target:
        """Parse, resolve and vet a URL; raises TargetRefused with the reason."""
        scheme, host, port, path = parse_url(url)
        addresses: tuple[str, ...] = ()
        if self.lab and not os.environ.get("CCSCOPE_SHELL_DEPTH"):
            # Lab names live in the lab's hosts file, not in DNS. Inside a ccscope shell the
            # hosts file it was given (--hosts, whichever lab instance) is the authority, so only
            # clients outside shells (the crawler, the API) read the lab's file directly.
            from ccscope.lab.lab import lab_resolve

            addresses = lab_resolve(host)
        if not addresses:
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except (socket.gaierror, UnicodeError) as e:
                if isinstance(e, socket.gaierror) and e.errno == socket.EAI_AGAIN:
                    raise TargetUnresolved(f"cannot resolve {host!r} for now: {e}") from None
                raise TargetRefused(f"cannot resolve {host!r}: {e}") from None
            addresses = tuple(dict.fromkeys(str(i[4][0]) for i in infos))
        if not addresses:
            raise TargetRefused(f"{host!r} has no addresses")
        for a in addresses:
            why = self.refusal(a)
            if why:
                raise TargetRefused(f"{host} resolves to {a} ({why})")
        return Target(url=url, scheme=scheme, host=host, port=port, path=path, addresses=addresses)


def parse_url(url: str) -> tuple[str, str, int, str]:
    if len(url) > MAX_URL_LENGTH:
        raise TargetRefused(f"URL longer than {MAX_URL_LENGTH} characters")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise TargetRefused("URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise TargetRefused(f"unparseable URL: {e}") from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        raise TargetRefused(f"unsupported scheme {parts.scheme!r} (use http or https)")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise TargetRefused("URL has no host")
    if parts.username or parts.password:
        raise TargetRefused("URLs with credentials are not measured")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return scheme, host, port or ALLOWED_SCHEMES[scheme], path


def resolve_target(url: str, *, lab: bool = False, policy: TargetPolicy | None = None) -> Target:
    """Parse, resolve and vet a URL under `policy` (default: lab mode's if `lab` or
    CCSCOPE_LAB=1, else public addresses only); raises TargetRefused with the reason."""
    return (policy or TargetPolicy.from_mode(lab)).resolve(url)
