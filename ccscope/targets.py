"""Which targets ccscope may measure.

The measuring side runs as root and points a real TCP download at whatever it is given, so the
policy is enforced on resolved addresses, not on names: a public-looking name that resolves to
loopback, a private range, link-local or multicast is refused unless lab mode is explicitly on.
Callers connect to the vetted address (not a fresh lookup) so DNS rebinding cannot swap it.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from ccscope.errors import TargetRefused
from ccscope.settings import settings

MAX_URL_LENGTH = 2048
ALLOWED_SCHEMES = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Target:
    url: str
    scheme: str
    host: str
    port: int
    path: str  # path + query, ready for the request line
    addresses: tuple[str, ...]


def lab_mode_enabled(explicit: bool = False) -> bool:
    return explicit or settings().lab


def address_refusal(addr: str) -> str | None:
    """Why an address must not be measured outside lab mode, or None if it is public."""
    ip = ipaddress.ip_address(addr)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
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


def resolve_target(url: str, *, lab: bool = False) -> Target:
    """Parse, resolve and vet a URL; raises TargetRefused with the reason."""
    scheme, host, port, path = parse_url(url)
    addresses: tuple[str, ...] = ()
    if lab_mode_enabled(lab) and not os.environ.get("CCSCOPE_SHELL_DEPTH"):
        # Lab names live in the lab's hosts file, not in DNS. Inside a ccscope shell the hosts
        # file it was given (--hosts, whichever lab instance) is the authority, so only clients
        # outside shells (the crawler) read the lab's file directly.
        from ccscope.lab.lab import lab_resolve

        addresses = lab_resolve(host)
    if not addresses:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as e:
            raise TargetRefused(f"cannot resolve {host!r}: {e}") from None
        addresses = tuple(dict.fromkeys(str(i[4][0]) for i in infos))
    if not addresses:
        raise TargetRefused(f"{host!r} has no addresses")
    if not lab_mode_enabled(lab):
        for a in addresses:
            why = address_refusal(a)
            if why:
                raise TargetRefused(
                    f"{host} resolves to {a} ({why}); such targets are measured only in lab mode"
                )
    return Target(url=url, scheme=scheme, host=host, port=port, path=path, addresses=addresses)
