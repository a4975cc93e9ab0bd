"""What every part of the store shares: its errors and the normal forms of a domain name and
of a stored time."""

from __future__ import annotations

import datetime as dt
import re

from ccscope.errors import CCScopeError

_DOMAIN_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


class StoreError(CCScopeError):
    """A request the store refuses (unknown name, bad value...)."""


class NotFound(StoreError):
    pass


class Conflict(StoreError):
    pass


class IllegalTransition(StoreError):
    pass


class OptedOut(Conflict):
    """The site (or a domain above it) asked not to be measured."""


def aware(t: dt.datetime | None) -> dt.datetime | None:
    """SQLite hands back naive datetimes; everything stored is UTC."""
    if t is None or t.tzinfo is not None:
        return t
    return t.replace(tzinfo=dt.UTC)


def normalize_domain(domain: str) -> str:
    """Lower-case, IDNA-encoded, syntactically valid host name; raises StoreError otherwise."""
    d = domain.strip().rstrip(".").lower()
    try:
        d = d.encode("idna").decode("ascii")
    except UnicodeError:
        raise StoreError(f"not a valid domain name: {domain!r}") from None
    labels = d.split(".")
    if len(d) > 253 or len(labels) < 2 or not all(_DOMAIN_LABEL.match(x) for x in labels):
        raise StoreError(f"not a valid domain name: {domain!r}")
    return d
