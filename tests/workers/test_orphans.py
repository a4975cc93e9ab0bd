"""Beat's sweep re-dispatches queued measurements the broker has no message for (a message lost
between a queue and a worker killed as it took it, or a retry the broker never got), and only
those: one waiting in its queue, and one delivered to a worker that has not acknowledged it,
are left alone. Real Redis, the real SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ccscope.store.core import Store


@pytest.fixture
def app(redis_url: str) -> Iterator[Any]:
    from ccscope.workers.celery_app import app
    from tests.workers.conftest import use_broker

    old = app.conf.broker_url
    use_broker(app, redis_url)
    yield app
    use_broker(app, old)


def test_sweep_dispatches_only_the_rows_without_a_message(app: Any, store: Store) -> None:
    from kombu import Queue

    from ccscope.workers.celery_app import broker_measurement_ids, dispatch, queue_name, redispatch_orphans

    rows = [store.enqueue_measurement(f"s{i}.example", "paris", "tcp", "orphans")[0].id for i in range(3)]
    waiting, delivered, lost = rows
    dispatch(waiting, "paris")
    dispatch(delivered, "paris")
    with app.connection_for_read() as conn:
        # A worker holding `delivered`: taken from the queue, not acknowledged (kombu keeps it in
        # its unacked hash until then). `waiting` was published first, so it comes first: take
        # both and give `waiting` back, as a worker's restore would.
        q = conn.SimpleQueue(Queue(queue_name("paris"), routing_key=queue_name("paris")), no_ack=False)
        first = q.get(timeout=5)
        second = q.get(timeout=5)
        msgs = {m.payload[0][0]: m for m in (first, second)}
        msgs[waiting].requeue()
        assert broker_measurement_ids(["paris"], 1000) == {waiting, delivered}
        assert redispatch_orphans(store, 0.0) == [lost]
        assert broker_measurement_ids(["paris"], 1000) == {waiting, delivered, lost}
        # A second sweep finds nothing more to do.
        assert redispatch_orphans(store, 0.0) == []
        msgs[delivered].ack()
        q.close()
    # Rows younger than the threshold are not candidates at all.
    fresh = store.enqueue_measurement("fresh.example", "paris", "tcp", "orphans")[0].id
    assert fresh not in redispatch_orphans(store, 3600.0)
