"""The store's rules, on SQLite and on a real PostgreSQL (the `store` fixture runs each test on both)."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time

import pytest
from sqlalchemy import inspect

from ccscope.store import Conflict, IllegalTransition, NotFound, Store, StoreError
from ccscope.store.blobs import BlobError
from ccscope.store.models import Base, Measurement
from ccscope.verdict import Verdict


def _verdict(label: str = "cubic", conf: float = 0.9) -> Verdict:
    return Verdict(label=label, kind="cca", confidence=conf, explanation="test", classifier_version="t-1")


def _setup(store: Store) -> None:
    store.add_vantage("paris")
    store.add_vantage("tokyo")
    store.import_list(
        "tranco", dt.date(2026, 11, 1), [(1, "a.example"), (2, "b.example"), (3, "c.example")], "tranco"
    )


def test_schema_matches_models(store: Store) -> None:
    # The hand-kept migration and the ORM classes must describe the same tables and columns.
    insp = inspect(store.engine)
    for name, table in Base.metadata.tables.items():
        cols = {c["name"] for c in insp.get_columns(name)}
        assert cols == {c.name for c in table.columns}, name
    store.migrate()  # idempotent


def test_lists_and_campaigns(store: Store) -> None:
    _setup(store)
    sl = store.get_list("tranco")
    assert sl.size == 3
    assert store.top_sites(sl.id, 2) == ["a.example", "b.example"]
    with pytest.raises(Conflict):
        store.import_list("tranco", dt.date(2026, 11, 1), [(1, "x.example")], "tranco")
    c = store.create_campaign("weekly", "tranco", 2, ["tcp"], ["default"], ["paris", "tokyo"], "0 3 * * 1")
    assert [v.name for v in c.vantages] == ["paris", "tokyo"]
    c2 = store.update_campaign(c.id, top_n=3, vantages=["tokyo"], enabled=False)
    assert (c2.top_n, [v.name for v in c2.vantages], c2.enabled) == (3, ["tokyo"], False)
    rows, total = store.list_campaigns(limit=10)
    assert total == 1 and rows[0].name == "weekly"
    with pytest.raises(StoreError):
        store.update_campaign(c.id, schedule="every tuesday")
    with pytest.raises(StoreError):
        store.create_campaign("bad", "tranco", 2, ["carrier-pigeon"], ["default"], ["paris"], "0 3 * * 1")
    with pytest.raises(NotFound):
        store.create_campaign("bad", "tranco", 2, ["tcp"], ["default"], ["mars"], "0 3 * * 1")


def test_enqueue_is_idempotent(store: Store) -> None:
    _setup(store)
    m1, created1 = store.enqueue_measurement("A.example.", "paris", "tcp", "2026-11-01T03:00Z")
    m2, created2 = store.enqueue_measurement("a.example", "paris", "tcp", "2026-11-01T03:00Z")
    assert created1 and not created2 and m1.id == m2.id
    m3, created3 = store.enqueue_measurement("a.example", "tokyo", "tcp", "2026-11-01T03:00Z")
    assert created3 and m3.id != m1.id
    assert len(store.list_measurements()) == 2


def test_concurrent_enqueue_never_duplicates(store: Store) -> None:
    # Redelivered tasks arriving together: many threads, one row.
    _setup(store)
    ids: list[int] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            ids.append(store.enqueue_measurement("b.example", "paris", "tcp", "slot-1")[0].id)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(set(ids)) == 1
    assert len(store.list_measurements()) == 1


def test_state_machine(store: Store) -> None:
    _setup(store)
    m, _ = store.enqueue_measurement("a.example", "paris", "tcp", "s")
    assert m.state == "queued"
    with pytest.raises(IllegalTransition):
        store.transition(m.id, "classified")
    with pytest.raises(IllegalTransition):
        store.transition(m.id, "captured")
    m = store.transition(m.id, "running")
    assert m.state == "running" and m.attempts == 1 and m.started_at is not None
    m = store.transition(m.id, "queued")  # its worker died; requeued
    m = store.transition(m.id, "running")
    assert m.attempts == 2
    m = store.transition(m.id, "captured")
    with pytest.raises(IllegalTransition):
        store.transition(m.id, "running")
    v = store.record_verdict(m.id, _verdict())
    assert store.get_measurement(m.id).state == "classified"
    assert store.record_verdict(m.id, _verdict("bbr")).id == v.id  # redelivered: no second verdict
    with pytest.raises(IllegalTransition):
        store.transition(m.id, "failed", "late")
    f, _ = store.enqueue_measurement("b.example", "paris", "tcp", "s")
    with pytest.raises(StoreError):
        store.transition(f.id, "failed")  # a failure needs its reason
    f = store.transition(f.id, "failed", "connection refused")
    assert f.failure_reason == "connection refused" and f.finished_at is not None
    with pytest.raises(IllegalTransition):
        store.transition(f.id, "queued")
    q, _ = store.enqueue_measurement("c.example", "paris", "tcp", "s")
    with pytest.raises(IllegalTransition):
        store.record_verdict(q.id, _verdict())  # not captured yet


def test_racing_workers_one_wins(store: Store) -> None:
    _setup(store)
    m, _ = store.enqueue_measurement("a.example", "paris", "tcp", "s")
    wins: list[int] = []
    lock = threading.Lock()

    def claim() -> None:
        try:
            store.transition(m.id, "running")
            with lock:
                wins.append(1)
        except IllegalTransition:
            pass

    threads = [threading.Thread(target=claim) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert store.get_measurement(m.id).attempts == 1


def test_traces_are_content_addressed(store: Store) -> None:
    _setup(store)
    m, _ = store.enqueue_measurement("a.example", "paris", "tcp", "s")
    t1 = store.add_trace(m.id, b'{"trace": 1}')
    t2 = store.add_trace(m.id, b'{"trace": 1}')  # a retried upload
    assert t1.id == t2.id and len(t1.sha256) == 64
    assert store.read_trace(t1.sha256) == b'{"trace": 1}'
    assert [t.sha256 for t in store.get_measurement(m.id).traces] == [t1.sha256]
    # A corrupted file is detected, not served.
    path = store.blobs.path(t1.sha256)  # type: ignore[attr-defined]
    path.write_bytes(b"tampered")
    with pytest.raises(BlobError):
        store.read_trace(t1.sha256)
    with pytest.raises(BlobError):
        store.read_trace("../../etc/passwd")


def _classified(store: Store, domain: str, vantage: str, transport: str, slot: str, label: str) -> int:
    m, _ = store.enqueue_measurement(domain, vantage, transport, slot)
    store.transition(m.id, "running")
    store.transition(m.id, "captured")
    store.record_verdict(m.id, _verdict(label))
    return m.id


def test_domain_report_and_census(store: Store) -> None:
    _setup(store)
    _classified(store, "a.example", "paris", "tcp", "1", "cubic")
    _classified(store, "a.example", "paris", "tcp", "2", "bbr")
    _classified(store, "a.example", "tokyo", "tcp", "1", "cubic")
    _classified(store, "a.example", "paris", "quic", "1", "bbr")
    _classified(store, "b.example", "paris", "tcp", "1", "cubic")
    _classified(store, "c.example", "paris", "tcp", "1", "cubic")
    latest, history, total = store.domain_report("a.example", limit=2)
    assert total == 4 and len(history) == 2
    got = {(r.transport, r.vantage): r.label for r in latest}
    assert got == {("tcp", "paris"): "bbr", ("tcp", "tokyo"): "cubic", ("quic", "paris"): "bbr"}
    with pytest.raises(NotFound):
        store.domain_report("never.example")
    rows = store.census(vantage="paris", transport="tcp")
    shares = {r.label: (r.count, r.total) for r in rows}
    assert shares == {"cubic": (3, 4), "bbr": (1, 4)}
    assert rows[0].label == "cubic" and abs(rows[0].share - 0.75) < 1e-9
    assert store.census(date_from=dt.date.today() + dt.timedelta(days=2)) == []


def test_domain_report_pages_and_latest(store: Store) -> None:
    _setup(store)
    ids = [_classified(store, "a.example", "paris", "tcp", f"s{i}", label) for i, label in
           enumerate(["reno", "cubic", "bbr", "cubic", "bbr3"])]  # fmt: skip
    _classified(store, "a.example", "tokyo", "quic", "q", "bbr")
    # A later page: `latest` no longer comes off the page, it is queried.
    latest, history, total = store.domain_report("a.example", limit=2, offset=2)
    assert total == 6 and [v.measurement_id for v in history] == [ids[3], ids[2]]
    want = [("quic", "tokyo", "bbr"), ("tcp", "paris", "bbr3")]
    assert [(v.transport, v.vantage, v.label) for v in latest] == want
    # Everything on one page: the same answer, read off the page.
    latest1, history1, total1 = store.domain_report("a.example")
    assert latest1 == latest and total1 == 6 and len(history1) == 6
    assert history1[0].created_at.tzinfo is not None and isinstance(history1[0].evidence, dict)
    # Past the end: no rows, the right total. A known site without verdicts: empty, not 404.
    assert store.domain_report("a.example", offset=10)[1:] == ([], 6)
    assert store.domain_report("b.example") == ([], [], 0)


def test_census_table_is_the_group_by_of_verdicts(store: Store) -> None:
    """census_counts is kept in the verdict's transaction; the census reads it, split by
    campaign, and a rebuild from the verdicts gives the same cells."""
    from sqlalchemy import select

    from ccscope.store.models import CensusCount

    _setup(store)
    camp = store.create_campaign("c", "tranco", 3, ["tcp"], ["default"], ["paris"], "0 3 * * *")
    v0 = store.census_version()
    labels = [("a.example", "cubic"), ("b.example", "cubic"), ("c.example", "bbr")]
    for i, (domain, label) in enumerate(labels):
        m, _ = store.enqueue_measurement(domain, "paris", "tcp", f"c{i}", campaign_id=camp.id)
        store.transition(m.id, "running")
        store.transition(m.id, "captured")
        store.record_verdict(m.id, _verdict(label))
    _classified(store, "a.example", "paris", "tcp", "adhoc", "reno")  # no campaign
    assert store.census_version() == v0 + 4
    both = {(r.label, r.count, r.total) for r in store.census()}
    assert both == {("cubic", 2, 4), ("bbr", 1, 4), ("reno", 1, 4)}
    only = {(r.label, r.count, r.total) for r in store.census(campaign_id=camp.id)}
    assert only == {("cubic", 2, 3), ("bbr", 1, 3)}
    assert store.census(campaign_id=camp.id + 1) == []

    def cells() -> set[tuple[object, ...]]:
        with store.sessions() as s:
            return {(c.measured_on, c.vantage_id, c.transport, c.campaign_id, c.label, c.n)
                    for c in s.scalars(select(CensusCount))}  # fmt: skip

    before = cells()
    assert len(before) == 3 and store.rebuild_census() == 3 and cells() == before
    assert store.census_version() == v0 + 5  # a rebuild is a change too


def test_site_lease_and_gap(store: Store) -> None:
    _setup(store)
    assert store.acquire_site("a.example", "w1", lease_seconds=60)
    assert not store.acquire_site("a.example", "w2", lease_seconds=60)  # held
    assert not store.release_site("a.example", "w2")  # only the holder releases
    assert store.release_site("a.example", "w1")
    assert store.acquire_site("a.example", "w2", lease_seconds=60)
    store.release_site("a.example", "w2")
    # The minimum gap holds even after release.
    assert not store.acquire_site("a.example", "w3", min_gap_seconds=3600)
    assert store.acquire_site("a.example", "w3", min_gap_seconds=0)
    # An expired lease (its worker died) is free for the next taker.
    assert store.acquire_site("b.example", "dead", lease_seconds=-1)
    assert store.acquire_site("b.example", "w4", lease_seconds=60)


def test_concurrent_lease_one_holder(store: Store) -> None:
    _setup(store)
    got: list[str] = []

    def take(name: str) -> None:
        if store.acquire_site("c.example", name, lease_seconds=60):
            got.append(name)

    threads = [threading.Thread(target=take, args=(f"w{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 1


def test_opt_out(store: Store) -> None:
    _setup(store)
    store.opt_out("example.org", "asked by email")
    assert store.is_opted_out("www.example.org") and store.is_opted_out("example.org")
    assert not store.is_opted_out("notexample.org")
    with pytest.raises(Conflict):
        store.enqueue_measurement("cdn.example.org", "paris", "tcp", "s")


def test_crawl_cache_ttl(store: Store) -> None:
    store.cache_object("a.example", "https://a.example/big.bin", 500_000, {"candidates": 3}, ttl_seconds=60)
    row = store.cached_object("a.example")
    assert row is not None and row.url == "https://a.example/big.bin" and row.size == 500_000
    store.cache_object("a.example", None, None, {}, ttl_seconds=-1)
    assert store.cached_object("a.example") is None


@pytest.mark.parametrize("bad", ["", "localhost", "a..b", "-a.example", "a" * 64 + ".example", "a b.example"])
def test_bad_domains_refused(store: Store, bad: str) -> None:
    store.add_vantage("paris")
    with pytest.raises(StoreError):
        store.enqueue_measurement(bad, "paris", "tcp", "s")


def test_stale_running_measurements_requeued(store: Store) -> None:
    # A worker killed mid-measurement leaves `running`; after its lease the row is re-run once.
    _setup(store)
    m, _ = store.enqueue_measurement("a.example", "paris", "tcp", "s")
    store.transition(m.id, "running")
    assert store.requeue_stale(older_than_seconds=3600) == []
    assert store.requeue_stale(older_than_seconds=-1) == [m.id]
    assert store.get_measurement(m.id).state == "queued"
    m = store.transition(m.id, "running")
    assert m.attempts == 2
    store.transition(m.id, "captured")
    store.record_verdict(m.id, _verdict())
    assert store.requeue_stale(older_than_seconds=-1) == []  # finished rows are never touched


def test_migrations_match_models_and_roll_back(store: Store) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from ccscope.store.migrate import downgrade, upgrade

    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    downgrade(store.engine, "base")
    assert set(inspect(store.engine).get_table_names()) <= {"alembic_version"}
    upgrade(store.engine)
    _setup(store)
    assert store.get_list("tranco").size == 3


def _running_with_lease(store: Store, domain: str, lease_seconds: float) -> tuple[Measurement, str]:
    """A measurement of `domain` running under its own lease, as a worker holds it."""
    _setup(store)
    m, _ = store.enqueue_measurement(domain, "paris", "tcp", "hb")
    store.transition(m.id, "running")
    holder = f"measurement-{m.id}"
    assert store.acquire_site(domain, holder, lease_seconds=lease_seconds)
    return m, holder


def test_heartbeat_keeps_a_long_run_leased_and_a_dead_one_lapses(store: Store) -> None:
    lease = 3.0  # beats every 0.25 s: only a stall of most of this could let it lapse
    m, holder = _running_with_lease(store, "a.example", lease)
    # A run three times as long as its lease: the beats keep the site and the row its own.
    with store.keep_alive(m.id, holder, lease_seconds=lease, every=0.25) as lost:
        for _ in range(3):
            time.sleep(lease)
            assert not store.acquire_site("a.example", "other", lease_seconds=60)
            assert store.requeue_stale(older_than_seconds=lease) == []
        assert not lost.is_set()
    row = store.get_measurement(m.id)
    assert row.heartbeat_at is not None and row.started_at is not None
    assert (row.heartbeat_at - row.started_at).total_seconds() > 2 * lease
    # The worker dies: no more beats. Within the lease the site is still taken, after it it's free.
    assert not store.acquire_site("a.example", "other", lease_seconds=60)
    time.sleep(lease + 0.5)
    assert store.acquire_site("a.example", "other", lease_seconds=60)
    # A late beat of the dead run finds its claim gone and does not make the row look alive.
    assert not store.heartbeat(m.id, holder, lease_seconds=lease)
    assert store.requeue_stale(older_than_seconds=lease) == [m.id]
    with pytest.raises(NotFound):
        store.heartbeat(10**6, holder, lease_seconds=lease)


def test_a_beat_after_the_run_finished_is_not_a_lost_claim(store: Store) -> None:
    m, holder = _running_with_lease(store, "a.example", 60)
    store.transition(m.id, "failed", "gone")  # the run's last write, before its keep_alive ends
    assert store.heartbeat(m.id, holder, lease_seconds=60)
    # Requeued as dead is lost, though the lease is (still) the run's own.
    m2, _ = store.enqueue_measurement("a.example", "paris", "tcp", "hb2")
    store.transition(m2.id, "running")
    store.transition(m2.id, "queued")
    assert not store.heartbeat(m2.id, holder, lease_seconds=60)


def test_drop_traces_of_a_rerun(store: Store) -> None:
    _setup(store)
    m, _ = store.enqueue_measurement("a.example", "paris", "tcp", "dt")
    store.transition(m.id, "running")
    a = store.add_trace(m.id, b"first attempt A", profile="A")
    store.add_trace(m.id, b"first attempt B", profile="B")
    assert store.drop_traces(m.id) == 2
    assert store.get_measurement(m.id).traces == []
    assert store.read_trace(a.sha256) == b"first attempt A"  # blobs may be shared: they stay
    assert store.drop_traces(m.id) == 0
    store.add_trace(m.id, b"the re-run", profile="A")
    store.transition(m.id, "captured")
    with pytest.raises(IllegalTransition):  # a captured row's traces are its result
        store.drop_traces(m.id)
    assert len(store.get_measurement(m.id).traces) == 1


def test_a_run_stuck_past_its_longest_stops_beating(store: Store) -> None:
    # A worker thread blocked for good must not hold its row and site forever through the
    # heartbeat thread beside it: after max_seconds the beats stop and the row goes stale.
    m, holder = _running_with_lease(store, "stuck.example", 1.0)
    with store.keep_alive(m.id, holder, lease_seconds=1.0, every=0.2, max_seconds=1.0) as lost:
        time.sleep(3.0)  # the "stuck" run
        assert lost.is_set()
        assert store.requeue_stale(older_than_seconds=1.0) == [m.id]
        assert store.acquire_site("stuck.example", "other", lease_seconds=60)


def test_the_beats_of_many_runs_share_one_thread_and_one_transaction(store: Store) -> None:
    # A worker at K = 128 once beat from 128 threads and ran its connection pool dry, so leases
    # of live runs lapsed. Forty runs here: one beating thread, one checkout per round of beats.
    from sqlalchemy import event

    store.add_vantage("paris")
    domains = [f"s{i}.example" for i in range(40)]
    store.import_list("many", dt.date(2026, 11, 1), list(enumerate(domains, 1)), "tranco")
    runs = []
    for d in domains:
        m, _ = store.enqueue_measurement(d, "paris", "tcp", f"many-{d}")
        store.transition(m.id, "running")
        assert store.acquire_site(d, f"measurement-{m.id}", lease_seconds=2.0)
        runs.append((m, f"measurement-{m.id}"))
    checkouts: list[str] = []

    def count(*_: object) -> None:
        checkouts.append(threading.current_thread().name)

    event.listen(store.engine, "checkout", count)
    try:
        with contextlib.ExitStack() as stack:
            lost = [stack.enter_context(store.keep_alive(m.id, h, 2.0, every=0.3)) for m, h in runs]
            names = [t.name for t in threading.enumerate()]
            assert names.count("heartbeats") == 1 and not [n for n in names if n.startswith("heartbeat-")]
            # Another worker takes one site over once its lease is gone: only that run is lost.
            store.release_site(domains[7], runs[7][1])
            assert store.acquire_site(domains[7], "other", lease_seconds=60)
            time.sleep(3.0)  # past the 2 s lease of every run
            assert [i for i, e in enumerate(lost) if e.is_set()] == [7]
            for d in domains[:7] + domains[8:]:
                assert not store.acquire_site(d, "other", lease_seconds=60)
    finally:
        event.remove(store.engine, "checkout", count)
    # ~10 rounds of beats in 3 s, one connection each; forty threads would have taken ~400.
    beats = [n for n in checkouts if n == "heartbeats"]
    assert 5 <= len(beats) <= 20, len(beats)
    assert all(store.get_measurement(m.id).heartbeat_at is not None for m, _ in runs)
    assert _gone("heartbeats")  # no run left to beat for: the thread ends


def _gone(name: str, wait_s: float = 5.0) -> bool:
    """The named thread exits once it has nothing left to do."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        if not [t for t in threading.enumerate() if t.name == name]:
            return True
        time.sleep(0.05)
    return False
