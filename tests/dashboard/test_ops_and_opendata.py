"""/health, /metrics and the open-data downloads over the seeded store; `ccscope export` gives
the same bytes as the API."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
from fastapi.testclient import TestClient

from ccscope.api.app import create_app
from ccscope.export import trace_from_parquet
from ccscope.store import Store
from ccscope.trace import Trace
from ccscope.verdict import Verdict


def _client(store: Store) -> TestClient:
    return TestClient(create_app(store, token="t"), raise_server_exceptions=False)


def test_health_and_metrics(seeded_store: tuple[Store, dict[str, Verdict]], monkeypatch) -> None:
    store, _ = seeded_store
    monkeypatch.delenv("CCSCOPE_BROKER_URL", raising=False)
    c = _client(store)
    r = c.get("/health")
    assert r.status_code == 200 and r.json()["store"] == "ok"
    c.get("/domains/shop.example")
    text = c.get("/metrics").text
    assert 'ccscope_http_requests_total{method="GET",route="/domains/{domain}",status="200"} 1.0' in text
    assert "ccscope_http_request_seconds_bucket" in text
    assert 'ccscope_measurements{state="classified"} 36.0' in text
    assert 'ccscope_verdicts{label="cubic"} 12.0' in text
    assert 'ccscope_queue_depth{queue="store"} 0.0' in text
    # a broker that does not answer makes the service unhealthy, and says which part
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("CCSCOPE_BROKER_URL", f"redis://127.0.0.1:{port}/0")
    r = _client(store).get("/health")
    assert r.status_code == 503 and r.json()["broker"].startswith("unreachable")


def test_census_downloads_match_the_export_command(
    seeded_store: tuple[Store, dict[str, Verdict]], tmp_path: Path
) -> None:
    store, _ = seeded_store
    c = _client(store)
    api_csv = c.get("/v1/census.csv", params={"campaign_id": 1})
    assert api_csv.status_code == 200 and api_csv.headers["content-type"].startswith("text/csv")
    lines = api_csv.text.splitlines()
    assert lines[0].startswith("measurement_id,campaign_id,domain,vantage")
    assert len(lines) == 1 + 36  # 6 sites x 2 vantage points x 3 days
    assert any(",bank.example," in ln and ",unknown,unknown,Vegas," in ln for ln in lines)
    out = tmp_path / "c.csv"
    cli = [sys.executable, "-m", "ccscope.cli", "export", "census", "--campaign", "1", "--db", store.url]
    r = subprocess.run([*cli, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == api_csv.content
    pq_api = c.get("/v1/census.parquet", params={"campaign_id": 1, "level": "shares"})
    table = pq.read_table(io.BytesIO(pq_api.content))
    assert table.column_names == ["date", "vantage", "transport", "label", "count", "total", "share"]
    assert sum(table.column("count").to_pylist()) == 36
    r = subprocess.run(
        [*cli, "--level", "shares", "--format", "parquet", "--out", str(tmp_path / "c.parquet")],
        capture_output=True,
        timeout=120,
    )
    assert r.returncode == 0 and (tmp_path / "c.parquet").read_bytes() == pq_api.content


def test_trace_parquet_round_trips(seeded_store: tuple[Store, dict[str, Verdict]]) -> None:
    store, _ = seeded_store
    r = _client(store).get("/v1/measurements/1/trace.parquet")
    assert r.status_code == 200
    back = trace_from_parquet(r.content)
    m = store.get_measurement(1)
    orig = Trace.from_dict(json.loads(store.read_trace(m.traces[0].sha256)))
    assert back.to_dict() == orig.to_dict()
    assert _client(store).get("/v1/measurements/999/trace.parquet").status_code == 404


def test_dashboard_404_and_static(seeded_store: tuple[Store, dict[str, Verdict]]) -> None:
    store, _ = seeded_store
    c = _client(store)
    r = c.get("/domains/never-measured.example")
    assert r.status_code == 404 and "text/html" in r.headers["content-type"]
    assert c.get("/domains/bad..name").status_code == 404
    assert c.get("/static/dashboard.css").headers["content-type"].startswith("text/css")
    assert c.get("/static/../app.py").status_code == 404
    assert (
        c.get("/domains", params={"q": "https://Shop.Example/x"}, follow_redirects=False).headers["location"]
        == "/domains/shop.example"
    )
