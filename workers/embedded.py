"""Embedded mode: the same pipeline in-process, no broker — a small thread pool per vantage point.

Threads suit the work: a measurement mostly waits on its download subprocess. Transient
failures (site lease busy, too soon after the last visit) are retried with backoff by a timer,
so a waiting retry does not hold a pool thread.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from sqlalchemy.exc import OperationalError

from ccscope.store.core import Store
from ccscope.workers.tasks import (
    Outcome,
    Planned,
    Transient,
    WorkerConfig,
    cron_slot,
    give_up,
    is_stale,
    plan_campaign,
    queued_ids,
    run_measurement,
    sweep_scratch,
)

log = logging.getLogger("ccscope.workers")


class EmbeddedWorkers:
    def __init__(
        self,
        store: Store,
        configs: Iterable[WorkerConfig],
        concurrency: int = 4,
        *,
        retry_base: float = 2.0,
        retry_cap: float = 60.0,
        max_retries: int = 30,
    ) -> None:
        self.store = store
        self.configs = {c.vantage: c for c in configs}
        for root in {c.out_root for c in self.configs.values()}:
            sweep_scratch(root)  # what runs killed with an earlier process left
        self.pools = {
            v: ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"measure-{v}")
            for v in self.configs
        }
        self.retry_base, self.retry_cap, self.max_retries = retry_base, retry_cap, max_retries
        self._lock = threading.Lock()
        self._pending: dict[int, Future[Outcome]] = {}  # one future per measurement, across retries

    def submit(self, measurement_id: int, vantage: str | None = None) -> Future[Outcome]:
        """Run a measurement; submitting one that is already in flight returns its future."""
        v = vantage or self.store.get_measurement(measurement_id).vantage.name
        if v not in self.configs:
            raise KeyError(f"no embedded worker for vantage point {v!r}")
        with self._lock:
            fut = self._pending.get(measurement_id)
            if fut is not None and not fut.done():
                return fut
            fut = Future()
            self._pending[measurement_id] = fut
        self.pools[v].submit(self._attempt, measurement_id, v, 0, fut)
        return fut

    def _attempt(self, mid: int, vantage: str, tries: int, fut: Future[Outcome]) -> None:
        try:
            out = run_measurement(self.store, mid, self.configs[vantage])
        except (Transient, OperationalError) as e:
            if tries >= self.max_retries:
                try:
                    fut.set_result(give_up(self.store, mid, str(e)))
                except BaseException as e2:
                    fut.set_exception(e2)
                return
            delay = min(self.retry_cap, self.retry_base * 2**tries) * random.uniform(0.75, 1.25)
            log.info("measurement %s: %s; retry in %.1fs", mid, e, delay)
            t = threading.Timer(delay, self._retry, (mid, vantage, tries + 1, fut))
            t.daemon = True
            t.start()
            return
        except BaseException as e:  # anything else ends this future; the row stays for a rerun
            fut.set_exception(e)
            return
        fut.set_result(out)

    def _retry(self, mid: int, vantage: str, tries: int, fut: Future[Outcome]) -> None:
        try:
            self.pools[vantage].submit(self._attempt, mid, vantage, tries, fut)
        except RuntimeError:  # the pool was closed while the retry waited; the row stays queued
            if not fut.done():
                fut.set_exception(RuntimeError(f"measurement {mid}: workers closed before its retry"))

    def run_campaign(
        self, campaign_id: int, slot: str | None = None, timeout: float | None = None
    ) -> list[Outcome]:
        """Plan the campaign's slot and run every unfinished row to the end."""
        if slot is None:
            slot = cron_slot(self.store.get_campaign(campaign_id).schedule)
        planned = plan_campaign(self.store, campaign_id, slot)
        return [f.result(timeout=timeout) for f in self.submit_planned(planned).values()]

    def submit_planned(self, planned: Sequence[Planned]) -> dict[int, Future[Outcome]]:
        """Submit every unfinished row of a planned slot: {measurement id: future}."""
        return {mid: self.submit(mid, v) for v, ids in queued_ids(planned).items() for mid in ids}

    def serve(self, vantage: str, poll_seconds: float = 5.0, stop: threading.Event | None = None) -> None:
        """A broker-less worker: pick up queued rows of `vantage` from the store until stopped,
        and put back rows whose worker died."""
        stop = stop or threading.Event()
        stale = self.configs[vantage].stale_after_seconds
        while not stop.is_set():
            # Stale `running` rows (their worker died) go to the pipeline, which requeues them
            # one by one and frees their leases.
            rows = self.store.list_measurements(state="queued", limit=1000)
            running = self.store.list_measurements(state="running", limit=1000)
            rows += [m for m in running if is_stale(m, stale)]
            for m in rows:
                if m.vantage.name == vantage:
                    self.submit(m.id, vantage)
            stop.wait(poll_seconds)

    def close(self, wait: bool = True, cancel: bool | None = None) -> None:
        """Stop the pools; `cancel` drops measurements not started yet (default: when not
        waiting). Their rows stay queued for the next run."""
        for p in self.pools.values():
            p.shutdown(wait=wait, cancel_futures=(not wait) if cancel is None else cancel)

    def __enter__(self) -> EmbeddedWorkers:
        return self

    def __exit__(self, exc_type: object, *_exc: object) -> None:
        # Leaving on an error or a signal: finish what is running (its shells tear down
        # cleanly), start nothing new.
        self.close(cancel=exc_type is not None)


def wait_all(futs: Iterable[Future[Outcome]], timeout: float) -> list[Outcome]:
    deadline = time.monotonic() + timeout
    return [f.result(timeout=max(0.0, deadline - time.monotonic())) for f in futs]
