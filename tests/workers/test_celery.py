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
from tests.workers.kit import GroupProcess, RedisServer, group_pids

pytestmark = [pytest.mark.netns, pytest.mark.slow]

CELERY = str(Path(sys.executable).with_name("celery"))


@pytest.fixture
def app(redis_url: str):
    from ccscope.workers.celery_app import app

    app.conf.broker_url = redis_url
    app.conf.result_backend = redis_url
    return app


@pytest.fixture
def start_worker(lab, store: Store, redis_url: str, tmp_path: Path) -> Iterator[Callable[..., GroupProcess]]:
    started: list[GroupProcess] = []

    def start(vantage: str, *, queues: str | None = None, **env: str) -> GroupProcess:
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
        w = GroupProcess(
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
            log,
            e,
        )
        w.start()  # its own process group, so a kill takes its downloads too
        started.append(w)
        if not w.wait_for("ready.", timeout=40):
            pytest.fail(f"celery worker did not start:\n{w.text()[-2000:]}")
        return w

    yield start
    for w in started:
        w.stop()


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


def _net_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _holders_of(ns: str) -> list[int]:
    """Pids still in (or holding open) the network namespace `ns`, e.g. 'net:[4026532801]'."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (_net_ns(int(d.name)) == ns or ns in _fd_targets(d)):
            out.append(int(d.name))
    return out


def _fd_targets(proc: Path) -> set[str]:
    try:
        return {os.readlink(f) for f in (proc / "fd").iterdir()}
    except OSError:
        return set()


def _shell_index(link_pid: int) -> int | None:
    """The shell index a running ccscope-link holds (its /run/ccscope/shells/<i>.lock)."""
    for lock in Path("/run/ccscope/shells").glob("*.lock"):
        try:
            if int(lock.read_text().split()[0]) == link_pid:
                return int(lock.stem)
        except (OSError, ValueError, IndexError):
            continue
    return None


def test_worker_killed_alone_leaves_no_orphans_and_its_scratch_is_swept(app, store, start_worker, tmp_path):
    """kill -9 of the worker process alone, as the OOM killer or a crash does it (not its whole
    process group): the ccscope-link it started and the download inside die with it, their
    namespace, TUN device and nft table go, and the next worker removes the killed run's
    scratch (its pcap) before taking work. The measurement still completes."""
    from ccscope.workers.celery_app import dispatch
    from tests.netutil import TCP_CLIENT_COMMS, leftovers_of

    store.add_vantage("oslo")
    knobs = {
        "CCSCOPE_VISIBILITY_TIMEOUT": "10",
        "CCSCOPE_WORKER_STALE_AFTER": "12",
        "CCSCOPE_WORKER_MIN_GAP": "0",
        "CCSCOPE_RESTORE_INTERVAL": "2",
    }
    first = start_worker("oslo", **knobs)
    # ~12 s through profile A: a link that outlived its worker would still be downloading when
    # the check below gives up on it (a link that dies with its parent goes in a fraction of a
    # second), so a download that merely finished cannot pass for one that was stopped.
    url = obj_url("reno", 300_000)
    m, _ = store.enqueue_measurement("reno.lab.test", "oslo", "tcp", "orphan-test", url=url)
    dispatch(m.id, "oslo")
    deadline = time.monotonic() + 30
    links: list[int] = []
    fetch_pid = None
    while time.monotonic() < deadline and fetch_pid is None:
        links = group_pids(first.proc.pid, "ccscope-link")
        inner = [p for link in links for p in _descendants(link) if _comm(p).startswith(TCP_CLIENT_COMMS)]
        fetch_pid = inner[0] if inner else None
        time.sleep(0.1)
    assert links and fetch_pid, f"no download was running:\n{first.text()[-2000:]}"
    ns = _net_ns(fetch_pid)
    shells = [(pid, _shell_index(pid)) for pid in links]
    scratch = list((tmp_path / "work" / "oslo").iterdir())
    assert len(scratch) == 1 and scratch[0].is_dir(), scratch

    os.kill(first.proc.pid, signal.SIGKILL)  # the worker only: its children are not signalled
    first.proc.wait(10)
    deadline = time.monotonic() + 5
    alive = [*links, fetch_pid]
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if Path(f"/proc/{p}").exists() and "Z" not in _state(p)]
        time.sleep(0.2)
    assert not alive, f"outlived their worker: {[(p, _cmdline(p)) for p in alive]}"
    assert ns is not None and not _holders_of(ns), f"network namespace {ns} still held"
    for pid, idx in shells:
        assert idx is not None
        left = leftovers_of({"shell": {"index": idx, "pid": pid, "outer_dev": f"ccs{idx}o"}})
        assert not left, left
    assert scratch[0].exists()  # nothing has swept it yet

    second = start_worker("oslo", **knobs)
    assert not scratch[0].exists(), f"the killed run's scratch stayed:\n{second.text()[-2000:]}"
    final = wait_states(store, [m.id], {"classified", "failed"}, timeout=90)[m.id]
    done = store.get_measurement(m.id)
    assert final == "classified", (done.failure_reason, second.text()[-3000:])
    assert done.attempts == 2 and len(done.traces) == 1


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rindex(")") + 2 :].split()[0]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


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


def test_broker_restart_mid_campaign_loses_nothing(lab, store, tmp_path):
    """The broker goes away while measurements run and comes back: the supervised worker
    (`ccscope worker`) reconnects or is restarted, and every measurement ends classified
    exactly once (one verdict, one set of traces); nothing is left queued or running. The
    messages are sent from a child process: this process's Celery app keeps its connections
    (and would keep them to this test's broker once it is gone)."""
    broker = RedisServer(tmp_path / "redis")  # append-only, fsync always: a restart keeps its queues
    broker.start()

    e = dict(os.environ)  # the lab's state directory among it
    e.update(
        CCSCOPE_DB_URL=store.url,
        CCSCOPE_TRACE_DIR=str(tmp_path / "traces"),
        CCSCOPE_BROKER_URL=broker.url,
        CCSCOPE_RESULT_URL=broker.url,
        CCSCOPE_LAB="1",
        CCSCOPE_WORKER_DIR=str(tmp_path / "work"),
        CCSCOPE_WORKER_TIMEOUT="40",
        CCSCOPE_WORKER_MIN_GAP="0",
        CCSCOPE_WORKER_RETRY_BASE="1",
        CCSCOPE_WORKER_RETRY_CAP="4",
        CCSCOPE_VISIBILITY_TIMEOUT="20",
        CCSCOPE_RESTORE_INTERVAL="2",
        CCSCOPE_WORKER_STALE_AFTER="12",
    )
    cmd = [sys.executable, "-c", "from ccscope.cli import main; raise SystemExit(main())", "worker"]
    cmd += ["--vantage", "paris", "--concurrency", "2", "--profiles", "A"]
    w = GroupProcess(cmd, tmp_path / "worker.log", e)
    w.start()
    try:
        assert w.wait_for("ready.", timeout=60), w.text()[-2000:]
        ids = []
        for i, c in enumerate(CCAS * 2):
            m, _ = store.enqueue_measurement(f"{c}.lab.test", "paris", "tcp", f"broker-{i}", url=obj_url(c))
            ids.append(m.id)
        send = f"from ccscope.workers.celery_app import dispatch\nfor i in {ids!r}: dispatch(i, 'paris')"
        subprocess.run([sys.executable, "-c", send], env=e, check=True, timeout=60)
        deadline = time.monotonic() + 30
        while not any(store.get_measurement(i).state == "running" for i in ids):
            assert time.monotonic() < deadline, w.text()[-2000:]
            time.sleep(0.1)
        broker.stop()  # mid-download: the worker's connection, its acks and retries all fail
        time.sleep(3)
        broker.start()
        states = wait_states(store, ids, {"classified", "failed"}, timeout=240)
        assert set(states.values()) == {"classified"}, (
            [(i, store.get_measurement(i).failure_reason) for i in ids],
            w.text()[-3000:],
        )
        for i in ids:
            m = store.get_measurement(i)
            assert len(m.traces) == 1 and store.get_verdict(i) is not None
        assert "Connection to broker lost" in w.text() or "restarting in" in w.text()
    finally:
        w.stop()
        broker.stop()
