"""A store filled the way the service fills it: real lab traces (tests/fixtures), classified by
the shipped model, recorded through the store's own calls, on three census days."""

from __future__ import annotations

import datetime as dt
from functools import cache
from pathlib import Path

from sqlalchemy import text

from ccscope.classifier.core import classify
from ccscope.store import Store
from ccscope.trace import Trace
from ccscope.verdict import Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
# domain -> the fixture CCA its server runs
SITES = {
    "shop.example": "cubic",
    "news.example": "cubic",
    "video.example": "bbr",
    "mail.example": "reno",
    "blog.example": "bic",
    "bank.example": "vegas-a6",  # an untrained variant: Unknown, Vegas-like
}
VANTAGES = ("paris", "tokyo")
DAYS = (dt.date(2026, 10, 5), dt.date(2026, 10, 12), dt.date(2026, 10, 19))


@cache
def traces_of(cca: str) -> tuple[tuple[bytes, ...], Verdict]:
    files = [FIXTURES / f"{cca}-d5-{p}.trace.json.gz" for p in "AB"]
    traces = [Trace.load(f) for f in files]
    import json

    blobs = tuple(json.dumps(t.to_dict()).encode() for t in traces)
    return blobs, classify(traces)


def seed(store: Store) -> dict[str, Verdict]:
    """Every site from both vantage points on each of DAYS; returns each site's verdict."""
    store.import_list("tranco", DAYS[0], [(i + 1, d) for i, d in enumerate(SITES)], "tranco")
    for v in VANTAGES:
        store.add_vantage(v)
    campaign = store.create_campaign(
        "weekly", "tranco", len(SITES), ["tcp"], ["default"], list(VANTAGES), "0 3 * * 1"
    )
    verdicts = {}
    for day in DAYS:
        for vantage in VANTAGES:
            for domain, cca in SITES.items():
                blobs, verdict = traces_of(cca)
                m, _ = store.enqueue_measurement(
                    domain, vantage, "tcp", day.isoformat(), campaign_id=campaign.id
                )
                store.transition(m.id, "running")
                for prof, blob in zip("AB", blobs, strict=True):
                    store.add_trace(m.id, blob, profile=prof)
                store.transition(m.id, "captured")
                row = store.record_verdict(m.id, verdict)
                with store.engine.begin() as c:  # back-date it to its census day (test set-up only)
                    c.execute(
                        text("UPDATE verdicts SET measured_on = :d WHERE id = :i"), {"d": day, "i": row.id}
                    )
                verdicts[domain] = verdict
    store.rebuild_census()
    return verdicts
