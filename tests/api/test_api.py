"""The REST API through FastAPI's TestClient, over a real store (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ccscope.api.app import create_app
from ccscope.crawler.http import USER_AGENT
from ccscope.crawler.robots import RobotsAnswer
from ccscope.store import Store
from ccscope.verdict import Verdict
from tests.crawler.sites import LOOPBACK, Route, serve

TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PUBLIC = "93.184.215.14"


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The public Internet is the one boundary faked: two public names and one that rebinds to
    loopback. Everything else (localhost, literal IPs) goes to the real resolver."""
    real = socket.getaddrinfo
    table = {"www.public-site.com": PUBLIC, "public-site.com": PUBLIC, "evil-rebind.com": "127.0.0.1"}

    def fake(host: str, port: object, *a: object, **kw: object) -> object:
        if host in table:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (table[host], port))]
        return real(host, port, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", fake)


@pytest.fixture
def seeded(store: Store) -> Store:
    store.add_vantage("paris")
    store.add_vantage("tokyo")
    store.import_list("tranco", dt.date(2026, 11, 1), [(1, "public-site.com"), (2, "b.example")], "tranco")
    return store


def allow_all(url: str) -> RobotsAnswer:
    # The faked public sites have no server to ask for robots.txt; the robots.txt rules are
    # tested against real servers (test_queued_urls_obey_robots_txt).
    return RobotsAnswer(True, url)


@pytest.fixture
def client(seeded: Store) -> Iterator[TestClient]:
    app = create_app(seeded, token=TOKEN, lab=False, robots=allow_all)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def _classified(store: Store, domain: str, vantage: str, slot: str, label: str, trace: bytes = b"") -> int:
    m, _ = store.enqueue_measurement(domain, vantage, "tcp", slot)
    store.transition(m.id, "running")
    if trace:
        store.add_trace(m.id, trace)
    store.transition(m.id, "captured")
    v = Verdict(label=label, kind="cca", confidence=0.8, explanation="e", classifier_version="t-1")
    store.record_verdict(m.id, v)
    return m.id


def test_openapi_and_docs(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert {"/v1/domains/{domain}", "/v1/census", "/v1/campaigns", "/v1/measurements"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 200


def test_campaign_crud_needs_token(client: TestClient) -> None:
    body = {
        "name": "weekly",
        "list_name": "tranco",
        "top_n": 100,
        "transports": ["tcp", "quic"],
        "vantages": ["paris", "tokyo"],
        "schedule": "0 3 * * 1",
    }
    r = client.post("/v1/campaigns", json=body)
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"
    assert (
        client.post("/v1/campaigns", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
    )
    r = client.post("/v1/campaigns", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    c = r.json()
    assert c["vantages"] == ["paris", "tokyo"] and c["list_name"] == "tranco" and c["profiles"] == ["default"]
    assert client.post("/v1/campaigns", json=body, headers=AUTH).status_code == 409
    r = client.patch(f"/v1/campaigns/{c['id']}", json={"top_n": 5, "enabled": False}, headers=AUTH)
    assert r.status_code == 200 and (r.json()["top_n"], r.json()["enabled"]) == (5, False)
    assert client.patch(f"/v1/campaigns/{c['id']}", json={"top_n": 6}).status_code == 401
    r = client.patch(f"/v1/campaigns/{c['id']}", json={"schedule": "whenever you like"}, headers=AUTH)
    assert r.status_code == 422 and "cron" in str(r.json()["detail"])
    assert client.patch("/v1/campaigns/999", json={"top_n": 6}, headers=AUTH).status_code == 404
    page = client.get("/v1/campaigns", params={"limit": 1}).json()
    assert page["total"] == 1 and page["items"][0]["top_n"] == 5
    assert client.get(f"/v1/campaigns/{c['id']}").json()["name"] == "weekly"
    bad = dict(body, name="other", vantages=["mars"])
    assert client.post("/v1/campaigns", json=bad, headers=AUTH).status_code == 404
    bad = dict(body, name="other2", transports=["carrier-pigeon"])
    assert client.post("/v1/campaigns", json=bad, headers=AUTH).status_code == 422


def test_writes_refused_without_configured_token(seeded: Store) -> None:
    with TestClient(create_app(seeded, token="", lab=False)) as c:
        r = c.post("/v1/measurements", json={"target": "x.com", "vantage": "paris"}, headers=AUTH)
        assert r.status_code == 403 and "token" in r.json()["detail"]


@pytest.mark.parametrize(
    "raw,ctype",
    [
        (b"{not json", "application/json"),
        (b"[1, 2, 3]", "application/json"),
        (b'{"target": 5, "vantage": null}', "application/json"),
        (b"\xff\xfe\x00garbage", "application/json"),
        (b"target=x.com", "application/x-www-form-urlencoded"),
        (b'{"target": "public-site.com", "vantage": "paris", "surprise": 1}', "application/json"),
        (b'{"target": "public-site.com", "vantage": "../etc"}', "application/json"),
        (b'{"target": "public-site.com", "vantage": "paris", "transport": "sctp"}', "application/json"),
    ],
)
def test_garbage_bodies_are_4xx_json(client: TestClient, raw: bytes, ctype: str, fake_dns: None) -> None:
    r = client.post("/v1/measurements", content=raw, headers={**AUTH, "Content-Type": ctype})
    assert 400 <= r.status_code < 500, r.text
    body = r.json()
    assert body["error"] and "Traceback" not in r.text


def test_huge_payloads_refused(client: TestClient) -> None:
    big = json.dumps({"target": "a" * 2_000_000, "vantage": "paris"}).encode()
    r = client.post("/v1/measurements", content=big, headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"] == "payload_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold on the stream too
        yield b'{"target": "'
        for _ in range(200):
            yield b"a" * 8192
        yield b'", "vantage": "paris"}'

    r = client.post(
        "/v1/measurements", content=chunks(), headers={**AUTH, "Content-Type": "application/json"}
    )
    assert r.status_code == 413
    r = client.post("/v1/measurements", json={"target": "a" * 3000, "vantage": "paris"}, headers=AUTH)
    assert r.status_code == 422


@pytest.mark.parametrize(
    "target",
    [
        "http://10.0.0.1/",
        "192.168.1.10",
        "127.0.0.1",
        "http://[::1]:8080/",
        "http://169.254.169.254/latest/meta-data/",
        "localhost",  # the real resolver says loopback
        "evil-rebind.com",  # a public name whose DNS answers 127.0.0.1
        "ftp://public-site.com/",
        "http://user:pw@public-site.com/",
        "no-such-host.invalid",
    ],
)
def test_non_public_targets_refused(client: TestClient, target: str, fake_dns: None, seeded: Store) -> None:
    r = client.post("/v1/measurements", json={"target": target, "vantage": "paris"}, headers=AUTH)
    assert r.status_code == 422, r.text
    assert r.json()["error"] in ("target_refused", "invalid_request")
    assert seeded.list_measurements() == []


def test_measurement_queued_once_per_idempotency_key(client: TestClient, fake_dns: None) -> None:
    body = {"target": "https://www.public-site.com/big.bin", "vantage": "paris"}
    r1 = client.post("/v1/measurements", json=body, headers={**AUTH, "Idempotency-Key": "req-1"})
    assert r1.status_code == 202, r1.text
    m = r1.json()
    assert (m["state"], m["domain"], m["transport"], m["verdict"]) == (
        "queued",
        "www.public-site.com",
        "tcp",
        None,
    )
    r2 = client.post("/v1/measurements", json=body, headers={**AUTH, "Idempotency-Key": "req-1"})
    assert r2.status_code == 200 and r2.json()["id"] == m["id"]
    r3 = client.post("/v1/measurements", json=body, headers=AUTH)  # no key: a new measurement
    assert r3.status_code == 202 and r3.json()["id"] != m["id"]
    assert client.get(f"/v1/measurements/{m['id']}").json()["url"] == body["target"]
    # A bare domain leaves the choice of object to the crawler, as in a campaign.
    r = client.post("/v1/measurements", json={"target": "public-site.com", "vantage": "paris"}, headers=AUTH)
    assert r.status_code == 202 and r.json()["url"] is None
    r = client.post("/v1/measurements", json={"target": "public-site.com", "vantage": "mars"}, headers=AUTH)
    assert r.status_code == 404


def test_opted_out_site_refused(client: TestClient, fake_dns: None, seeded: Store) -> None:
    seeded.opt_out("public-site.com", "asked")
    r = client.post(
        "/v1/measurements", json={"target": "www.public-site.com", "vantage": "paris"}, headers=AUTH
    )
    assert r.status_code == 409 and r.json()["error"] == "opted_out" and "opted out" in r.json()["detail"]


def test_lab_mode_allows_private_targets(seeded: Store) -> None:
    with (
        serve({"/robots.txt": Route(status=404)}) as site,
        TestClient(create_app(seeded, token=TOKEN, target_policy=LOOPBACK)) as c,
    ):
        r = c.post("/v1/measurements", json={"target": site.base + "obj", "vantage": "paris"}, headers=AUTH)
        assert r.status_code == 202, r.text


def test_queued_urls_obey_robots_txt(seeded: Store) -> None:
    """POST /v1/measurements asks the site's robots.txt (real HTTP servers, lab mode): a
    disallowed URL, a robots.txt answering 5xx and an unreachable one are refused with 422
    `robots_disallowed` and nothing is queued; an opted-out site is refused without being asked."""
    rules = b"User-agent: *\nDisallow: /private/\n\nUser-agent: ccscope\nDisallow: /no-ccscope/\n"
    robots = {"/robots.txt": Route(body=rules, content_type="text/plain")}
    with serve(robots) as site, TestClient(create_app(seeded, token=TOKEN, target_policy=LOOPBACK)) as c:

        def post(target: str) -> Any:
            return c.post("/v1/measurements", json={"target": target, "vantage": "paris"}, headers=AUTH)

        ok = post(site.base + "private-not/big.bin")
        assert ok.status_code == 202 and ok.json()["url"] == site.base + "private-not/big.bin"
        for path in ("no-ccscope/big.bin", "no-ccscope/"):
            r = post(site.base + path)
            assert r.status_code == 422 and r.json()["error"] == "robots_disallowed", r.text
            assert "robots.txt" in r.json()["detail"] and "/no-ccscope/" in r.json()["detail"]
        # The ccscope group is the one that applies to us (RFC 9309): /private/ is not in it.
        assert post(site.base + "private/x").status_code == 202
        assert {ua for _, p, ua in site.log if p == "/robots.txt"} == {USER_AGENT}
    with (
        serve({"/robots.txt": Route(status=503)}) as site,
        TestClient(create_app(seeded, token=TOKEN, target_policy=LOOPBACK)) as c,
    ):
        r = c.post("/v1/measurements", json={"target": site.base + "a.bin", "vantage": "paris"}, headers=AUTH)
        assert r.status_code == 422 and "503" in r.json()["detail"]
    dead = f"http://127.0.0.1:{site.port}/a.bin"  # the server is gone: robots.txt unreachable
    with TestClient(create_app(seeded, token=TOKEN, target_policy=LOOPBACK)) as c:
        r = c.post("/v1/measurements", json={"target": dead, "vantage": "paris"}, headers=AUTH)
        assert r.status_code == 422 and "could not be fetched" in r.json()["detail"]
    assert len(seeded.list_measurements()) == 2
    seeded.opt_out("127.0.0.1", "asked")
    with serve(robots) as site, TestClient(create_app(seeded, token=TOKEN, target_policy=LOOPBACK)) as c:
        r = c.post("/v1/measurements", json={"target": site.base + "x", "vantage": "paris"}, headers=AUTH)
        assert r.status_code == 409 and r.json()["error"] == "opted_out"
        assert site.log == []  # not even robots.txt was asked


def test_measurement_with_trace_and_verdict(client: TestClient, seeded: Store) -> None:
    mid = _classified(seeded, "public-site.com", "paris", "s1", "cubic", trace=b'{"bif": [1, 2, 3]}')
    m = client.get(f"/v1/measurements/{mid}").json()
    assert m["state"] == "classified" and m["verdict"]["label"] == "cubic" and len(m["traces"]) == 1
    r = client.get(m["traces"][0]["href"])
    assert r.status_code == 200 and r.content == b'{"bif": [1, 2, 3]}'
    assert r.headers["etag"] == f'"{m["traces"][0]["sha256"]}"'
    assert client.get(f"/v1/measurements/{mid}/trace").content == r.content
    assert client.get(f"/v1/measurements/{mid}/trace", params={"sha256": "0" * 64}).status_code == 404
    assert client.get(f"/v1/measurements/{mid}/trace", params={"sha256": "../x"}).status_code == 422
    assert client.get("/v1/measurements/424242").status_code == 404
    assert client.get("/v1/measurements/not-a-number").status_code == 422


def test_domain_lookup_and_census(client: TestClient, seeded: Store) -> None:
    _classified(seeded, "public-site.com", "paris", "1", "cubic")
    _classified(seeded, "public-site.com", "paris", "2", "bbr")
    _classified(seeded, "public-site.com", "tokyo", "1", "cubic")
    _classified(seeded, "b.example", "paris", "1", "cubic")
    r = client.get("/v1/domains/Public-Site.com.", params={"limit": 2})
    assert r.status_code == 200
    d = r.json()
    assert d["domain"] == "public-site.com" and d["total"] == 3 and len(d["history"]) == 2
    assert {(v["vantage"], v["label"]) for v in d["latest"]} == {("paris", "bbr"), ("tokyo", "cubic")}
    assert (
        client.get("/v1/domains/public-site.com", params={"offset": 2}).json()["history"][0]["label"]
        == "cubic"
    )
    assert client.get("/v1/domains/unknown.example").status_code == 404
    assert client.get("/v1/domains/not a domain").status_code == 422
    assert client.get("/v1/domains/x", params={"limit": 10**9}).status_code == 422
    rows = client.get("/v1/census", params={"vantage": "paris"}).json()["rows"]
    assert {(r["label"], r["count"], r["total"]) for r in rows} == {("cubic", 2, 3), ("bbr", 1, 3)}
    assert client.get("/v1/census", params={"date_from": "yesterday"}).status_code == 422
    assert client.get("/v1/census", params={"transport": "sctp"}).status_code == 422


def test_internal_errors_hide_details(
    client: TestClient, seeded: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("password=hunter2 at /secret/path")

    monkeypatch.setattr(seeded, "census", boom)
    r = client.get("/v1/census")
    assert r.status_code == 500 and r.json() == {"error": "internal", "detail": "internal error"}
    assert "hunter2" not in r.text


def test_api_does_not_import_capture() -> None:
    code = "import sys, ccscope.api.app; print([m for m in sys.modules if m.startswith('ccscope.capture')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_census_answers_follow_new_verdicts(client: TestClient, seeded: Store) -> None:
    # Census answers are cached per filter; a recorded verdict must show at once all the same.
    _classified(seeded, "public-site.com", "paris", "c1", "cubic")
    first = client.get("/v1/census", params={"vantage": "paris"}).json()["rows"]
    assert [(r["label"], r["count"], r["total"]) for r in first] == [("cubic", 1, 1)]
    assert client.get("/v1/census", params={"vantage": "paris"}).json()["rows"] == first
    _classified(seeded, "b.example", "paris", "c2", "bbr")
    rows = client.get("/v1/census", params={"vantage": "paris"}).json()["rows"]
    assert {(r["label"], r["count"], r["total"], r["share"]) for r in rows} == {
        ("cubic", 1, 2, 0.5),
        ("bbr", 1, 2, 0.5),
    }
    assert client.get("/v1/census", params={"vantage": "tokyo"}).json()["rows"] == []
