"""The crawler against real HTTP servers on 127.0.0.1 (lab mode); only public DNS is faked."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ccscope.capture.fetch import USER_AGENT as FETCH_USER_AGENT
from ccscope.crawler.discover import Limits, extract_links, find_largest_object
from ccscope.crawler.http import USER_AGENT as CRAWLER_USER_AGENT
from ccscope.crawler.http import CrawlError, SafeClient
from ccscope.crawler.lists import ListFormatError, date_from_name, parse_list
from ccscope.crawler.site import SitePick, pick_object
from ccscope.errors import TargetRefused
from ccscope.identity import USER_AGENT
from ccscope.store import Store
from tests.crawler.sites import LOOPBACK, Route, Site, serve

KB = 1024


def _html(*links: str) -> Route:
    body = "<html><body>" + "".join(f'<a href="{u}">x</a>' for u in links) + "</body></html>"
    return Route(body=body.encode(), content_type="text/html; charset=utf-8")


@pytest.fixture
def site() -> Iterator[Site]:
    routes = {
        "/robots.txt": Route(body=b"User-agent: *\nDisallow: /private/\n", content_type="text/plain"),
        "/": _html(
            "/page1.html",
            "/small.bin",
            "/big.bin",
            "/private/huge.bin",
            "http://cdn.test/x.bin",
            "/nohead.bin",
            "mailto:a@b.c",
            "/missing.bin",
        ),
        "/page1.html": _html("/deep.bin", "/page2.html", "/big.bin"),
        "/page2.html": _html("/level3.bin"),
        "/small.bin": Route(size=10 * KB),
        "/big.bin": Route(size=600 * KB),
        "/nohead.bin": Route(size=700 * KB, head_allowed=False),
        "/deep.bin": Route(size=900 * KB),
        "/private/huge.bin": Route(size=5000 * KB),
        "/level3.bin": Route(size=3000 * KB),
    }
    with serve(routes) as s:
        yield s


def test_finds_largest_object_two_levels_deep(site: Site) -> None:
    with SafeClient(policy=LOOPBACK) as c:
        d = find_largest_object(site.base, client=c)
    assert d.url == site.base + "deep.bin" and d.size == 900 * KB and d.meets_preference
    sizes = {c.url.rsplit("/", 1)[1]: c.size for c in d.top}
    assert sizes["nohead.bin"] == 700 * KB  # HEAD refused: the range GET found its size
    assert "level3.bin" not in sizes  # three levels down: out of reach
    assert "huge.bin" not in sizes and d.robots_skipped >= 1  # robots.txt obeyed
    paths = [p for _, p, _ in site.log]
    assert "/private/huge.bin" not in paths
    assert ("GET", "/page2.html") not in [(m, p) for m, p, _ in site.log]  # level 2 is probed, not parsed
    assert CRAWLER_USER_AGENT is USER_AGENT is FETCH_USER_AGENT  # one identity, defined once
    assert all(ua == USER_AGENT for _, _, ua in site.log)
    assert "contact" in USER_AGENT or "+http" in USER_AGENT


def test_prefers_big_but_falls_back(site: Site) -> None:
    with SafeClient(policy=LOOPBACK) as c:
        d = find_largest_object(site.base, client=c, limits=Limits(prefer_bytes=10_000 * KB))
    assert d.url == site.base + "deep.bin" and not d.meets_preference
    # A size cap keeps absurdly big objects out.
    with SafeClient(policy=LOOPBACK) as c:
        d = find_largest_object(site.base, client=c, limits=Limits(max_object_bytes=650 * KB))
    assert d.url == site.base + "big.bin"


def test_robots_disallow_all() -> None:
    with serve({"/robots.txt": Route(body=b"User-agent: *\nDisallow: /\n"), "/": _html("/a.bin")}) as s:
        with SafeClient(policy=LOOPBACK) as c:
            d = find_largest_object(s.base, client=c)
        assert d.url is None and [p for _, p, _ in s.log] == ["/robots.txt"]


def test_robots_5xx_means_stay_away() -> None:
    with serve({"/robots.txt": Route(status=503), "/": _html()}) as s, SafeClient(policy=LOOPBACK) as c:
        assert find_largest_object(s.base, client=c).url is None


def test_cached_per_site_with_ttl(site: Site, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "t"))
    store.migrate()
    p = pick_object(store, "lab.example", policy=LOOPBACK, base_urls=[site.base])
    assert p == SitePick(site.base + "deep.bin", 900 * KB, False)
    n = len(site.log)
    assert pick_object(store, "lab.example", policy=LOOPBACK, base_urls=[site.base]).cached is True
    assert len(site.log) == n  # served from the store, no requests
    pick_object(store, "other.example", policy=LOOPBACK, ttl_seconds=-1, base_urls=[site.base])
    assert pick_object(store, "other.example", policy=LOOPBACK, base_urls=[site.base]).cached is False


def test_endless_body_is_capped() -> None:
    with serve({"/": Route(endless=True, content_type="text/html")}) as s, SafeClient(policy=LOOPBACK) as c:
        t0 = time.monotonic()
        r = c.request("GET", s.base, max_bytes=256 * KB)
        assert r.truncated and len(r.body) == 256 * KB
        r = c.request("GET", s.base, max_bytes=10**9, deadline=time.monotonic() + 1.0)
        assert r.truncated and time.monotonic() - t0 < 10
        d = find_largest_object(s.base, client=c, limits=Limits(page_bytes=64 * KB))
        assert d.pages == 1


def test_redirect_loop_bounded() -> None:
    routes = {"/loop": Route(status=302, headers={"Location": "/loop"})}
    with serve(routes) as s, SafeClient(policy=LOOPBACK) as c, pytest.raises(CrawlError, match="redirects"):
        c.request("GET", s.base + "loop")


def test_huge_redirect_refused() -> None:
    routes = {"/r": Route(status=302, headers={"Location": "/" + "a" * 5000})}
    with serve(routes) as s, SafeClient(policy=LOOPBACK) as c, pytest.raises(TargetRefused):
        c.request("GET", s.base + "r")


def test_loopback_refused_outside_lab(site: Site) -> None:
    with SafeClient(lab=False) as c:
        with pytest.raises(TargetRefused):
            c.request("GET", site.base)
        with pytest.raises(TargetRefused):  # real DNS: localhost resolves to loopback
            c.request("GET", f"http://localhost:{site.port}/")
    assert site.log == []


def test_public_name_resolving_to_private_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The public Internet is the one boundary faked: a "public" name whose DNS says 10.0.0.5.
    real = socket.getaddrinfo

    def fake(host: str, *a: object, **kw: object) -> object:
        if host == "rebind.example.com":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.5", 80))]
        return real(host, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    with SafeClient(lab=False) as c, pytest.raises(TargetRefused, match="private"):
        c.request("GET", "http://rebind.example.com/")


def test_redirect_to_other_site_not_a_candidate() -> None:
    with serve({"/robots.txt": Route(status=404), "/": _html("/x.bin")}) as other:
        elsewhere = other.base.replace("127.0.0.1", "localhost") + "x.bin"
        routes = {
            "/robots.txt": Route(status=404),
            "/": _html("/go.bin"),
            "/go.bin": Route(status=302, headers={"Location": elsewhere}),
        }
        with serve(routes) as s, SafeClient(policy=LOOPBACK) as c:
            d = find_largest_object(s.base, client=c)
        assert d.url != other.base + "x.bin"
        assert all(not c.url.startswith("http://localhost") for c in d.top)


def test_extract_links_hostile_html() -> None:
    html = b'<a href="/a">x</a><img src="//cdn.test/i.png"><a href="javascript:alert(1)">' + b"<" * 10000
    links = extract_links(html, "https://www.site.test/dir/")
    assert links == ["https://www.site.test/a", "https://cdn.test/i.png"]
    assert extract_links(b"\xff\xfe<<<>>>", "https://x.test/") == []


def test_parse_tranco_and_alexa() -> None:
    t = parse_list("1,google.com\n2,Example.ORG.\n3,bad domain\n4,xn--bcher-kva.example\n\n")
    assert t.source_format == "tranco" and t.skipped == 1
    assert t.entries == [(1, "google.com"), (2, "example.org"), (4, "xn--bcher-kva.example")]
    a = parse_list("Domain,Rank,Visits\nhttps://www.a.com/,2,10\nb.com,1,5\n")
    assert a.source_format == "alexa" and a.entries == [(1, "b.com"), (2, "www.a.com")]
    with pytest.raises(ListFormatError):
        parse_list("")
    with pytest.raises(ListFormatError):
        parse_list("\x00\x01,\x02\n" * 10)
    assert date_from_name("tranco_2026-11-01.csv") == dt.date(2026, 11, 1)
    assert date_from_name("top-1m.csv") is None


def test_list_into_store(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "t"))
    store.migrate()
    lines = "\n".join(f"{i},site{i}.example" for i in range(1, 20001))
    p = parse_list(lines)
    sl = store.import_list("tranco", dt.date(2026, 11, 1), p.entries, p.source_format)
    assert sl.size == 20000 and store.top_sites(sl.id, 3) == [
        "site1.example",
        "site2.example",
        "site3.example",
    ]


def _tls_for(name: str, tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a self-signed certificate for `name`, and a client trusting it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (tmp / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "k.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp / "c.pem", tmp / "k.pem")
    return server, ssl.create_default_context(cafile=str(tmp / "c.pem"))


def test_https_pinned_address_checks_the_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The connection goes to the vetted address, yet TLS (SNI and certificate) uses the name.
    # (Not a *.lab.test name: in lab mode those resolve through a running lab's hosts file.)
    server_ctx, client_ctx = _tls_for("pinned.example", tmp_path)
    real = socket.getaddrinfo

    def fake(host: str, *a: object, **kw: object) -> object:
        if host in ("pinned.example", "wrong.example"):
            return real("127.0.0.1", *a, **kw)  # type: ignore[arg-type]
        return real(host, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    routes = {"/": Route(body=b"hi", content_type="text/plain")}
    with serve(routes, tls=server_ctx) as s, SafeClient(policy=LOOPBACK, verify=client_ctx) as c:
        r = c.request("GET", f"https://pinned.example:{s.port}/")
        assert r.status == 200 and r.body == b"hi"
        with pytest.raises(CrawlError):
            c.request("GET", f"https://wrong.example:{s.port}/")  # certificate is for pinned.example


def test_ttl_zero_asks_afresh_and_no_url_says_why(tmp_path: Path) -> None:
    """`crawl --ttl 0` must not answer from the cache, and a site with nothing to download
    says why (it printed `url: null` alone)."""
    store = Store(f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "t"))
    store.migrate()
    with serve({"/robots.txt": Route(body=b"User-agent: *\nDisallow: /\n"), "/": _html("/a.bin")}) as s:
        p = pick_object(store, "shut.example", policy=LOOPBACK, base_urls=[s.base])
        assert p.url is None and not p.cached
        assert p.reason.startswith("robots.txt:") and "disallows /" in p.reason
        again = pick_object(store, "shut.example", policy=LOOPBACK, base_urls=[s.base])
        assert again.cached and again.reason == p.reason  # the cached answer keeps its reason
        n = len(s.log)
        fresh = pick_object(store, "shut.example", policy=LOOPBACK, base_urls=[s.base], ttl_seconds=0)
        assert not fresh.cached and len(s.log) > n
    with serve({"/": Route(status=404)}) as s:
        p = pick_object(store, "empty.example", policy=LOOPBACK, base_urls=[s.base])
        assert p.url is None and p.reason.startswith("no object found")


def test_tls_context_made_once_per_thread_and_follows_the_lab_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading a CA store costs ~25 ms of CPU: a thread's clients share one context, another
    thread makes its own (httpcore sets ALPN on it for each connection), and a new lab CA gets
    a new context, with which lab clients verify the lab's certificates."""
    import shutil
    import threading

    from ccscope.crawler import http
    from ccscope.targets import TargetPolicy

    mine = http._tls_context(False)
    assert http._tls_context(False) is mine
    theirs: list[ssl.SSLContext] = []
    t = threading.Thread(target=lambda: theirs.append(http._tls_context(False)))
    t.start()
    t.join()
    assert theirs[0] is not mine

    real = socket.getaddrinfo
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        lambda host, *a, **kw: real("127.0.0.1" if host == "pinned.example" else host, *a, **kw),
    )
    lab = tmp_path / "lab"
    (lab / "certs").mkdir(parents=True)
    monkeypatch.setenv("CCSCOPE_LAB_DIR", str(lab))
    policy = TargetPolicy(allowed=LOOPBACK.allowed, lab=True)
    routes = {"/": Route(body=b"hi", content_type="text/plain")}
    seen = []
    for n in (1, 2):  # two labs, one after the other, each with its own CA
        (tmp_path / str(n)).mkdir()
        server_ctx, _ = _tls_for("pinned.example", tmp_path / str(n))
        shutil.copy(tmp_path / str(n) / "c.pem", lab / "certs" / "ca.pem")
        with serve(routes, tls=server_ctx) as s, SafeClient(policy=policy) as c:
            assert c.request("GET", f"https://pinned.example:{s.port}/").body == b"hi"
        seen.append(http._tls_context(True))
        assert http._tls_context(True) is seen[-1]
    assert seen[0] is not seen[1]
    assert http._tls_context(False) is mine  # the default store's context is kept meanwhile
