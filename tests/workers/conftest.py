"""Real components for the worker tests: a lab (instance 8), a SQLite store, a Redis server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ccscope.lab.lab import Lab, LabParams
from ccscope.store.core import Store
from tests.lab.lab_testkit import running_lab

# Not instance 0 (a developer's lab) nor 7 (the capture tests' lab): these coexist.
INSTANCE = 8
CCAS = ("reno", "cubic", "bbr")
OBJ_BYTES = 60_000  # ~3 s through profile A's 200 kbit/s: enough for a verdict, short for tests


def obj_url(cca: str, size: int = OBJ_BYTES) -> str:
    return f"https://{cca}.lab.test/obj/{size}"


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    # Lab mode itself is switched on per worker (lab=True / CCSCOPE_LAB in a subprocess), not
    # for the whole test session, so other tests still see private targets refused.
    params = LabParams(ccas=CCAS, delay_ms=10, instance=INSTANCE)
    with running_lab(tmp_path_factory.mktemp("workers-lab"), params) as lab:
        yield lab


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'ccscope.db'}", str(tmp_path / "traces"))
    s.migrate()
    s.add_vantage("paris")
    s.add_vantage("tokyo")
    try:
        yield s
    finally:
        s.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    d = tmp_path_factory.mktemp("redis")
    log = (d / "redis.log").open("wb")
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(d),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"redis-server did not start: {(d / 'redis.log').read_text()[-500:]}")
        time.sleep(0.1)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def use_broker(app: object, url: str) -> None:
    """Point the Celery app of this process at `url` (broker and result backend), dropping the
    connections and the result backend it holds to another test's broker."""
    app.close()  # type: ignore[attr-defined]
    app.conf.broker_url = app.conf.result_backend = url  # type: ignore[attr-defined]
    app._local.__dict__.pop("backend", None)  # type: ignore[attr-defined]
