"""Finding 3: a schedule that beat cannot run, or a profile that does not exist, is refused at
the API boundary (422 with the reason, POST and PATCH), and one bad campaign that reached the
database anyway costs the others nothing, in beat and in `campaign run --embedded`."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from ccscope.api.app import create_app
from ccscope.store import Store
from ccscope.store.models import Campaign
from ccscope.workers.celery_app import beat_schedule

TOKEN = "tok"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BAD = {
    "0 3 30 2 *": "never fires",  # 30 February
    "*/0 * * * *": "step cannot be zero",
    "61 25 32 13 8": "minute field '61'",
    "0 0 31 4,6,9,11 *": "never fires",
    "0 3 * * 7": "day of week field '7'",
    "@daily x y z w": "not a 5-field cron",
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = Store(f"sqlite:///{tmp_path / 'c.db'}", str(tmp_path / "traces"))
    st.migrate()
    st.add_vantage("paris")
    st.import_list("tranco", dt.date(2026, 11, 1), [(1, "public-site.com")], "tranco")
    yield st
    st.close()


def _campaign(name: str, schedule: str, profiles: list[str] | None = None) -> dict[str, object]:
    return {"name": name, "list_name": "tranco", "top_n": 1, "transports": ["tcp"],
            "vantages": ["paris"], "schedule": schedule, "profiles": profiles or ["default"]}  # fmt: skip


@pytest.mark.parametrize("schedule,reason", sorted(BAD.items()))
def test_bad_schedules_are_422_on_post_and_patch(store: Store, schedule: str, reason: str) -> None:
    with TestClient(create_app(store, token=TOKEN)) as c:
        r = c.post("/v1/campaigns", json=_campaign("bad", schedule), headers=AUTH)
        assert r.status_code == 422, r.text
        assert reason in str(r.json()["detail"]) and r.json()["detail"][0]["loc"][-1] == "schedule"
        ok = c.post("/v1/campaigns", json=_campaign(f"ok{abs(hash(schedule))}", "0 3 * * 1"), headers=AUTH)
        assert ok.status_code == 201
        r = c.patch(f"/v1/campaigns/{ok.json()['id']}", json={"schedule": schedule}, headers=AUTH)
        assert r.status_code == 422 and reason in str(r.json()["detail"])
        assert c.get(f"/v1/campaigns/{ok.json()['id']}").json()["schedule"] == "0 3 * * 1"


def test_unknown_profiles_are_422(store: Store) -> None:
    with TestClient(create_app(store, token=TOKEN)) as c:
        body = {"target": "public-site.com", "vantage": "paris", "profile": "zzz"}
        r = c.post("/v1/measurements", json=body, headers=AUTH)
        assert r.status_code == 422 and "unknown profile 'zzz'" in str(r.json()["detail"])
        r = c.post("/v1/campaigns", json=_campaign("p", "0 3 * * 1", ["A", "zzz"]), headers=AUTH)
        assert r.status_code == 422 and "unknown profile 'zzz'" in str(r.json()["detail"])
    assert store.list_measurements() == []


def _poison(store: Store) -> tuple[int, int]:
    """A good campaign and one whose schedule was written past the API (an old row, by hand)."""
    good = store.create_campaign("good", "tranco", 1, ["tcp"], ["default"], ["paris"], "0 3 * * 1")
    bad = store.create_campaign("bad", "tranco", 1, ["tcp"], ["default"], ["paris"], "0 4 * * 1")
    with store.sessions.begin() as s:
        s.execute(update(Campaign).where(Campaign.id == bad.id).values(schedule="0 3 30 2 *"))
    return good.id, bad.id


def test_one_bad_campaign_does_not_unschedule_the_others(store: Store) -> None:
    good, bad = _poison(store)
    sched = beat_schedule(store)
    assert f"campaign-{good}" in sched and f"campaign-{bad}" not in sched


def test_campaign_run_embedded_refuses_a_bad_schedule_cleanly(store: Store) -> None:
    _good, bad = _poison(store)
    p = subprocess.run(
        [sys.executable, "-m", "ccscope.cli", "campaign", "run", str(bad), "--embedded", "--db", store.url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode != 0
    assert "Traceback" not in p.stderr and "never fires" in p.stderr, p.stderr
