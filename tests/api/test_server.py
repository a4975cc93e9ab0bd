"""The API as deployed: a uvicorn process over the real PostgreSQL started by the test set-up.

(It runs as the test user: on this machine the interpreter lives under /root, so dropping to
`nobody` is not possible here; the API itself needs no privilege.)"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.store.pg import PgCluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_uvicorn_server_on_postgres(pg_cluster: PgCluster) -> None:
    url = pg_cluster.new_database()
    port = _free_port()
    traces = Path(tempfile.mkdtemp(prefix="ccscope-api-traces-"))
    cmd = [
        sys.executable,
        "-m",
        "ccscope.api.server",
        "--port",
        str(port),
        "--db",
        url,
        "--traces",
        str(traces),
    ]
    env = {**os.environ, "CCSCOPE_API_TOKEN": "tok", "CCSCOPE_LAB": "", "HOME": str(traces)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=str(traces))
    base = f"http://127.0.0.1:{port}"
    try:
        # Worker processes import the app on start: seconds on a busy machine.
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(base + "/openapi.json", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the API did not come up"
            time.sleep(0.2)
        assert httpx.get(base + "/v1/census").json() == {"rows": []}
        r = httpx.post(base + "/v1/campaigns", json={}, headers={"Authorization": "Bearer tok"})
        assert r.status_code == 422 and r.json()["error"] == "invalid_request"
        r = httpx.post(
            base + "/v1/measurements",
            json={"target": "http://127.0.0.1/", "vantage": "paris"},
            headers={"Authorization": "Bearer tok"},
        )
        assert r.status_code == 422 and r.json()["error"] == "target_refused"
        assert httpx.get(base + "/v1/domains/nothing.example").status_code == 404
    finally:
        proc.terminate()
        out = proc.communicate(timeout=20)[0].decode(errors="replace")
        shutil.rmtree(traces, ignore_errors=True)
    assert "Traceback" not in out, out
