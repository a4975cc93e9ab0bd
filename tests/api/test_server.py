"""The API as deployed: a uvicorn process over the real PostgreSQL started by the test set-up.

(It runs as the test user: on this machine the interpreter lives under /root, so dropping to
`nobody` is not possible here; the API itself needs no privilege.)"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.store.pg import PgCluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(pid: int) -> dict[str, str]:
    text = Path(f"/proc/{pid}/status").read_text()
    return {k: v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(k) for k in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            continue
        out += kids
        todo += kids
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_root_api_refuses_a_store_its_user_cannot_write(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    cmd = [sys.executable, "-m", "ccscope.api.server", "--port", str(_free_port()),
           "--db", f"sqlite:///{private / 'x.db'}", "--traces", str(private / "t")]  # fmt: skip
    pipe = subprocess.PIPE
    p = subprocess.Popen(cmd, stdout=pipe, stderr=pipe, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # it serves instead of refusing: its workers go too
        out, err = p.communicate()
        pytest.fail(f"the API served as root instead of refusing: {out[-500:]}")
    assert p.returncode == 2 and "refusing to serve as root" in out and "cannot write" in out, (out, err)
    assert "Traceback" not in out + err


def test_uvicorn_server_on_postgres(pg_cluster: PgCluster) -> None:
    url = pg_cluster.new_database()
    port = _free_port()
    traces = Path(tempfile.mkdtemp(prefix="ccscope-api-traces-"))
    traces.chmod(0o777)  # started as root, the API serves as the unprivileged ccscope user
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
        if os.geteuid() == 0:  # started as root: nothing that serves is root any more
            for pid in [proc.pid, *_descendants(proc.pid)]:
                uids = _status(pid)["Uid"].split()
                assert "0" not in uids, (pid, uids)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=20)[0].decode(errors="replace")
        shutil.rmtree(traces, ignore_errors=True)
    assert "Traceback" not in out, out
