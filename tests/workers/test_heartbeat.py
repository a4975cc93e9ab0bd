"""The worker beats while it measures: a run longer than its lease keeps the site and the row,
and the beats stop with the run. A fake download (measure_fn) stands in for the capture, so
this needs no lab; the store is the real SQLite one of the worker tests."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

from ccscope.store.core import Store
from ccscope.store.models import SiteState
from ccscope.workers.tasks import WorkerConfig, is_stale, run_measurement


def test_a_long_measurement_keeps_its_lease_alive(store: Store, tmp_path: Path) -> None:
    store.add_vantage("paris")
    m, _ = store.enqueue_measurement("slow.example", "paris", "tcp", "hb", url="https://slow.example/x")
    cfg = WorkerConfig(
        vantage="paris",
        lease_seconds=3.0,
        stale_after_seconds=3.0,
        heartbeat_seconds=0.25,
        min_gap_seconds=0.0,
        out_root=tmp_path,
    )
    seen: list[tuple[bool, bool]] = []

    def slow_download(*_a: object, **_kw: object) -> object:
        # Longer than the lease. Meanwhile nobody else gets the site and the row never looks dead.
        for _ in range(6):
            time.sleep(1.0)
            taken_by_other = store.acquire_site("slow.example", "someone-else", lease_seconds=60)
            seen.append((taken_by_other, is_stale(store.get_measurement(m.id), cfg.stale_after_seconds)))
        return SimpleNamespace(runs=[])  # no trace: the measurement fails, the beats are what count

    out = run_measurement(store, m.id, cfg, measure_fn=slow_download)
    assert out.state == "failed" and "no trace" in (store.get_measurement(m.id).failure_reason or "")
    assert seen == [(False, False)] * 6
    row = store.get_measurement(m.id)
    assert row.heartbeat_at is not None and row.started_at is not None
    assert (row.heartbeat_at - row.started_at).total_seconds() > 4.0
    # The run released its lease and its beat thread is gone.
    with store.sessions() as s:
        assert s.get(SiteState, row.site_id).lease_holder is None  # type: ignore[union-attr]
    assert not [t for t in threading.enumerate() if t.name == f"heartbeat-{m.id}"]
