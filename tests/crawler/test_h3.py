"""HTTP/3 discovery from Alt-Svc (crawler/h3.py)."""

from __future__ import annotations

from ccscope.crawler.h3 import find_h3, h3_endpoint, parse_alt_svc


def test_alt_svc_entries() -> None:
    got = parse_alt_svc('h3=":443"; ma=86400, h3-29=":443"; ma=60, h2="alt.example.com:8443"')
    assert [(a.alpn, a.host, a.port, a.max_age) for a in got] == [
        ("h3", "", 443, 86400),
        ("h3-29", "", 443, 60),
        ("h2", "alt.example.com", 8443, 86400),
    ]
    assert parse_alt_svc("clear") == [] and parse_alt_svc(None) == [] and parse_alt_svc("x" * 5000) == []
    assert parse_alt_svc('h3=":99999", h3="[::1]:notaport"') == []


def test_h3_endpoint_keeps_the_path_and_honours_the_authority() -> None:
    url = "https://www.example.org/videos/big.mp4?x=1"
    assert h3_endpoint('h3=":443"', url) == "https://www.example.org/videos/big.mp4?x=1"
    assert h3_endpoint('h3="cdn.example.org:8443"', url) == "https://cdn.example.org:8443/videos/big.mp4?x=1"
    # drafts the client does not speak, an expired entry, nothing
    assert h3_endpoint('h3-29=":443"', url) is None
    assert h3_endpoint('h3=":443"; ma=0', url) is None
    assert h3_endpoint(None, url) is None


def test_without_a_probe_no_announcement_means_no_h3() -> None:
    offer = find_h3("https://www.example.org/", 'h2=":443"', probe=False)
    assert offer.url is None and "no h3" in offer.how
    assert find_h3("http://www.example.org/a", 'h3=":443"', probe=False).url == "https://www.example.org/a"
