"""Finding 1 (and 6's IPv6 forms): lab mode widens the targets by the lab's own prefixes only,
and every redirect hop is vetted again, in every client. A hostile lab host in a namespace of
our own redirects to internal listeners (loopback, private, link-local, CGNAT); each client runs
inside that namespace and must never reach them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hardening.kit import INTERNAL, LISTEN_PORT, HostileNet, hostile_net, run_in_ns

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileNet]:
    with hostile_net(tmp_path_factory.mktemp("ssrf")) as n:
        yield n


@pytest.fixture(autouse=True)
def _clear(net: HostileNet) -> None:
    net.clear()


KINDS = sorted(INTERNAL)


def _clients() -> list[str]:
    from ccscope.capture.transports.tcp import tcp_get_built

    built = tcp_get_built()
    return ["python"] + ([str(built)] if built else [])


@pytest.mark.parametrize("client", _clients(), ids=lambda c: "python" if c == "python" else "compiled")
@pytest.mark.parametrize("kind", KINDS)
def test_measure_fetch_refuses_a_redirect_into_the_host(net: HostileNet, kind: str, client: str) -> None:
    """`measure`'s download clients, the Python one and the compiled one (as run inside the
    shell: `--lab`), follow the lab host's redirect only to vet it: an internal listener never
    sees a request."""
    cmd = ["sys.executable", '"-m"', '"ccscope.capture.fetch"'] if client == "python" else [repr(client)]
    out = run_in_ns(
        net,
        f"""
        import subprocess, sys
        p = subprocess.run([{", ".join(cmd)}, "--lab",
                            "{net.url(f"/to/{kind}/secret")}"], capture_output=True, text=True)
        print(p.returncode); print(p.stdout.strip())
        """,
    )
    code, doc = out.strip().splitlines()[-2:]
    res = json.loads(doc)
    assert code == "3" and res["error_kind"] == "target_refused", res
    assert "lab's own prefixes" in res["error"]
    assert net.internal_hits() == []
    assert [h["path"] for h in net.hits()] == [f"/to/{kind}/secret"]  # the lab host itself is fine


@pytest.mark.parametrize("kind", KINDS)
def test_crawler_client_refuses_a_redirect_into_the_host(net: HostileNet, kind: str) -> None:
    out = run_in_ns(
        net,
        f"""
        import json
        from ccscope.crawler.http import SafeClient
        from ccscope.errors import TargetRefused
        with SafeClient(lab=True) as c:
            try:
                r = c.request("GET", "{net.url(f"/to/{kind}/secret")}")
                print(json.dumps({{"status": r.status, "body": r.body.decode()}}))
            except TargetRefused as e:
                print(json.dumps({{"refused": str(e)}}))
        """,
    )
    res = json.loads(out.strip().splitlines()[-1])
    assert "refused" in res, res
    assert net.internal_hits() == []


def test_direct_internal_targets_refused_in_lab_mode(net: HostileNet) -> None:
    urls = [f"http://{a}:{LISTEN_PORT}/x" for a in INTERNAL.values()]
    v6 = ("::1", "fec0::2", "2002:7f00:1::", "64:ff9b::7f00:1")
    urls += [f"http://[{a}]:{LISTEN_PORT}/x" for a in v6]
    out = run_in_ns(
        net,
        f"""
        import json
        from ccscope.capture.fetch import fetch
        from ccscope.errors import TargetRefused
        res = {{}}
        for u in {urls!r}:
            try:
                fetch(u, lab=True, timeout=5)
                res[u] = "fetched"
            except TargetRefused as e:
                res[u] = "refused"
            except Exception as e:
                res[u] = type(e).__name__
        print(json.dumps(res))
        """,
    )
    res = json.loads(out.strip().splitlines()[-1])
    assert set(res.values()) == {"refused"}, res
    assert net.internal_hits() == []


def test_api_lab_mode_refuses_internal_targets_and_robots_redirects(net: HostileNet, tmp_path: Path) -> None:
    """A lab-mode API: a private, loopback or link-local target is a 422 (not queued, its
    robots.txt not fetched from the API host), and a lab host whose robots.txt redirects to the
    API host's loopback is not followed there (robots unreachable: 422 robots_disallowed)."""
    db = tmp_path / "api.db"
    out = run_in_ns(
        net,
        f"""
        import json
        from fastapi.testclient import TestClient
        from ccscope.api.app import create_app
        from ccscope.store import Store
        st = Store("sqlite:///{db}", "{tmp_path / "traces"}")
        st.migrate()
        st.add_vantage("paris")
        auth = {{"Authorization": "Bearer t"}}
        res = {{}}
        with TestClient(create_app(st, token="t", lab=True)) as c:
            for kind, a in {INTERNAL!r}.items():
                body = {{"target": f"http://{{a}}:{LISTEN_PORT}/obj", "vantage": "paris"}}
                r = c.post("/v1/measurements", json=body, headers=auth)
                res[kind] = [r.status_code, r.json().get("error")]
            body = {{"target": "{net.url("/obj")}", "vantage": "paris"}}
            r = c.post("/v1/measurements", json=body, headers=auth)
            res["robots-redirect"] = [r.status_code, r.json().get("error")]
        res["queued"] = len(st.list_measurements())
        print(json.dumps(res))
        """,
    )
    res = json.loads(out.strip().splitlines()[-1])
    for kind in INTERNAL:
        assert res[kind] == [422, "target_refused"], res
    assert res["robots-redirect"] == [422, "robots_disallowed"], res
    assert res["queued"] == 0
    assert net.internal_hits() == []
    assert [h["path"] for h in net.hits()] == ["/robots.txt"]
