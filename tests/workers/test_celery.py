"""Real Redis, real Celery worker processes per vantage point, the real lab; and a worker
SIGKILLed mid-measurement whose measurement still completes exactly once."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ccscope.store.core import Store
from tests.netutil import ccscope_tables
from tests.workers.conftest import CCAS, obj_url

pytestmark = [pytest.mark.netns, pytest.mark.slow]

CELERY = str(Path(sys.executable).with_name("celery"))


class Worker:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc, self.log = proc, log

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        # The whole process group: the worker and the download it is running.
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def app(redis_url: str):
    from ccscope.workers.celery_app import app

    app.conf.broker_url = redis_url
    app.conf.result_backend = redis_url
    return app


@pytest.fixture
def start_worker(lab, store: Store, redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(vantage: str, *, queues: str | None = None, **env: str) -> Worker:
        e = dict(os.environ)
        e.update(
            CCSCOPE_DB_URL=store.url,
            CCSCOPE_TRACE_DIR=str(tmp_path / "traces"),
            CCSCOPE_BROKER_URL=redis_url,
            CCSCOPE_RESULT_URL=redis_url,
            CCSCOPE_LAB="1",
            CCSCOPE_WORKER_PROFILES="A",
            CCSCOPE_WORKER_DIR=str(tmp_path / "work"),
            CCSCOPE_WORKER_TIMEOUT="40",
            CCSCOPE_WORKER_MIN_GAP="0.5",
            CCSCOPE_WORKER_RETRY_BASE="1",
            CCSCOPE_WORKER_RETRY_CAP="4",
        )
        e.update(env)
        log = tmp_path / f"worker-{vantage}-{len(started)}.log"
        proc = subprocess.Popen(
            [
                CELERY,
                "-A",
                "ccscope.workers.celery_app",
                "worker",
                "-Q",
                queues or f"measure.{vantage}",
                "-n",
                f"{vantage}-{len(started)}@%h",
                "-c",
                "2",
                "--pool",
                "threads",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            env=e,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so a kill takes its downloads too
        )
        w = Worker(proc, log)
        started.append(w)
        deadline = time.monotonic() + 40
        while "ready." not in w.text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"celery worker did not start:\n{w.text()[-2000:]}")
            time.sleep(0.2)
        return w

    yield start
    for w in started:
        w.stop()


def group_pids(pgid: int, comm: str) -> list[int]:
    """Pids of process group `pgid` whose command name starts with `comm`."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and name.startswith(comm[:15]):
            out.append(int(d.name))
    return out


def wait_states(store: Store, ids: list[int], states: set[str], timeout: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while True:
        now = {i: store.get_measurement(i).state for i in ids}
        if all(s in states for s in now.values()) or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def test_campaign_through_celery_two_vantages(app, store, start_worker):
    from ccscope.workers.celery_app import measure_task, plan_campaign_task

    store.import_list(
        "lab", dt.date(2026, 11, 1), [(i + 1, f"{c}.lab.test") for i, c in enumerate(CCAS)], "tranco"
    )
    for c in CCAS:
        store.cache_object(f"{c}.lab.test", obj_url(c), 60_000, {"source": "test"}, ttl_seconds=3600)
    camp = store.create_campaign("lab", "lab", 3, ["tcp"], ["default"], ["paris", "tokyo"], "*/30 * * * *")
    paris = start_worker("paris", queues="measure.paris,ccscope.control")
    tokyo = start_worker("tokyo")
    res = plan_campaign_task.apply_async((camp.id, "2026-11-22T03:30"), queue="ccscope.control").get(
        timeout=60
    )
    assert res["planned"] == 6 and res["dispatched"] == 6
    ids = [m.id for m in store.list_measurements()]
    assert len(ids) == 6
    states = wait_states(store, ids, {"classified", "failed"}, timeout=150)
    assert set(states.values()) <= {"classified", "failed"}, (
        states,
        paris.text()[-3000:],
        tokyo.text()[-3000:],
    )
    assert sum(s == "classified" for s in states.values()) >= 4, [
        (i, store.get_measurement(i).failure_reason) for i in ids
    ]
    by_vantage = {store.get_measurement(i).vantage.name for i in ids}
    assert by_vantage == {"paris", "tokyo"}
    for i in ids:
        m = store.get_measurement(i)
        if m.state == "classified":
            assert store.get_verdict(i) is not None and len(m.traces) == 1
    # Planning the same slot again adds nothing; a redelivered measurement task is a no-op.
    again = plan_campaign_task.apply_async((camp.id, "2026-11-22T03:30"), queue="ccscope.control").get(
        timeout=60
    )
    assert again["planned"] == 6 and again["dispatched"] == 0
    done = next(i for i in ids if states[i] == "classified")
    out = measure_task.apply_async((done, "paris"), queue="measure.paris").get(timeout=60)
    assert out["noop"] and out["state"] == "classified"
    assert len(store.list_measurements()) == 6


def test_worker_killed_mid_measurement_completes_exactly_once(app, store, start_worker):
    from ccscope.workers.celery_app import dispatch

    store.add_vantage("berlin")
    # Short redelivery and staleness windows so the test takes seconds, not an hour; both stay
    # longer than one measurement (~4 s), so live runs are never taken for dead ones.
    knobs = {
        "CCSCOPE_VISIBILITY_TIMEOUT": "10",
        "CCSCOPE_WORKER_STALE_AFTER": "12",
        "CCSCOPE_WORKER_MIN_GAP": "0",
        "CCSCOPE_RESTORE_INTERVAL": "2",
    }
    first = start_worker("berlin", **knobs)
    m, _ = store.enqueue_measurement("cubic.lab.test", "berlin", "tcp", "kill-test", url=obj_url("cubic"))
    dispatch(m.id, "berlin")
    assert wait_states(store, [m.id], {"running", "captured", "classified", "failed"}, 30)[m.id] == "running"
    time.sleep(1.0)  # into the download
    links = group_pids(first.proc.pid, "ccscope-link")
    assert links, "no download (ccscope-link) was running when the worker was killed"
    first.kill()
    dead = store.get_measurement(m.id)
    assert dead.state == "running" and dead.attempts == 1, (dead.state, first.text()[-2000:])
    second = start_worker("berlin", **knobs)
    final = wait_states(store, [m.id], {"classified", "failed"}, timeout=90)[m.id]
    done = store.get_measurement(m.id)
    assert final == "classified", (done.failure_reason, second.text()[-3000:])
    assert done.attempts == 2  # the killed run and exactly one re-run
    assert len(done.traces) == 1  # one set of traces (profile A)
    assert store.get_verdict(m.id) is not None
    # Give any further redelivery time to arrive: it must change nothing.
    time.sleep(3)
    after = store.get_measurement(m.id)
    assert after.attempts == 2 and [t.sha256 for t in after.traces] == [t.sha256 for t in done.traces]
    # The killed download's shell is gone too: its namespace died with it, and no nft table
    # of its emulator (named ccscope_<index>_<pid>) is left in the host's ruleset.
    left = [t for t in ccscope_tables() if any(t.endswith(f"_{pid}") for pid in links)]
    assert not left, left
