"""Real components for the worker tests: a lab (instance 8), a SQLite store, a Redis server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ccscope.lab.lab import Lab, LabParams
from ccscope.store.core import Store
from tests.lab.lab_testkit import running_lab
from tests.workers.kit import RedisServer

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


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    redis = RedisServer(tmp_path_factory.mktemp("redis"), durable=False)
    try:
        redis.start()
    except RuntimeError as e:
        pytest.fail(str(e))
    try:
        yield redis.url
    finally:
        redis.stop()


def use_broker(app: object, url: str) -> None:
    """Point the Celery app of this process at `url` (broker and result backend), dropping the
    connections and the result backend it holds to another test's broker."""
    app.close()  # type: ignore[attr-defined]
    app.conf.broker_url = app.conf.result_backend = url  # type: ignore[attr-defined]
    app._local.__dict__.pop("backend", None)  # type: ignore[attr-defined]
