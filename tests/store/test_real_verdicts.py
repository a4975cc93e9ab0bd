"""A verdict as the classifier really makes it (NaN among its feature values) is recorded on both
backends: PostgreSQL's JSON type refuses NaN, so the store keeps the canonical document."""

from __future__ import annotations

import datetime as dt
import json
import math

from ccscope.store import Store
from tests.dashboard.seed import traces_of


def _has_nan(x: object) -> bool:
    if isinstance(x, float):
        return math.isnan(x)
    if isinstance(x, dict):
        return any(_has_nan(v) for v in x.values())
    if isinstance(x, list):
        return any(_has_nan(v) for v in x)
    return False


def test_record_a_real_verdict(store: Store) -> None:
    blobs, verdict = traces_of("cubic")
    assert _has_nan(verdict.to_dict())  # what made PostgreSQL refuse it
    store.add_vantage("paris")
    store.import_list("t", dt.date(2026, 11, 1), [(1, "a.example")], "tranco")
    m, _ = store.enqueue_measurement("a.example", "paris", "tcp", "s")
    store.transition(m.id, "running")
    store.add_trace(m.id, blobs[0], profile="A")
    store.transition(m.id, "captured")
    store.record_verdict(m.id, verdict)
    (latest,), _, _ = store.domain_report("a.example")
    assert latest.label == "cubic" and latest.evidence == {
        k: v for k, v in json.loads(verdict.to_json()).items() if k != "label"
    }
