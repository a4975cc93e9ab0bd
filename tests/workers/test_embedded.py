"""The pipeline and embedded mode against the real lab, a real SQLite store, real captures."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from ccscope.store.core import Store, aware
from ccscope.workers.embedded import EmbeddedWorkers
from ccscope.workers.tasks import (
    CONNECTION_REFUSED_ATTEMPTS,
    Transient,
    WorkerConfig,
    give_up,
    run_measurement,
)
from tests.workers.conftest import CCAS, obj_url

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def cfg(tmp_path, vantage: str = "paris", **kw) -> WorkerConfig:
    base = {"profiles": ("A",), "lab": True, "out_root": tmp_path / "work", "timeout": 40.0}
    base.update(kw)
    return WorkerConfig(vantage=vantage, **base)


def site(cca: str) -> str:
    return f"{cca}.lab.test"


def assert_finished(store: Store, mid: int) -> None:
    m = store.get_measurement(mid)
    assert m.state in ("classified", "failed"), m.state
    if m.state == "failed":
        assert m.failure_reason
    else:
        v = store.get_verdict(mid)
        assert v is not None and v.classifier_version
        assert len(m.traces) == 1 and m.traces[0].profile == "A"
        assert store.read_trace(m.traces[0].sha256)


def test_campaign_end_to_end_embedded(lab, store, tmp_path):
    """A campaign over the lab's sites from two vantage points: every row is classified (or
    failed with a reason); the objects come from the crawler cache, as for real sites."""
    store.import_list("lab", dt.date(2026, 11, 1), [(i + 1, site(c)) for i, c in enumerate(CCAS)], "tranco")
    for c in CCAS:
        store.cache_object(site(c), obj_url(c), 60_000, {"source": "test"}, ttl_seconds=3600)
    camp = store.create_campaign("lab", "lab", 3, ["tcp"], ["default"], ["paris", "tokyo"], "0 3 * * *")
    with EmbeddedWorkers(
        store,
        [cfg(tmp_path, "paris", min_gap_seconds=0.5), cfg(tmp_path, "tokyo", min_gap_seconds=0.5)],
        concurrency=3,
        retry_base=0.5,
        retry_cap=2.0,
    ) as w:
        outs = w.run_campaign(camp.id, slot="2026-11-22T03:00", timeout=180)
    assert len(outs) == 6
    for o in outs:
        assert_finished(store, o.measurement_id)
    classified = [o for o in outs if o.state == "classified"]
    assert len(classified) >= 4, [(o.state, o.detail) for o in outs]
    rows = store.census(campaign_id=camp.id)
    assert {r.vantage for r in rows} == {"paris", "tokyo"}
    assert sum(r.count for r in rows) == len(classified)
    # Running the same slot again queues nothing new and measures nothing again.
    with EmbeddedWorkers(store, [cfg(tmp_path, "paris"), cfg(tmp_path, "tokyo")], concurrency=1) as w:
        again = w.run_campaign(camp.id, slot="2026-11-22T03:00", timeout=30)
    assert again == []


def test_politeness_one_site_never_overlaps(lab, store, tmp_path):
    """Two measurements of one site, two free worker threads: the lease serialises them and
    the second starts no sooner than the minimum gap after the first."""
    gap = 2.0
    ids = [
        store.enqueue_measurement(site("cubic"), "paris", "tcp", f"slot-{i}", url=obj_url("cubic"))[0].id
        for i in range(2)
    ]
    with EmbeddedWorkers(
        store, [cfg(tmp_path, min_gap_seconds=gap)], concurrency=2, retry_base=0.3, retry_cap=1.0
    ) as w:
        futs = [w.submit(i) for i in ids]
        outs = [f.result(timeout=120) for f in futs]
    assert all(o.state == "classified" for o in outs), outs
    ms = sorted((store.get_measurement(i) for i in ids), key=lambda m: aware(m.started_at))
    first, second = ms
    # started_at is set on queued -> running, after the lease was taken; finished_at when done.
    assert aware(second.started_at) >= aware(first.finished_at)
    assert (aware(second.started_at) - aware(first.started_at)).total_seconds() >= gap


def test_opted_out_site_fails_with_reason(store, tmp_path):
    m, _ = store.enqueue_measurement(site("reno"), "paris", "tcp", "s", url=obj_url("reno"))
    store.opt_out("lab.test", "asked us to stop")
    out = run_measurement(store, m.id, cfg(tmp_path))
    assert out.state == "failed"
    assert "opted out" in (store.get_measurement(m.id).failure_reason or "")


def test_redelivery_is_a_noop_and_duplicates_do_not_double(lab, store, tmp_path):
    """The same task delivered twice at once, then again after it finished: one run, one
    verdict, one set of traces."""
    m, created = store.enqueue_measurement(site("bbr"), "paris", "tcp", "s1", url=obj_url("bbr"))
    assert created
    again, created2 = store.enqueue_measurement(site("bbr"), "paris", "tcp", "s1", url=obj_url("bbr"))
    assert again.id == m.id and not created2
    c = cfg(tmp_path)
    results: list[object] = []

    def deliver() -> None:
        try:
            results.append(run_measurement(store, m.id, c))
        except Transient as e:
            results.append(e)

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    # One delivery ran it; the other found the site leased or the row taken, and would retry.
    assert sum(isinstance(r, Transient) for r in results) == 1, results
    done = store.get_measurement(m.id)
    assert done.state == "classified" and done.attempts == 1
    traces = [t.sha256 for t in done.traces]
    verdict = store.get_verdict(m.id)
    out = run_measurement(store, m.id, c)  # the retry of the loser, or a broker redelivery
    assert out.noop and out.state == "classified"
    after = store.get_measurement(m.id)
    assert [t.sha256 for t in after.traces] == traces and after.attempts == 1
    assert store.get_verdict(m.id).id == verdict.id


def test_unreachable_object_fails_with_reason(lab, store, tmp_path):
    m, _ = store.enqueue_measurement(
        site("cubic"), "paris", "tcp", "s404", url="https://cubic.lab.test/no-such-object"
    )
    try:
        out = run_measurement(store, m.id, cfg(tmp_path, timeout=15.0))
    except Transient:
        pytest.fail("a 404 is not transient")
    assert out.state == "failed"
    assert store.get_measurement(m.id).failure_reason


def test_refused_connections_fail_for_good_after_three_attempts(lab, store, tmp_path):
    """A lab host whose port answers every SYN with a RST: connection_refused is retried, but
    only CONNECTION_REFUSED_ATTEMPTS times, well inside the retry budget, and the reason says so."""
    url = "https://cubic.lab.test:9/obj/1000"  # nothing listens on port 9
    m, _ = store.enqueue_measurement(site("cubic"), "paris", "tcp", "refused", url=url)
    c = cfg(tmp_path, min_gap_seconds=0.0, timeout=15.0)
    with EmbeddedWorkers(store, [c], concurrency=1, retry_base=0.05, retry_cap=0.2, max_retries=8) as w:
        out = w.submit(m.id).result(timeout=150)
    done = store.get_measurement(m.id)
    reason = done.failure_reason or ""
    assert out.state == "failed" and done.attempts == CONNECTION_REFUSED_ATTEMPTS, (done.attempts, reason)
    assert f"connection refused on {CONNECTION_REFUSED_ATTEMPTS} attempts" in reason, reason
    assert "gave up" not in reason, reason


def test_spent_retries_fail_a_queued_row_and_leave_a_running_one(store, tmp_path):
    """A site whose lease never frees: the retries run out and the row fails with a reason
    instead of staying queued for ever; a row some other delivery runs is not touched."""
    m, _ = store.enqueue_measurement(site("reno"), "paris", "tcp", "busy", url=obj_url("reno"))
    assert store.acquire_site(site("reno"), "someone-else", lease_seconds=600)
    with EmbeddedWorkers(store, [cfg(tmp_path)], concurrency=1, retry_base=0.05, max_retries=2) as w:
        out = w.submit(m.id).result(timeout=30)
    assert out.state == "failed"
    assert "gave up" in (store.get_measurement(m.id).failure_reason or "")
    other, _ = store.enqueue_measurement(site("reno"), "paris", "tcp", "busy2", url=obj_url("reno"))
    store.transition(other.id, "running")
    assert give_up(store, other.id, "x").noop
    assert store.get_measurement(other.id).state == "running"


def test_embedded_worker_picks_up_queued_rows_and_dead_runs(lab, store, tmp_path):
    """`ccscope worker --embedded`: polls the store, runs new rows and re-runs a row whose
    worker died (left `running` past the staleness window)."""
    fresh, _ = store.enqueue_measurement(site("reno"), "paris", "tcp", "poll-1", url=obj_url("reno"))
    dead, _ = store.enqueue_measurement(site("bbr"), "paris", "tcp", "poll-2", url=obj_url("bbr"))
    store.transition(dead.id, "running")  # as a killed worker leaves it
    assert store.acquire_site(site("bbr"), f"measurement-{dead.id}", lease_seconds=600)
    stop = threading.Event()
    # Stale after 6 s: longer than a live run here (~4 s), which must not be taken for dead.
    c = cfg(tmp_path, stale_after_seconds=6.0, min_gap_seconds=0.0)
    with EmbeddedWorkers(store, [c], concurrency=2, retry_base=0.5, retry_cap=1.0) as w:
        t = threading.Thread(target=w.serve, args=("paris", 0.5, stop), daemon=True)
        t.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = {store.get_measurement(i).state for i in (fresh.id, dead.id)}
            if states <= {"classified", "failed"}:
                break
            time.sleep(0.5)
        stop.set()
        t.join(10)
    for i in (fresh.id, dead.id):
        assert_finished(store, i)
    assert store.get_measurement(dead.id).attempts == 2
