"""A store filled the way the service fills it: real lab traces (tests/fixtures/traces) with the
verdicts the classifier gave them (tests/fixtures/verdicts.json.gz, its own output, NaN and
all), recorded through the store's own calls, on three census days.

The verdicts are stored rather than recomputed so that the dashboard's tests do not move with
the classifier: `python -m tests.dashboard.seed` rewrites the file with the shipped model's
verdicts (after a model change, if the pages should show them).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import sys
from functools import cache, lru_cache
from pathlib import Path

from sqlalchemy import text

from ccscope.store import Store
from ccscope.trace import Trace
from ccscope.verdict import Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VERDICTS = FIXTURES / "verdicts.json.gz"  # each verdict names its classifier_version
CCAS = ("cubic", "bbr", "reno", "bic", "vegas-a6", "veno", "bbr2", "lp")
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


def _trace_files(cca: str) -> list[Path]:
    return [FIXTURES / "traces" / f"{cca}-d5-{p}.trace.json.gz" for p in "AB"]


@lru_cache(maxsize=1)
def _verdicts() -> dict[str, dict]:
    return json.loads(gzip.decompress(VERDICTS.read_bytes()))


@cache
def traces_of(cca: str) -> tuple[tuple[bytes, ...], Verdict]:
    """The trace documents of the fixture pair (profile A, B) and the classifier's verdict."""
    blobs = tuple(json.dumps(Trace.load(f).to_dict()).encode() for f in _trace_files(cca))
    return blobs, Verdict.from_dict(_verdicts()[cca])


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


def regenerate() -> None:
    """Classify every fixture pair with the shipped model and rewrite VERDICTS."""
    from ccscope.classifier.core import classify

    out = {}
    for cca in CCAS:
        v = classify([Trace.load(f) for f in _trace_files(cca)])
        out[cca] = v.to_dict()
        print(f"{cca}: {v.display}", file=sys.stderr)
    VERDICTS.write_bytes(gzip.compress(json.dumps(out, sort_keys=True).encode(), mtime=0))


if __name__ == "__main__":
    regenerate()
