"""robots.txt (RFC 9309) for ccscope: one parser for the crawler and for URLs queued by hand.

Answers follow the RFC: a 4xx robots.txt means no rules (everything allowed); a 5xx answer or no
answer at all (unreachable, timed out, refused as a target) means the site is to be left alone.
Rules are matched for the product token `ccscope` (falling back to `*`) by protego, an RFC 9309
parser: the longest matching rule wins (so `Allow: /big/` beats `Disallow: /` for /big/x), `*`
and `$` are patterns, and an Allow wins a tie. (`urllib.robotparser` takes the first rule in file
order and treats `*` and `$` as literal characters.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from protego import Protego  # type: ignore[import-untyped]

from ccscope.crawler.http import CrawlError, SafeClient
from ccscope.errors import TargetRefused
from ccscope.identity import ROBOTS_AGENT
from ccscope.targets import TargetPolicy

MAX_ROBOTS_BYTES = 512 * 1024  # RFC 9309 asks parsers to read at least 500 KiB


class Robots:
    """The robots.txt of the site `base` is on, fetched once through `client`."""

    def __init__(self, client: SafeClient, base: str, deadline: float) -> None:
        self.url = urljoin(base, "/robots.txt")
        self.status: int | None = None
        self.error = ""
        try:
            r = client.request("GET", self.url, max_bytes=MAX_ROBOTS_BYTES, deadline=deadline)
            self.status = r.status
        except (CrawlError, TargetRefused) as e:
            r = None
            self.error = str(e)
        if r is None or r.status >= 500:
            self.parser = parse_robots("User-agent: *\nDisallow: /\n")
        elif r.status >= 400:
            self.parser = parse_robots("")
        else:
            self.parser = parse_robots(r.body.decode("utf-8", errors="replace"))

    def allowed(self, url: str) -> bool:
        return robots_allow(self.parser, url)

    def why_not(self, url: str) -> str:
        """Why `url` may not be fetched (for an error message); "" if it may."""
        if self.allowed(url):
            return ""
        if self.status is None:
            return f"{self.url} could not be fetched ({self.error}); RFC 9309: stay away"
        if self.status >= 500:
            return f"{self.url} answered {self.status}; RFC 9309: stay away"
        return f"{self.url} disallows {urlsplit(url).path or '/'} for {ROBOTS_AGENT}"


def parse_robots(text: str) -> Protego:
    """A robots.txt body, parsed by RFC 9309's rules."""
    return Protego.parse(text)


def robots_allow(parser: Protego, url: str) -> bool:
    """May ccscope fetch `url` under the parsed rules? (Matched on its path and query.)"""
    return bool(parser.can_fetch(url, ROBOTS_AGENT))


@dataclass(frozen=True)
class RobotsAnswer:
    allowed: bool
    robots_url: str
    reason: str = ""  # why not, when not allowed


def check_url(
    url: str,
    *,
    client: SafeClient | None = None,
    lab: bool = False,
    timeout: float = 10.0,
    policy: TargetPolicy | None = None,
) -> RobotsAnswer:
    """May ccscope fetch `url`, by its site's robots.txt? One request (through a SafeClient,
    so the robots.txt host and every redirect hop are vetted by `policy` like any target),
    bounded by `timeout` seconds."""
    own = client is None
    c = client or SafeClient(lab=lab, timeout=timeout, policy=policy)
    try:
        robots = Robots(c, url, time.monotonic() + timeout)
    finally:
        if own:
            c.close()
    why = robots.why_not(url)
    return RobotsAnswer(not why, robots.url, why)
