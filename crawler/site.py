"""The crawler's entry point for a site: the cached pick, or a fresh discovery stored with a TTL."""

from __future__ import annotations

from dataclasses import dataclass

from ccscope.crawler.discover import Discovery, Limits, find_largest_object
from ccscope.crawler.h3 import H3Offer, find_h3
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
    """The object to download from `domain`, with the reason when there is none. Tries https
    first, then http, unless `base_urls` says otherwise. A TTL of zero or less asks the site
    afresh (the cached pick is neither read nor kept)."""
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


def quic_url_for_site(
    store: Store, domain: str, url: str, *, lab: bool = False, probe: bool = True
) -> H3Offer:
    """Where the site serves `url` (its crawled object) over HTTP/3: its Alt-Svc header, else
    one QUIC probe; the answer is kept with the crawl so a site is probed once per crawl TTL."""
    d = normalize_domain(domain)
    cached = store.cached_object(d)
    detail = dict(cached.detail or {}) if cached is not None else {}
    known = detail.get("h3")
    if isinstance(known, dict) and known.get("for") == url:
        return H3Offer(known.get("url"), str(known.get("how", "")), str(known.get("detail", "")))
    offer = find_h3(url, detail.get("alt_svc"), lab=lab, probe=probe)
    if cached is not None:
        detail["h3"] = {"for": url, "url": offer.url, "how": offer.how, "detail": offer.detail[:300]}
        ttl = DEFAULT_TTL if offer.url else FAILED_TTL
        store.cache_object(d, cached.url, cached.size, detail, ttl)
    return offer
