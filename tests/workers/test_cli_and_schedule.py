"""The worker CLI (embedded campaign run against the lab) and the beat schedule from the store."""

from __future__ import annotations

import argparse
import datetime as dt
import json

import pytest
from celery.schedules import crontab

from ccscope.store.core import Store
from ccscope.workers.celery_app import beat_schedule, queue_name
from ccscope.workers.cli import register
from ccscope.workers.tasks import cron_slot
from tests.workers.conftest import obj_url


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ccscope")
    register(p.add_subparsers(dest="cmd", required=True))
    return p


def test_cron_slot_names_the_latest_tick():
    now = dt.datetime(2026, 11, 22, 3, 47, 12, tzinfo=dt.UTC)  # a Sunday
    assert cron_slot("*/15 * * * *", now) == "2026-11-22T03:45:00+00:00"
    assert cron_slot("0 3 * * *", now) == "2026-11-22T03:00:00+00:00"
    assert cron_slot("30 4 * * *", now) == "2026-11-21T04:30:00+00:00"
    assert cron_slot("0 0 * * 1", now) == "2026-11-16T00:00:00+00:00"  # last Monday


def test_beat_schedule_has_enabled_campaigns_only(store: Store):
    store.import_list("l", dt.date(2026, 11, 1), [(1, "example.com")], "tranco")
    on = store.create_campaign("on", "l", 1, ["tcp"], ["default"], ["paris"], "15 2 * * 1-5")
    store.create_campaign("off", "l", 1, ["tcp"], ["default"], ["paris"], "0 * * * *", enabled=False)
    sched = beat_schedule(store)
    assert set(sched) == {f"campaign-{on.id}", "ccscope-requeue-stale"}
    e = sched[f"campaign-{on.id}"]
    assert e["task"] == "ccscope.plan_campaign" and e["args"] == (on.id,)
    assert e["schedule"] == crontab(minute="15", hour="2", day_of_week="1-5")
    assert queue_name("paris") == "measure.paris"


def test_cli_parses_worker_and_campaign():
    a = parser().parse_args(["worker", "--vantage", "paris", "--concurrency", "8"])
    assert a.vantage == "paris" and a.concurrency == 8 and not a.embedded
    a = parser().parse_args(["campaign", "run", "3", "--embedded"])
    assert a.id == 3 and a.embedded


@pytest.mark.netns
@pytest.mark.slow
def test_cli_campaign_run_embedded(lab, store: Store, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CCSCOPE_WORKER_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("CCSCOPE_WORKER_MIN_GAP", "0")
    # The CLI exports its options for worker processes; monkeypatch restores them afterwards.
    for k in ("CCSCOPE_DB_URL", "CCSCOPE_TRACE_DIR", "CCSCOPE_LAB", "CCSCOPE_WORKER_PROFILES"):
        monkeypatch.delenv(k, raising=False)
    store.import_list("l", dt.date(2026, 11, 1), [(1, "reno.lab.test")], "tranco")
    store.cache_object("reno.lab.test", obj_url("reno"), 60_000, {}, ttl_seconds=600)
    c = store.create_campaign("c", "l", 1, ["tcp"], ["default"], ["paris"], "0 * * * *")
    args = parser().parse_args(
        [
            "campaign",
            "run",
            str(c.id),
            "--embedded",
            "--lab",
            "--profiles",
            "A",
            "--db",
            store.url,
            "--traces",
            str(tmp_path / "traces"),
            "--slot",
            "cli",
        ]
    )
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measurements"] == 1 and set(out["states"]) <= {"classified", "failed"}
    (m,) = store.list_measurements()
    assert m.state in ("classified", "failed") and m.slot == "cli"
