"""robots.txt by RFC 9309: the two cases urllib.robotparser got wrong, through the parser and
through a real fetch of a site's robots.txt (check_url on 127.0.0.1, a policy that allows it)."""

from __future__ import annotations

import pytest

from ccscope.crawler.robots import check_url, parse_robots, robots_allow
from tests.crawler.sites import LOOPBACK, Route, serve

LONGEST_MATCH = "User-agent: *\nDisallow: /\nAllow: /big/\n"
PATTERN = "User-agent: *\nDisallow: /*.bin$\n"


def test_longest_match_wins_over_file_order() -> None:
    p = parse_robots(LONGEST_MATCH)
    assert robots_allow(p, "https://example.com/big/file.bin")
    assert not robots_allow(p, "https://example.com/other/file.bin")
    assert not robots_allow(p, "https://example.com/")


def test_wildcard_and_end_anchor() -> None:
    p = parse_robots(PATTERN)
    assert not robots_allow(p, "https://example.com/a/file.bin")
    assert robots_allow(p, "https://example.com/a/file.bin?x=1")  # $ anchors the end of path+query
    assert robots_allow(p, "https://example.com/a/file.bin.txt")
    assert robots_allow(p, "https://example.com/a/page.html")


def test_product_token_group_beats_star() -> None:
    p = parse_robots("User-agent: *\nDisallow: /\n\nUser-agent: ccscope\nAllow: /\n")
    assert robots_allow(p, "https://example.com/anything")


@pytest.mark.parametrize(
    ("body", "path", "allowed"),
    [(LONGEST_MATCH, "/big/file.bin", True), (PATTERN, "/a/file.bin", False)],
)
def test_check_url_fetches_and_applies_the_rfc(body: str, path: str, allowed: bool) -> None:
    with serve({"/robots.txt": Route(body=body.encode(), content_type="text/plain")}) as s:
        answer = check_url(s.base.rstrip("/") + path, policy=LOOPBACK, timeout=5)
    assert answer.allowed is allowed
    assert allowed or "disallows" in answer.reason
