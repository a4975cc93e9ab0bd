"""The Celery app: one queue per vantage point (`measure.<vantage>`), campaigns on beat.

    celery -A ccscope.workers.celery_app worker -Q measure.paris -n paris@%h
    celery -A ccscope.workers.celery_app beat -S ccscope.workers.celery_app:CampaignScheduler

Broker and result backend come from CCSCOPE_BROKER_URL / CCSCOPE_RESULT_URL (default: the local
Redis). Reliability rests on late acks plus the store: a task is acknowledged only after it ran,
so a killed worker's task is delivered again, and the state machine makes the re-run finish the
measurement exactly once. The store is CCSCOPE_DB_URL (+ CCSCOPE_TRACE_DIR), as for the CLI.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import threading
from typing import Any

from celery import Celery
from celery.beat import PersistentScheduler
from celery.exceptions import Reject
from celery.schedules import crontab
from celery.signals import worker_init
from sqlalchemy.exc import InterfaceError, OperationalError

from ccscope.errors import CCScopeError
from ccscope.settings import settings
from ccscope.store.core import Store, validate_cron
from ccscope.workers.priority import apply_from_settings
from ccscope.workers.tasks import (
    Transient,
    WorkerConfig,
    cron_slot,
    give_up,
    is_stale,
    plan_campaign,
    queued_ids,
    run_measurement,
    shortfall,
    sweep_scratch,
)

log = logging.getLogger("ccscope.workers")

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
CONTROL_QUEUE = "ccscope.control"  # campaign planning and sweeps, consumed by `worker --control`


def queue_name(vantage: str) -> str:
    return f"measure.{vantage}"


_cfg = settings()
app = Celery("ccscope")
app.conf.update(
    broker_url=_cfg.broker_url or DEFAULT_BROKER,
    result_backend=_cfg.result_url or _cfg.broker_url or DEFAULT_BROKER,
    task_acks_late=True,  # ack after the run: a killed worker's task is delivered again
    task_reject_on_worker_lost=True,  # a pool child that dies puts its task back at once
    worker_prefetch_multiplier=1,  # a busy worker does not sit on other measurements
    task_serializer="json",
    accept_content=["json"],
    result_expires=24 * 3600,
    task_default_queue="ccscope.control",
    broker_connection_retry_on_startup=True,
    # Redis re-delivers an unacknowledged message only after this long; it bounds how soon a
    # killed worker's measurement is re-run. It must exceed the longest measurement, or live
    # tasks are delivered twice (harmless, thanks to the state machine, but wasteful).
    broker_transport_options={
        "visibility_timeout": _cfg.visibility_timeout,
        # Look for such messages every interval (kombu's default scans only every 10th, 100 s).
        "unacked_restore_interval": _cfg.restore_interval,
        "unacked_restore_throttle": 1,
    },
    timezone="UTC",
)

_store_lock = threading.Lock()
_store: Store | None = None


def get_store() -> Store:
    """One Store per process, opened lazily so prefork children do not share a connection."""
    global _store
    with _store_lock:
        if _store is None:
            _store = Store()
            _store.migrate()
        return _store


@worker_init.connect
def _sweep_at_start(**_: Any) -> None:
    """Runs killed with an earlier worker left their pcaps behind: remove them before work.
    And CCSCOPE_WORKER_NICE, off by default (workers/priority.py); the pool's processes and
    threads inherit it."""
    sweep_scratch(WorkerConfig.from_env("startup").out_root)
    apply_from_settings()


def _backoff(retries: int) -> float:
    cfg = settings()
    base, cap = cfg.worker_retry_base, cfg.worker_retry_cap
    # Jitter spreads workers that collided on one site lease.
    return min(cap, base * 2 ** min(retries, 10)) * random.uniform(0.75, 1.25)


@app.task(name="ccscope.measure", bind=True, max_retries=_cfg.worker_max_retries)
def measure_task(self: Any, measurement_id: int, vantage: str) -> dict[str, Any]:
    store = get_store()
    try:
        out = run_measurement(store, measurement_id, WorkerConfig.from_env(vantage))
    except (Transient, OperationalError, InterfaceError) as e:
        # OperationalError, InterfaceError: the database was unreachable (restarting, a
        # connection it cut) or locked for a moment.
        if self.request.retries >= self.max_retries:
            out = give_up(store, measurement_id, str(e))
        else:
            log.info("measurement %s: %s; retrying", measurement_id, e)
            try:
                self.retry(countdown=_backoff(self.request.retries), exc=e)
            except Reject as r:
                # The retry could not be published (the broker is away): Celery would then drop
                # this message, and the row would wait for a message forever. Keep it instead:
                # requeued now, or, with the broker away, redelivered after the visibility timeout.
                raise Reject(r.reason, requeue=True) from None
    return {"measurement_id": out.measurement_id, "state": out.state, "noop": out.noop, "detail": out.detail}


def dispatch(measurement_id: int, vantage: str) -> None:
    measure_task.apply_async((measurement_id, vantage), queue=queue_name(vantage))


@app.task(name="ccscope.plan_campaign")
def plan_campaign_task(campaign_id: int, slot: str | None = None) -> dict[str, Any]:
    """Queue the campaign's rows for `slot` (default: the cron tick this run belongs to) and
    send each unfinished row to its vantage point's queue."""
    store = get_store()
    if slot is None:
        slot = cron_slot(store.get_campaign(campaign_id).schedule)
    planned = plan_campaign(store, campaign_id, slot)
    c = store.get_campaign(campaign_id)
    short = shortfall(c.top_n, len(store.top_sites(c.site_list.id, c.top_n)), c.site_list.name)
    sent = 0
    for vantage, ids in queued_ids(planned).items():
        for mid in ids:
            dispatch(mid, vantage)
            sent += 1
    out = {"campaign_id": campaign_id, "slot": slot, "planned": len(planned), "dispatched": sent}
    return out | ({"warning": short} if short else {})


