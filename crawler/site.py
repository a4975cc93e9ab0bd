"""The crawler's entry point for a site: the cached pick, or a fresh discovery stored with a TTL."""

from __future__ import annotations

from dataclasses import dataclass

from ccscope.crawler.discover import Discovery, Limits, find_largest_object
from ccscope.crawler.http import SafeClient
from ccscope.store import Store, normalize_domain
from ccscope.targets import TargetPolicy

DEFAULT_TTL = 7 * 24 * 3600.0  # sites change their big objects slowly; a week saves many requests
FAILED_TTL = 6 * 3600.0  # retry a site that gave nothing sooner


@dataclass(frozen=True)
class SitePick:
    url: str | None
    size: int | None
    cached: bool
    reason: str = ""  # why there is no url, when there is none


def object_for_site(
    store: Store,
    domain: str,
    *,
    lab: bool = False,
    ttl_seconds: float = DEFAULT_TTL,
    limits: Limits | None = None,
    client: SafeClient | None = None,
    base_urls: list[str] | None = None,
    policy: TargetPolicy | None = None,
) -> tuple[str | None, int | None, bool]:
    """(url, size, from_cache) of the object to download from `domain`; url is None if the site
    offers nothing usable. Tries https first, then http, unless `base_urls` says otherwise."""
    p = pick_object(
        store, domain, lab=lab, ttl_seconds=ttl_seconds, limits=limits, client=client,
        base_urls=base_urls, policy=policy,
    )  # fmt: skip
    return p.url, p.size, p.cached


def pick_object(
    store: Store,
    domain: str,
    *,
    lab: bool = False,
    ttl_seconds: float = DEFAULT_TTL,
    limits: Limits | None = None,
    client: SafeClient | None = None,
    base_urls: list[str] | None = None,
    policy: TargetPolicy | None = None,
) -> SitePick:
    """The object to download from `domain`, with the reason when there is none. A TTL of
    zero or less asks the site afresh (the cached pick is neither read nor kept)."""
    d = normalize_domain(domain)
    cached = store.cached_object(d) if ttl_seconds > 0 else None
    if cached is not None:
        reason = "" if cached.url else Discovery.reason_of(cached.detail or {})
        return SitePick(cached.url, cached.size, True, reason)
    own = client is None
    c = client or SafeClient(lab=lab, timeout=(limits or Limits()).request_timeout, policy=policy)
    try:
        result = Discovery(site=d)
        for base in base_urls or [f"https://{d}/", f"http://{d}/"]:
            result = find_largest_object(base, client=c, limits=limits)
            if result.url is not None:
                break
    finally:
        if own:
            c.close()
    if ttl_seconds > 0:
        store.cache_object(
            d,
            result.url,
            result.size,
            result.to_dict(),
            ttl_seconds if result.url else min(ttl_seconds, FAILED_TTL),
        )
    return SitePick(result.url, result.size, False, "" if result.url else result.reason)
