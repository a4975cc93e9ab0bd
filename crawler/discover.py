"""Find the largest object on a site worth downloading for a measurement.

A CCA shows itself only after slow start, so the download must be long: the crawler looks at the
home page, the links on it and the links on those pages (two levels), asks each candidate's size
with HEAD (or a one-byte range GET when HEAD says nothing), and picks the largest object of at
least `prefer_bytes` (400 KB), else the largest it found. Only objects on the site itself count:
a CDN asset is another server with its own CCA. robots.txt is obeyed; every request goes through
`SafeClient` (vetted addresses, timeouts, size caps) within a per-site budget of requests and time.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from typing import Any, ClassVar
from urllib.parse import urldefrag, urljoin, urlsplit

from ccscope.crawler.http import CrawlError, Response, SafeClient
from ccscope.crawler.robots import Robots
from ccscope.errors import TargetRefused

_PAGE_SUFFIXES = ("", ".html", ".htm", ".php", ".asp", ".aspx", ".jsp", ".shtml")


@dataclass(frozen=True)
class Limits:
    prefer_bytes: int = 400 * 1024
    max_object_bytes: int = 1024 * 1024 * 1024  # bigger objects are not "worth downloading"
    page_bytes: int = 2 * 1024 * 1024  # HTML read per page
    max_pages: int = 20  # pages fetched and parsed (home + level 1)
    max_probes: int = 100  # HEAD / range requests
    request_timeout: float = 10.0
    site_budget_seconds: float = 60.0


@dataclass
class Candidate:
    url: str
    size: int
    depth: int
    content_type: str = ""


@dataclass
class Discovery:
    site: str  # the base URL
    url: str | None = None
    size: int | None = None
    meets_preference: bool = False
    pages: int = 0
    probes: int = 0
    robots_skipped: int = 0
    alt_svc: str | None = None  # the home page's Alt-Svc header (HTTP/3 discovery, crawler/h3.py)
    errors: list[str] = field(default_factory=list)
    top: list[Candidate] = field(default_factory=list)  # the largest few, for the record
    reason: str = ""  # why no object was picked (robots.txt, errors, nothing found)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def reason_of(detail: dict[str, Any]) -> str:
        """The reason recorded with a discovery (a cached one may predate the field)."""
        if detail.get("reason"):
            return str(detail["reason"])
        errors = detail.get("errors") or []
        if errors:
            return str(errors[0])
        return f"no object found ({detail.get('pages', 0)} pages, {detail.get('probes', 0)} probes)"


class _Links(HTMLParser):
    ATTRS: ClassVar[dict[str, str]] = {
        **{t: "href" for t in ("a", "link")},
        **{t: "src" for t in ("img", "script", "source", "video", "audio", "embed", "iframe")},
    }

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        want = self.ATTRS.get(tag)
        for k, v in attrs:
            if k == want and v and len(self.links) < 5000:
                self.links.append(v.strip())


def extract_links(html: bytes, base: str) -> list[str]:
    p = _Links()
    try:
        p.feed(html.decode("utf-8", errors="replace"))
        p.close()
    except Exception:
        pass  # hostile HTML: keep whatever was parsed before it broke
    out: list[str] = []
    for link in p.links:
        if link.startswith(("javascript:", "mailto:", "data:", "tel:")):
            continue
        url = urldefrag(urljoin(base, link))[0]
        if urlsplit(url).scheme in ("http", "https"):
            out.append(url)
    return list(dict.fromkeys(out))


def same_site(url: str, base: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    root = (urlsplit(base).hostname or "").lower().removeprefix("www.")
    return host == root or host.endswith("." + root)


def _looks_like_page(url: str) -> bool:
    path = urlsplit(url).path
    last = path.rsplit("/", 1)[-1]
    suffix = "." + last.rsplit(".", 1)[-1].lower() if "." in last else ""
    return suffix in _PAGE_SUFFIXES


def _size_of(r: Response) -> int | None:
    cr = r.headers.get("content-range", "")
    if "/" in cr:
        total = cr.rsplit("/", 1)[1].strip()
        if total.isdigit():
            return int(total)
    cl = r.headers.get("content-length", "")
    return int(cl) if cl.isdigit() else None


def find_largest_object(base_url: str, *, client: SafeClient, limits: Limits | None = None) -> Discovery:
    lim = limits or Limits()
    deadline = time.monotonic() + lim.site_budget_seconds
    out = Discovery(site=base_url)
    robots = Robots(client, base_url, min(deadline, time.monotonic() + lim.request_timeout))
    found: dict[str, Candidate] = {}
    probed: set[str] = set()

    def fetch_page(url: str, depth: int) -> list[str]:
        if out.pages >= lim.max_pages or time.monotonic() > deadline:
            return []
        out.pages += 1
        r = client.request("GET", url, max_bytes=lim.page_bytes, deadline=deadline)
        if depth == 0 and r.headers.get("alt-svc"):
            out.alt_svc = r.headers["alt-svc"][:4096]
        if r.status != 200:
            return []
        if not r.truncated:
            found.setdefault(r.url, Candidate(r.url, len(r.body), depth, r.headers.get("content-type", "")))
        if "html" not in r.headers.get("content-type", "html"):
            return []
        return [u for u in extract_links(r.body, r.url) if same_site(u, base_url)]

    def probe(url: str, depth: int) -> None:
        if url in probed or len(probed) >= lim.max_probes or time.monotonic() > deadline:
            return
        probed.add(url)
        out.probes += 1
        r = client.request("HEAD", url, deadline=deadline)
        size = _size_of(r) if r.status == 200 else None
        if size is None and r.status in (200, 403, 405, 501):
            # HEAD refused or silent: one byte of a range GET reports the total in Content-Range.
            r = client.request("GET", url, max_bytes=1, deadline=deadline, headers={"Range": "bytes=0-0"})
            size = _size_of(r) if r.status in (200, 206) else None
        if size is not None and same_site(r.url, base_url):
            found[r.url] = Candidate(r.url, size, depth, r.headers.get("content-type", ""))

    def guarded(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except (CrawlError, TargetRefused) as e:
            if len(out.errors) < 20:
                out.errors.append(str(e))
            return None

    if not robots.allowed(base_url):
        out.robots_skipped += 1
        out.reason = f"robots.txt: {robots.why_not(base_url)}"
        return out
    level1 = guarded(fetch_page, base_url, 0) or []
    level2: list[str] = []
    for url in level1:
        if not robots.allowed(url):
            out.robots_skipped += 1
        elif _looks_like_page(url) and out.pages < lim.max_pages:
            links = guarded(fetch_page, url, 1) or []
            level2.extend(u for u in links if u not in level1)
        else:
            guarded(probe, url, 1)
    for url in dict.fromkeys(level2):
        if url in found:
            continue
        if robots.allowed(url):
            guarded(probe, url, 2)
        else:
            out.robots_skipped += 1

    usable = [c for c in found.values() if 0 < c.size <= lim.max_object_bytes]
    usable.sort(key=lambda c: (-c.size, c.depth, c.url))
    out.top = usable[:5]
    big = [c for c in usable if c.size >= lim.prefer_bytes]
    pick = big[0] if big else (usable[0] if usable else None)
    if pick is not None:
        out.url, out.size, out.meets_preference = pick.url, pick.size, pick.size >= lim.prefer_bytes
    else:
        out.reason = Discovery.reason_of(asdict(out))
        if out.robots_skipped and not out.errors:
            out.reason += f"; robots.txt kept {out.robots_skipped} links out"
    return out
