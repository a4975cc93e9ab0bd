"""Bad input to the distributed engine, each reported with its reason and nothing lost: a
vantage namespace that cannot be built, services a namespace cannot reach, a full trace
store (a real download into a 4 KiB file system), a campaign larger than its list. A worker
killed mid-measurement and a broker restarted mid-campaign are in test_celery.py (real Redis,
real workers); the whole engine under 100 kills and restarts is bench/chaos."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccscope.errors import EXIT_SETUP
from ccscope.store.core import Store
from ccscope.workers.tasks import Transient, WorkerConfig, plan_campaign, run_measurement
from tests.workers.conftest import obj_url

CCSCOPE = [sys.executable, "-c", "from ccscope.cli import main; raise SystemExit(main())"]


def worker(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("CCSCOPE_")}
    e.update(env)
    return subprocess.run([*CCSCOPE, "worker", *args], capture_output=True, text=True, env=e, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (ccscope-link)")
def test_vantage_namespace_that_cannot_be_built_is_reported(tmp_path: Path) -> None:
    # The access path is refused by the emulator before anything is built: the worker says so
    # and takes nothing from its queue (it never reached the broker, which does not exist).
    r = worker(
        "--vantage",
        "far",
        "--netns",
        "--access",
        "--rate bogus",
        CCSCOPE_BROKER_URL="redis://198.18.72.9:1/0",
        CCSCOPE_DB_URL=f"sqlite:///{tmp_path}/s.db",
    )
    assert r.returncode == EXIT_SETUP, r.stderr
    assert "network namespace of vantage point 'far' could not be built" in r.stderr
    assert "--rate" in r.stderr and "nothing was taken from its queue" in r.stderr


def test_namespace_worker_refuses_loopback_services(tmp_path: Path) -> None:
    r = worker(
        "--vantage",
        "far",
        "--netns",
        CCSCOPE_BROKER_URL="redis://127.0.0.1:6379/0",
        CCSCOPE_DB_URL=f"sqlite:///{tmp_path}/s.db",
    )
    assert r.returncode == 1
    assert "CCSCOPE_BROKER_URL points at loopback" in r.stderr


@pytest.fixture
def tiny_trace_dir(tmp_path: Path):
    """A 4 KiB file system for the traces: too small for one."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mounts a tmpfs)")
    d = tmp_path / "traces"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(d)], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


@pytest.mark.netns
def test_full_trace_store_requeues_with_the_reason(lab, tmp_path: Path, tiny_trace_dir: Path) -> None:
    # A real download (the lab, profile A) whose traces do not fit the trace store: the row goes
    # back to the queue with the reason, nothing half-stored, the scratch files gone; once the
    # store has room, the same row is measured and classified.
    store = Store(f"sqlite:///{tmp_path / 'ccscope.db'}", str(tiny_trace_dir))
    store.migrate()
    store.add_vantage("paris")
    m, _ = store.enqueue_measurement("cubic.lab.test", "paris", "tcp", "s1", url=obj_url("cubic"))
    cfg = WorkerConfig(
        vantage="paris", profiles=("A",), lab=True, out_root=tmp_path / "work", min_gap_seconds=0, timeout=40
    )
    with pytest.raises(Transient) as e:
        run_measurement(store, m.id, cfg)
    assert "trace store cannot take" in str(e.value) and "No space left on device" in str(e.value)
    row = store.get_measurement(m.id)
    assert row.state == "queued" and not row.traces  # back in the queue, nothing half-stored
    assert not list((tmp_path / "work").rglob("*.json"))  # the scratch files went too
    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_trace_dir)], check=True)
    out = run_measurement(store, m.id, cfg)
    row = store.get_measurement(m.id)
    assert out.state == "classified" and row.attempts == 2 and len(row.traces) == 1, out
    store.close()


def test_campaign_larger_than_its_list_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = Store(f"sqlite:///{tmp_path / 'ccscope.db'}", str(tmp_path / "traces"))
    store.migrate()
    store.add_vantage("paris")
    store.import_list("small", dt.date(2026, 11, 1), [(1, "a.example"), (2, "b.example")], "tranco")
    c = store.create_campaign("big", "small", 1000, ["tcp"], ["default"], ["paris"], "0 3 * * 1")
    with caplog.at_level("WARNING", logger="ccscope.workers"):
        planned = plan_campaign(store, c.id, "slot-1")
    assert len(planned) == 2
    assert "asks for the top 1000 sites of list 'small', which has 2" in caplog.text
    store.close()
