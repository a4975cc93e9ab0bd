"""The store's read side: the census, a domain's verdicts, the export and the gauges the API,
the dashboard and /metrics read. Read-only statements on an AUTOCOMMIT connection (no
transaction); the rules that write live in `core.Store`, which these queries are part of."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Integer, Select, bindparam, func, select

from ccscope.store.common import NotFound, aware, normalize_domain
from ccscope.store.models import CensusCount, Measurement, Site, VantagePoint, VerdictRow


def _filtered(
    q: Select[Any],
    day: Any,
    transport_col: Any,
    date_from: dt.date | None,
    date_to: dt.date | None,
    vantage: str | None,
    transport: str | None,
) -> Select[Any]:
    """The census filters every reading query shares: a date range on `day`, a vantage point
    by name (the query joins VantagePoint) and a transport on `transport_col`."""
    if date_from:
        q = q.where(day >= date_from)
    if date_to:
        q = q.where(day <= date_to)
    if vantage:
        q = q.where(VantagePoint.name == vantage)
    if transport:
        q = q.where(transport_col == transport)
    return q


@dataclass(frozen=True)
class CensusRow:
    date: dt.date
    vantage: str
    transport: str
    label: str
    count: int
    total: int

    @property
    def share(self) -> float:
        return self.count / self.total if self.total else 0.0


@dataclass(frozen=True)
class VerdictView:
    """A stored verdict as the queries return it: plain values, no ORM object or session."""

    id: int
    measurement_id: int
    vantage: str
    transport: str
    label: str
    kind: str
    confidence: float
    classifier_version: str
    measured_on: dt.date
    created_at: dt.datetime
    evidence: dict[str, Any]

    @classmethod
    def of(cls, v: VerdictRow) -> VerdictView:
        return cls(
            v.id,
            v.measurement_id,
            v.vantage.name,
            v.transport,
            v.label,
            v.kind,
            v.confidence,
            v.classifier_version,
            v.measured_on,
            aware(v.created_at) or v.created_at,
            v.evidence,
        )


_VIEW_COLUMNS = (
    VerdictRow.id,
    VerdictRow.measurement_id,
    VantagePoint.name,
    VerdictRow.transport,
    VerdictRow.label,
    VerdictRow.kind,
    VerdictRow.confidence,
    VerdictRow.classifier_version,
    VerdictRow.measured_on,
    VerdictRow.created_at,
    VerdictRow.evidence,
)


_Q_HISTORY = (
    select(*_VIEW_COLUMNS, func.count().over())
    .join(Site, Site.id == VerdictRow.site_id)
    .join(VantagePoint, VantagePoint.id == VerdictRow.vantage_id)
    .where(Site.domain == bindparam("domain"))
    .order_by(VerdictRow.id.desc())
    .limit(bindparam("limit", type_=Integer))
    .offset(bindparam("offset", type_=Integer))
)
_Q_COUNT = (
    select(func.count())
    .select_from(VerdictRow)
    .join(Site, Site.id == VerdictRow.site_id)
    .where(Site.domain == bindparam("domain"))
)
_Q_SITE = select(Site.id).where(Site.domain == bindparam("domain"))
_Q_LATEST = (
    select(*_VIEW_COLUMNS)
    .join(VantagePoint, VantagePoint.id == VerdictRow.vantage_id)
    .where(
        VerdictRow.id.in_(
            select(func.max(VerdictRow.id))
            .join(Site, Site.id == VerdictRow.site_id)
            .where(Site.domain == bindparam("domain"))
            .group_by(VerdictRow.transport, VerdictRow.vantage_id)
            .scalar_subquery()
        )
    )
)


def _view(r: Sequence[Any]) -> VerdictView:
    created = aware(r[9])
    assert created is not None
    return VerdictView(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], created, r[10])


class Queries:
    """The read-only queries of `Store` (its base class): they need only its reader engine."""

    _reader: Engine

    def domain_report(
        self, domain: str, limit: int = 50, offset: int = 0
    ) -> tuple[list[VerdictView], list[VerdictView], int]:
        """(latest verdict per (transport, vantage), one page of history newest first, total).

        One query in the common case (the whole history fits the page: `latest` is read off it);
        the total rides along as a window count. The statements are built once (module level),
        so a call only binds parameters."""
        d = normalize_domain(domain)
        with self._reader.connect() as c:
            page = c.execute(_Q_HISTORY, {"domain": d, "limit": limit, "offset": offset}).all()
            if page:
                total = int(page[0][-1])
            else:  # no verdicts, an offset past the end, or no such site
                total = int(c.scalar(_Q_COUNT, {"domain": d}) or 0)
                if total == 0 and c.scalar(_Q_SITE, {"domain": d}) is None:
                    raise NotFound(f"no measurements of {d}")
            history = [_view(r) for r in page]
            if offset == 0 and len(history) == total:
                latest: dict[tuple[str, str], VerdictView] = {}
                for v in history:  # newest first: the first of each pair is its latest
                    latest.setdefault((v.transport, v.vantage), v)
                newest = list(latest.values())
            else:
                newest = [_view(r) for r in c.execute(_Q_LATEST, {"domain": d})]
        newest.sort(key=lambda v: (v.transport, v.vantage))
        return newest, history, total

    def census(
        self,
        date_from: dt.date | None = None,
        date_to: dt.date | None = None,
        vantage: str | None = None,
        transport: str | None = None,
        campaign_id: int | None = None,
    ) -> list[CensusRow]:
        """Label counts and shares per (date, vantage point, transport), from census_counts
        (kept equal to the GROUP BY of the verdicts by `record_verdict`)."""
        q = select(
            CensusCount.measured_on,
            VantagePoint.name,
            CensusCount.transport,
            CensusCount.label,
            func.sum(CensusCount.n),
        ).join(VantagePoint, VantagePoint.id == CensusCount.vantage_id)
        q = _filtered(
            q, CensusCount.measured_on, CensusCount.transport, date_from, date_to, vantage, transport
        )
        if campaign_id is not None:
            q = q.where(CensusCount.campaign_id == campaign_id)
        q = q.group_by(CensusCount.measured_on, VantagePoint.name, CensusCount.transport, CensusCount.label)
        with self._reader.connect() as c:
            raw = [(day, v, t, label, int(n)) for day, v, t, label, n in c.execute(q)]
        totals: dict[tuple[dt.date, str, str], int] = {}
        for day, v, t, _label, n in raw:
            totals[(day, v, t)] = totals.get((day, v, t), 0) + n
        rows = [CensusRow(day, v, t, label, n, totals[(day, v, t)]) for day, v, t, label, n in raw if n]
        rows.sort(key=lambda r: (r.date, r.vantage, r.transport, -r.count, r.label))
        return rows

    def unknown_families(
        self,
        date_from: dt.date | None = None,
        date_to: dt.date | None = None,
        vantage: str | None = None,
        transport: str | None = None,
    ) -> list[tuple[dt.date, str, str, str, int]]:
        """Unknown verdicts per (date, vantage, transport, nearest family): the "X-like" split of
        the Unknown share (index ix_verdicts_kind_day)."""
        fam = func.coalesce(VerdictRow.nearest, "?")
        q = (
            select(VerdictRow.measured_on, VantagePoint.name, VerdictRow.transport, fam, func.count())
            .join(VantagePoint, VantagePoint.id == VerdictRow.vantage_id)
            .where(VerdictRow.kind == "unknown")
        )
        q = _filtered(q, VerdictRow.measured_on, VerdictRow.transport, date_from, date_to, vantage, transport)
        q = q.group_by(VerdictRow.measured_on, VantagePoint.name, VerdictRow.transport, fam)
        with self._reader.connect() as c:
            rows = [(d, v, t, str(f), int(n)) for d, v, t, f, n in c.execute(q)]
        rows.sort(key=lambda r: (r[0], r[1], r[2], -r[4], r[3]))
        return rows

    EXPORT_COLUMNS = (
        "measurement_id", "campaign_id", "domain", "vantage", "transport", "measured_on", "label",
        "kind", "nearest", "confidence", "classifier_version", "created_at",
    )  # fmt: skip

    def export_verdicts(
        self,
        campaign_id: int | None = None,
        date_from: dt.date | None = None,
        date_to: dt.date | None = None,
        vantage: str | None = None,
        transport: str | None = None,
        batch: int = 5000,
    ) -> Iterator[tuple[Any, ...]]:
        """Every verdict matching the filters as a row of EXPORT_COLUMNS, in measurement order
        (streamed in batches: a census of millions never sits in memory at once)."""
        q = (
            select(
                VerdictRow.measurement_id,
                Measurement.campaign_id,
                Site.domain,
                VantagePoint.name,
                VerdictRow.transport,
                VerdictRow.measured_on,
                VerdictRow.label,
                VerdictRow.kind,
                VerdictRow.nearest,
                VerdictRow.confidence,
                VerdictRow.classifier_version,
                VerdictRow.created_at,
            )
            .join(Measurement, Measurement.id == VerdictRow.measurement_id)
            .join(Site, Site.id == VerdictRow.site_id)
            .join(VantagePoint, VantagePoint.id == VerdictRow.vantage_id)
            .order_by(VerdictRow.measurement_id)
        )
        if campaign_id is not None:
            q = q.where(Measurement.campaign_id == campaign_id)
        q = _filtered(q, VerdictRow.measured_on, VerdictRow.transport, date_from, date_to, vantage, transport)
        with self._reader.connect() as c:
            res = c.execution_options(yield_per=batch).execute(q)
            for r in res:
                yield (*r[:11], aware(r[11]))

    def recent_domains(self, limit: int = 20) -> list[tuple[str, str, str, dt.date]]:
        """The domains with the newest verdicts: (domain, label, vantage, measured_on)."""
        q = (
            select(Site.domain, VerdictRow.label, VantagePoint.name, VerdictRow.measured_on)
            .join(Site, Site.id == VerdictRow.site_id)
            .join(VantagePoint, VantagePoint.id == VerdictRow.vantage_id)
            .order_by(VerdictRow.id.desc())
            .limit(limit * 4)
        )
        seen: dict[str, tuple[str, str, str, dt.date]] = {}
        with self._reader.connect() as c:
            for d, label, v, day in c.execute(q):
                seen.setdefault(d, (d, label, v, day))
        return list(seen.values())[:limit]

    def measurement_states(self) -> dict[str, int]:
        """How many measurements are in each state (the /metrics gauge)."""
        q = select(Measurement.state, func.count()).group_by(Measurement.state)
        with self._reader.connect() as c:
            return {str(k): int(n) for k, n in c.execute(q)}

    def verdict_labels(self) -> dict[str, int]:
        """Verdicts per label, from the aggregated census (cheap at any size)."""
        q = select(CensusCount.label, func.sum(CensusCount.n)).group_by(CensusCount.label)
        with self._reader.connect() as c:
            return {str(k): int(n) for k, n in c.execute(q)}

    def ping(self) -> None:
        """One round trip to the database; raises if it cannot be reached."""
        with self._reader.connect() as c:
            c.execute(select(1))
