"""Bad input to the distributed engine, each reported with its reason and nothing lost: a
vantage namespace that cannot be built, services a namespace cannot reach, a full trace
store, a campaign larger than its list. (A broker that goes away and a stopped campaign are in
bench/chaos: they need the whole engine.)"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccscope.errors import EXIT_SETUP
from ccscope.store.core import Store
from ccscope.workers.tasks import Transient, WorkerConfig, plan_campaign, run_measurement

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
    """A 64 KiB file system for the traces: full after the first trace."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mounts a tmpfs)")
    d = tmp_path / "traces"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def test_full_trace_store_requeues_with_the_reason(tmp_path: Path, tiny_trace_dir: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'ccscope.db'}", str(tiny_trace_dir))
    store.migrate()
    store.add_vantage("paris")
    m, _ = store.enqueue_measurement("shop.example", "paris", "tcp", "s1", url="https://shop.example/big")

    def fake_measure(url: str, profiles: tuple[str, ...], out: Path, **_kw: object) -> object:
        from types import SimpleNamespace

        out.mkdir(parents=True, exist_ok=True)
        runs = []
        for p in profiles:
            f = out / f"{p}.sender.trace.json"
            f.write_text(json.dumps({"format": "ccscope-trace/1", "pad": "x" * 200_000}))
            runs.append(
                SimpleNamespace(
                    profile=p,
                    sender_trace_file=str(f),
                    trace_file=None,
                    error=None,
                    fetch={"status": 200},
                    pcap_file=None,
                )
            )
        return SimpleNamespace(runs=runs)

    cfg = WorkerConfig(vantage="paris", out_root=tmp_path / "work", min_gap_seconds=0)
    with pytest.raises(Transient) as e:
        run_measurement(store, m.id, cfg, measure_fn=fake_measure)
    assert "trace store cannot take" in str(e.value) and "No space left on device" in str(e.value)
    row = store.get_measurement(m.id)
    assert row.state == "queued" and not row.traces  # back in the queue, nothing half-stored
    assert not list((tmp_path / "work").rglob("*.json"))  # the scratch files went too
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
