"""Property-based requests generated from the OpenAPI schema (schemathesis): whatever the input,
no 5xx and every response matches the schema. SQLite only, to keep the run short."""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path
from unittest import mock

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from ccscope.api.app import create_app
from ccscope.crawler.robots import RobotsAnswer
from ccscope.store import Store
from ccscope.verdict import Verdict

TOKEN = "fuzz-token"


def _fake_getaddrinfo(host: str, port: object, *_a: object, **_k: object) -> object:
    # No Internet here: every generated name "resolves" to a public address, except the lab names.
    addr = "127.0.0.1" if host in ("localhost",) else "93.184.215.14"
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (addr, port))]


def _make_app(tmp: Path) -> tuple[Store, object]:
    store = Store(f"sqlite:///{tmp / 'store.db'}", str(tmp / "traces"))
    store.migrate()
    store.add_vantage("paris")
    store.import_list("tranco", dt.date(2026, 11, 1), [(1, "a.example")], "tranco")
    store.create_campaign("c", "tranco", 1, ["tcp"], ["default"], ["paris"], "0 3 * * *")
    m, _ = store.enqueue_measurement("a.example", "paris", "tcp", "s")
    store.transition(m.id, "running")
    store.add_trace(m.id, b"{}")
    store.transition(m.id, "captured")
    store.record_verdict(m.id, Verdict("cubic", "cca", 0.9, "e", "t-1"))
    # The faked public addresses have no server to ask for robots.txt: allow everything.
    return store, create_app(store, token=TOKEN, lab=False, robots=lambda url: RobotsAnswer(True, url))


def test_api_conforms(tmp_path: Path) -> None:
    # Driven by hand rather than through schemathesis' pytest plugin, which does not support
    # pytest 9 yet.
    store, app = _make_app(tmp_path)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    ops = [r.ok() for r in schema.get_all_operations()]
    assert len(ops) >= 8

    with mock.patch.object(socket, "getaddrinfo", _fake_getaddrinfo):
        for op in ops:

            @given(case=op.as_strategy())
            @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            def check(case: schemathesis.Case) -> None:
                case.headers = {**(case.headers or {}), "Authorization": f"Bearer {TOKEN}"}
                response = case.call()
                assert response.status_code < 500, (case.method, case.path, response.text)
                # A schema cannot say which names resolve to public addresses, so a schema-valid
                # target may rightly be refused (422); every other check applies.
                case.validate_response(response, excluded_checks=[positive_data_acceptance])

            check()
    store.close()