@app.task(name="ccscope.requeue_stale")
def requeue_stale_task(older_than_seconds: float = WorkerConfig.stale_after_seconds) -> list[int]:
    """Dispatch again the measurements whose worker died (normally the broker redelivers
    them; this catches messages that were lost) and the queued ones the broker holds no message
    for (lost between a queue and a worker that was killed, or a retry the broker never got).
    The measure task requeues each dead row and frees its lease; a row dispatched twice is
    measured once (the state machine)."""
    store = get_store()
    ids = []
    for m in store.list_measurements(state="running", limit=10_000):
        if is_stale(m, older_than_seconds):
            dispatch(m.id, m.vantage.name)
            ids.append(m.id)
    return ids + redispatch_orphans(store, older_than_seconds)


def redispatch_orphans(store: Store, older_than_seconds: float, max_read: int = 20_000) -> list[int]:
    """Queued rows older than `older_than_seconds` without a message in the broker, dispatched
    again. The broker's side is read whole (each vantage point's queue, and the delivered but
    unacknowledged messages: running, or waiting for a retry's countdown), so it is done only
    while a queue holds at most `max_read` messages: a campaign's tail, where a lost message
    would otherwise leave the campaign unfinished."""
    rows = store.queued_before(older_than_seconds)
    if not rows:
        return []
    held = broker_measurement_ids(sorted({v for _, v in rows}), max_read)
    if held is None:
        return []
    sent = []
    for mid, vantage in rows:
        if mid not in held:
            log.warning("measurement %s: queued without a message in the broker; dispatching it again", mid)
            dispatch(mid, vantage)
            sent.append(mid)
    return sent


def broker_measurement_ids(vantages: list[str], max_read: int) -> set[int] | None:
    """The measurement ids of ccscope.measure messages the broker holds for these vantage
    points; None when it cannot tell (not Redis, or a queue longer than `max_read`)."""
    with app.connection_for_read() as conn:
        if conn.transport.driver_type != "redis":
            log.info("the orphan sweep reads Redis only; broker %s is left alone", conn.transport.driver_type)
            return None
        ch = conn.default_channel
        client = ch.client
        raws: list[Any] = []
        for v in vantages:
            q = queue_name(v)
            # kombu keeps a queue's priorities as separate lists
            for key in dict.fromkeys([q, *(ch._q_for_pri(q, p) for p in ch.priority_steps)]):
                n = int(client.llen(key))
                if n > max_read:
                    log.info("queue %s holds %d messages: the orphan sweep waits for its tail", key, n)
                    return None
                raws += client.lrange(key, 0, -1) if n else []
        # Delivered, not yet acknowledged: [message, exchange, routing key] per delivery tag.
        for raw in client.hvals(ch.unacked_key):
            try:
                raws.append(json.loads(raw)[0])
            except (ValueError, IndexError, TypeError):
                continue
    ids: set[int] = set()
    for raw in raws:
        mid = _measure_arg(raw)
        if mid is not None:
            ids.add(mid)
    return ids


def _measure_arg(raw: Any) -> int | None:
    """The measurement id of a ccscope.measure message (kombu's JSON envelope), else None."""
    try:
        msg = json.loads(raw) if isinstance(raw, bytes | str) else raw
        if (msg.get("headers") or {}).get("task") != "ccscope.measure":
            return None
        body = msg["body"]
        if (msg.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        return int(json.loads(body)[0][0])
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def _crontab(schedule: str) -> crontab:
    minute, hour, dom, month, dow = validate_cron(schedule).split()
    return crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow)


def beat_schedule(store: Store) -> dict[str, dict[str, Any]]:
    """Beat entries for the enabled campaigns, plus the stale-measurement sweep. A campaign
    whose schedule cannot be scheduled (stored before the API validated schedules, or written
    to the database by hand) is logged and left out: it must not cost the others theirs."""
    entries: dict[str, dict[str, Any]] = {
        "ccscope-requeue-stale": {
            "task": "ccscope.requeue_stale",
            "schedule": settings().sweep_interval,
            "args": (WorkerConfig.from_env("beat").stale_after_seconds,),
        }
    }
    offset = 0
    while True:
        page, total = store.list_campaigns(limit=200, offset=offset)
        for c in page:
            if c.enabled:
                try:
                    when = _crontab(c.schedule)
                except CCScopeError as e:
                    log.error("campaign %s (%s) is not scheduled: %s", c.id, c.name, e)
                    continue
                entries[f"campaign-{c.id}"] = {
                    "task": "ccscope.plan_campaign",
                    "schedule": when,
                    "args": (c.id,),
                    "options": {"queue": "ccscope.control"},
                }
        offset += len(page)
        if not page or offset >= total:
            return entries


class CampaignScheduler(PersistentScheduler):
    """Beat's schedule is the store's enabled campaigns, re-read every few minutes so campaigns
    created or changed through the API take effect without restarting beat."""

    reload_every = 120.0

    def setup_schedule(self) -> None:
        super().setup_schedule()
        self._reload()

    def _reload(self) -> None:
        self.merge_inplace(beat_schedule(get_store()))
        self._next_reload = self.app.now().timestamp() + self.reload_every

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if self.app.now().timestamp() >= getattr(self, "_next_reload", 0.0):
            self._reload()
        return float(super().tick(*args, **kwargs))
