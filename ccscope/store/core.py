"""The store: the one place the business rules live (shared by the API and the workers).

`Store(url, trace_dir)` works on SQLite (embedded default) and PostgreSQL alike. Every rule that
must hold across workers (idempotent enqueue, the measurement state machine, the per-site lease
and minimum gap) is enforced by a single conditional statement or a unique constraint in the
database, never by a read-then-write in Python, so it holds with many concurrent workers.
The read-only queries (census, a domain's verdicts, the export) are `queries.Queries`, a base
class of `Store`; the errors and the normal forms it shares are in `common`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, delete, event, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ccscope.errors import ProfileError
from ccscope.profile import check_profile_choice
from ccscope.settings import settings
from ccscope.store.blobs import BlobStore, open_blobs
from ccscope.store.common import (
    Conflict,
    IllegalTransition,
    NotFound,
    OptedOut,
    StoreError,
    aware,
    normalize_domain,
)
from ccscope.store.heartbeat import Claim, Heartbeats
from ccscope.store.models import (
    Campaign,
    CensusCount,
    CensusVersion,
    CrawlCache,
    ListEntry,
    Measurement,
    OptOut,
    Site,
    SiteList,
    SiteState,
    TraceFile,
    VantagePoint,
    VerdictRow,
    utcnow,
)
from ccscope.store.queries import Queries
from ccscope.transports import TRANSPORTS
from ccscope.verdict import Verdict

log = logging.getLogger("ccscope.store")

STATES = ("queued", "running", "captured", "classified", "failed")
# running -> queued is the requeue of a measurement whose worker died (its lease expired).
TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "failed"}),
    "running": frozenset({"captured", "failed", "queued"}),
    "captured": frozenset({"classified", "failed"}),
    "classified": frozenset(),
    "failed": frozenset(),
}
FINISHED = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
_CRON_FIELD = re.compile(r"^(\*|\d{1,2}(-\d{1,2})?)(/\d{1,2})?(,(\*|\d{1,2}(-\d{1,2})?)(/\d{1,2})?)*$")


def default_data_dir() -> Path:
    base = settings().data_dir or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "ccscope"
    )
    return Path(base)


_CRON_FIELDS = (("minute", 60, 0), ("hour", 24, 0), ("day of month", 31, 1), ("month", 12, 1),
                ("day of week", 7, 0))  # fmt: skip


def validate_cron(expr: str) -> str:
    """A 5-field cron expression (UTC) that Celery beat can schedule and that fires at all;
    raises StoreError with the reason. Parsed by Celery's own crontab parser (what beat runs),
    field by field so the reason names the field, then as a whole (`0 3 30 2 *` never fires)."""
    from celery.schedules import ParseException, crontab, crontab_parser

    fields = expr.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise StoreError(f"not a 5-field cron expression of numbers, *, -, / and ,: {expr!r}")
    for (name, size, first), f in zip(_CRON_FIELDS, fields, strict=True):
        try:
            crontab_parser(size, first).parse(f)
        except (ParseException, ValueError) as e:
            raise StoreError(f"cron {name} field {f!r}: {e}") from None
    minute, hour, dom, month, dow = fields
    try:
        crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow)
    except (ParseException, ValueError) as e:
        raise StoreError(f"cron {expr!r} never fires: {e}") from None
    return " ".join(fields)


def idempotency_key(
    campaign_id: int | None, domain: str, vantage: str, transport: str, profile: str, slot: str
) -> str:
    raw = "\x1f".join([str(campaign_id or ""), domain, vantage, transport, profile, slot])
    return hashlib.sha256(raw.encode()).hexdigest()


class Store(Queries):
    def __init__(
        self,
        url: str | None = None,
        trace_dir: str | None = None,
        *,
        echo: bool = False,
        pre_ping: bool = True,
    ) -> None:
        """`pre_ping` tests each pooled connection before use (one round trip) so a database
        restart costs nothing but the test; a latency-bound reader (the API) may turn it off:
        a connection the server dropped then fails one request and the pool is refreshed."""
        data = default_data_dir()
        if url is None:
            url = settings().db_url or f"sqlite:///{data / 'ccscope.db'}"
        if trace_dir is None:
            trace_dir = settings().trace_dir or str(data / "traces")
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        self.url = url
        if url.startswith("sqlite"):
            path = url.split("///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.engine: Engine = create_engine(
                url, echo=echo, connect_args={"timeout": 30}, **_pool_args(url)
            )
            event.listen(self.engine, "connect", _sqlite_pragmas)
        else:
            self.engine = create_engine(
                url, echo=echo, pool_pre_ping=pre_ping, pool_recycle=1800, **_pool_args(url)
            )
        self.blobs_location = trace_dir
        self.blobs: BlobStore = open_blobs(trace_dir)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        # Read-only queries run outside a transaction: no BEGIN, no ROLLBACK when the connection
        # goes back to the pool (two round trips fewer on the API's hot paths).
        self._reader = self.engine.execution_options(isolation_level="AUTOCOMMIT")

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (idempotent)."""
        from ccscope.store.migrate import upgrade

        upgrade(self.engine)

    _heartbeats: Heartbeats | None = None
    _heartbeats_lock = threading.Lock()  # shared by all stores: taken once per measurement

    def close(self) -> None:
        self.engine.dispose()

    # ---- sites, lists, vantage points -------------------------------------------------------

    def _site(self, s: Session, domain: str, create: bool = True) -> Site:
        d = normalize_domain(domain)
        site = s.scalar(select(Site).where(Site.domain == d))
        if site is None:
            if not create:
                raise NotFound(f"no site {d}")
            # Concurrent creators race on the unique domain; the loser re-reads the winner's row.
            try:
                with s.begin_nested():
                    site = Site(domain=d)
                    s.add(site)
            except IntegrityError:
                site = s.scalars(select(Site).where(Site.domain == d)).one()
        return site

    def import_list(
        self, name: str, list_date: dt.date, entries: Iterable[tuple[int, str]], source_format: str
    ) -> SiteList:
        """Store a ranked list; importing the same (name, date) again is refused."""
        with self.sessions.begin() as s:
            if s.scalar(select(SiteList).where(SiteList.name == name, SiteList.list_date == list_date)):
                raise Conflict(f"list {name} of {list_date} is already imported")
            sl = SiteList(name=name, list_date=list_date, source_format=source_format)
            s.add(sl)
            s.flush()
            # One bulk lookup, one bulk insert: lists have a million rows.
            ranked = [(r, normalize_domain(d)) for r, d in entries]
            domains = list(dict.fromkeys(d for _, d in ranked))
            ids: dict[str, int] = {}
            for i in range(0, len(domains), 5000):
                chunk = domains[i : i + 5000]
                ids.update(
                    (d, i) for d, i in s.execute(select(Site.domain, Site.id).where(Site.domain.in_(chunk)))
                )
                missing = [d for d in chunk if d not in ids]
                if missing:
                    s.execute(
                        Site.__table__.insert(), [{"domain": d, "created_at": utcnow()} for d in missing]
                    )
                    q = select(Site.domain, Site.id).where(Site.domain.in_(missing))
                    ids.update((d, i) for d, i in s.execute(q))
            seen: set[str] = set()
            rows = []
            for rank, d in ranked:
                if d in seen:  # a list naming a site twice keeps its best rank
                    continue
                seen.add(d)
                rows.append({"list_id": sl.id, "rank": rank, "site_id": ids[d]})
            for i in range(0, len(rows), 5000):
                s.execute(ListEntry.__table__.insert(), rows[i : i + 5000])
            sl.size = len(rows)
        return sl

    def get_list(self, name: str, list_date: dt.date | None = None) -> SiteList:
        with self.sessions() as s:
            q = select(SiteList).where(SiteList.name == name)
            if list_date is not None:
                q = q.where(SiteList.list_date == list_date)
            sl = s.scalar(q.order_by(SiteList.list_date.desc()).limit(1))
            if sl is None:
                raise NotFound(f"no site list {name!r}")
            return sl

    def top_sites(self, list_id: int, n: int) -> list[str]:
        with self.sessions() as s:
            q = (
                select(Site.domain)
                .join(ListEntry, ListEntry.site_id == Site.id)
                .where(ListEntry.list_id == list_id)
                .order_by(ListEntry.rank)
                .limit(n)
            )
            return list(s.scalars(q))

    def add_vantage(self, name: str, description: str = "") -> VantagePoint:
        if not re.match(r"^[a-z0-9][a-z0-9_-]{0,63}$", name):
            raise StoreError(f"vantage point names are lower-case [a-z0-9_-]: {name!r}")
        with self.sessions.begin() as s:
            v = s.scalar(select(VantagePoint).where(VantagePoint.name == name))
            if v is None:
                v = VantagePoint(name=name, description=description)
                s.add(v)
            return v

    def vantages(self) -> list[VantagePoint]:
        with self.sessions() as s:
            return list(s.scalars(select(VantagePoint).order_by(VantagePoint.name)))

    def _vantage(self, s: Session, name: str) -> VantagePoint:
        v = s.scalar(select(VantagePoint).where(VantagePoint.name == name))
        if v is None:
            raise NotFound(f"no vantage point {name!r}")
        return v

    # ---- campaigns --------------------------------------------------------------------------

    def create_campaign(
        self,
        name: str,
        list_name: str,
        top_n: int,
        transports: Sequence[str],
        profiles: Sequence[str],
        vantages: Sequence[str],
        schedule: str,
        enabled: bool = True,
    ) -> Campaign:
        fields = _campaign_fields(top_n=top_n, transports=transports, profiles=profiles, schedule=schedule)
        with self.sessions.begin() as s:
            if s.scalar(select(Campaign).where(Campaign.name == name)):
                raise Conflict(f"campaign {name!r} exists")
            sl = s.get(SiteList, self.get_list(list_name).id)
            c = Campaign(name=name, site_list=sl, enabled=enabled, **fields)
            c.vantages = [self._vantage(s, v) for v in dict.fromkeys(vantages)]
            if not c.vantages:
                raise StoreError("a campaign needs at least one vantage point")
            s.add(c)
            s.flush()
            return self._campaign(s, c.id, fresh=True)

    def _campaign(self, s: Session, campaign_id: int, fresh: bool = False) -> Campaign:
        c = s.get(Campaign, campaign_id, populate_existing=fresh)
        if c is None:
            raise NotFound(f"no campaign {campaign_id}")
        return c

    def get_campaign(self, campaign_id: int) -> Campaign:
        with self.sessions() as s:
            return self._campaign(s, campaign_id)

    def list_campaigns(self, limit: int = 50, offset: int = 0) -> tuple[list[Campaign], int]:
        with self.sessions() as s:
            total = s.scalar(select(func.count()).select_from(Campaign)) or 0
            rows = s.scalars(select(Campaign).order_by(Campaign.id).limit(limit).offset(offset))
            return list(rows.unique()), total

    def update_campaign(self, campaign_id: int, **changes: Any) -> Campaign:
        allowed = {"top_n", "transports", "profiles", "schedule", "enabled", "vantages"}
        unknown = set(changes) - allowed
        if unknown:
            raise StoreError(f"cannot change {sorted(unknown)}")
        with self.sessions.begin() as s:
            c = self._campaign(s, campaign_id)
            vantages = changes.pop("vantages", None)
            enabled = changes.pop("enabled", None)
            for k, v in _campaign_fields(**changes).items():
                setattr(c, k, v)
            if enabled is not None:
                c.enabled = bool(enabled)
            if vantages is not None:
                if not vantages:
                    raise StoreError("a campaign needs at least one vantage point")
                c.vantages = [self._vantage(s, v) for v in dict.fromkeys(vantages)]
            c.updated_at = utcnow()
            s.flush()
            return self._campaign(s, c.id, fresh=True)

    # ---- measurements -----------------------------------------------------------------------

    def enqueue_measurement(
        self,
        domain: str,
        vantage: str,
        transport: str,
        slot: str,
        *,
        campaign_id: int | None = None,
        profile: str = "default",
        url: str | None = None,
    ) -> tuple[Measurement, bool]:
        """Queue a measurement once: the same (campaign, site, vantage, transport, profile, slot)
        returns the existing row and False. Opted-out sites are refused."""
        if transport not in TRANSPORTS:
            raise StoreError(f"transport must be one of {TRANSPORTS}")
        d = normalize_domain(domain)
        if self.is_opted_out(d):
            raise OptedOut(f"{d} has opted out of measurement")
        key = idempotency_key(campaign_id, d, vantage, transport, profile, slot)
        with self.sessions.begin() as s:
            existing = s.scalar(select(Measurement).where(Measurement.idempotency_key == key))
            if existing is not None:
                return existing, False
            site = self._site(s, d)
            v = self._vantage(s, vantage)
            m = Measurement(
                idempotency_key=key,
                campaign_id=campaign_id,
                site_id=site.id,
                vantage_id=v.id,
                transport=transport,
                profile=profile,
                slot=slot,
                url=url,
                state="queued",
            )
            try:
                with s.begin_nested():
                    s.add(m)
            except IntegrityError:
                # Another worker inserted the same key between our read and insert.
                return s.scalars(select(Measurement).where(Measurement.idempotency_key == key)).one(), False
            s.flush()
            return self._measurement(s, m.id, fresh=True), True

    def _measurement(self, s: Session, measurement_id: int, fresh: bool = False) -> Measurement:
        # fresh: reload a row this session created or changed, with its relationships, so the
        # object is complete after the session closes.
        m = s.get(Measurement, measurement_id, populate_existing=fresh)
        if m is None:
            raise NotFound(f"no measurement {measurement_id}")
        return m

    def get_measurement(self, measurement_id: int) -> Measurement:
        with self.sessions() as s:
            return self._measurement(s, measurement_id)

    def get_verdict(self, measurement_id: int) -> VerdictRow | None:
        with self.sessions() as s:
            return s.scalar(select(VerdictRow).where(VerdictRow.measurement_id == measurement_id))

    def transition(self, measurement_id: int, new: str, reason: str | None = None) -> Measurement:
        """Move a measurement along the state machine; illegal moves raise IllegalTransition.

        The UPDATE is conditional on the state read, so of two workers racing on one row exactly
        one wins and the other gets IllegalTransition."""
        if new not in STATES:
            raise StoreError(f"unknown state {new!r}")
        if new == "failed" and not reason:
            raise StoreError("a failed measurement needs a reason")
        with self.sessions.begin() as s:
            m = self._measurement(s, measurement_id)
            old = m.state
            if new not in TRANSITIONS[old]:
                raise IllegalTransition(f"measurement {measurement_id}: {old} -> {new} is not allowed")
            now = utcnow()
            values: dict[str, Any] = {"state": new, "updated_at": now}
            if new == "running":
                values["started_at"] = now
                values["heartbeat_at"] = now
                values["attempts"] = Measurement.attempts + 1
            if new in ("classified", "failed"):
                values["finished_at"] = now
            if new == "failed":
                values["failure_reason"] = reason[:2000] if reason else reason
            res = s.execute(
                update(Measurement)
                .where(Measurement.id == measurement_id, Measurement.state == old)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            if res.rowcount != 1:  # type: ignore[attr-defined]
                raise IllegalTransition(f"measurement {measurement_id} changed state concurrently")
            return self._measurement(s, measurement_id, fresh=True)

    def requeue_stale(self, older_than_seconds: float) -> list[int]:
        """Put `running` measurements whose worker has been silent too long (killed mid-run: no
        heartbeat, or no start, for `older_than_seconds`) back to `queued`, so they are re-run;
        returns their ids. Conditional on the state, like `transition`, so a worker that finishes
        at the same moment wins or loses cleanly."""
        cutoff = utcnow() - dt.timedelta(seconds=older_than_seconds)
        with self.sessions.begin() as s:
            ids = list(
                s.scalars(
                    select(Measurement.id).where(
                        Measurement.state == "running",
                        func.coalesce(Measurement.heartbeat_at, Measurement.started_at) < cutoff,
                    )
                )
            )
            done = []
            for mid in ids:
                res = s.execute(
                    update(Measurement)
                    .where(Measurement.id == mid, Measurement.state == "running")
                    .values(state="queued", updated_at=utcnow())
                    .execution_options(synchronize_session=False)
                )
                if res.rowcount == 1:  # type: ignore[attr-defined]
                    done.append(mid)
            return done

    def queued_before(self, older_than_seconds: float, limit: int = 10_000) -> list[tuple[int, str]]:
        """(id, vantage point) of `queued` measurements untouched for `older_than_seconds`: the
        candidates of the sweep that re-dispatches rows whose broker message was lost."""
        cutoff = utcnow() - dt.timedelta(seconds=older_than_seconds)
        with self.sessions() as s:
            rows = s.execute(
                select(Measurement.id, VantagePoint.name)
                .join(VantagePoint, VantagePoint.id == Measurement.vantage_id)
                .where(Measurement.state == "queued", Measurement.updated_at < cutoff)
                .order_by(Measurement.id)
                .limit(limit)
            ).all()
        return [(int(i), str(v)) for i, v in rows]

    def list_measurements(self, state: str | None = None, limit: int = 100) -> list[Measurement]:
        with self.sessions() as s:
            q = select(Measurement).order_by(Measurement.id).limit(limit)
            if state:
                q = q.where(Measurement.state == state)
            return list(s.scalars(q).unique())

    # ---- traces and verdicts ----------------------------------------------------------------

    def add_trace(
        self, measurement_id: int, data: bytes, profile: str = "default", media_type: str = "application/json"
    ) -> TraceFile:
        digest = self.blobs.put(data)  # content-addressed: a retry rewrites nothing
        with self.sessions.begin() as s:
            self._measurement(s, measurement_id)
            t = s.scalar(
                select(TraceFile).where(
                    TraceFile.measurement_id == measurement_id, TraceFile.sha256 == digest
                )
            )
            if t is None:
                t = TraceFile(
                    measurement_id=measurement_id,
                    sha256=digest,
                    size=len(data),
                    profile=profile,
                    media_type=media_type,
                )
                s.add(t)
            return t

    def read_trace(self, sha256: str) -> bytes:
        return self.blobs.get(sha256)

    def drop_traces(self, measurement_id: int) -> int:
        """Forget the traces recorded for a measurement that is running again: a dead attempt
        may have stored some before it could move the row to captured, and the re-run must leave
        exactly one set. Only a `running` row's traces go (a captured or classified row's
        traces are its result); returns how many were dropped. Blobs are content-addressed and
        may be shared with other measurements, so the files stay."""
        with self.sessions.begin() as s:
            m = self._measurement(s, measurement_id)
            if m.state != "running":
                raise IllegalTransition(
                    f"measurement {measurement_id} is {m.state}: only a running row's traces are dropped"
                )
            res = s.execute(
                delete(TraceFile)
                .where(TraceFile.measurement_id == measurement_id)
                .execution_options(synchronize_session=False)
            )
            return int(res.rowcount or 0)  # type: ignore[attr-defined]

    def record_verdict(self, measurement_id: int, verdict: Verdict) -> VerdictRow:
        """Store the verdict and move captured -> classified, both or neither."""
        with self.sessions.begin() as s:
            m = self._measurement(s, measurement_id)
            existing = s.scalar(select(VerdictRow).where(VerdictRow.measurement_id == measurement_id))
            if existing is not None:  # a redelivered classify task
                return existing
            if m.state != "captured":
                raise IllegalTransition(f"measurement {measurement_id} is {m.state}, not captured")
            now = utcnow()
            res = s.execute(
                update(Measurement)
                .where(Measurement.id == measurement_id, Measurement.state == "captured")
                .values(state="classified", updated_at=now, finished_at=now)
                .execution_options(synchronize_session=False)
            )
            if res.rowcount != 1:  # type: ignore[attr-defined]
                raise IllegalTransition(f"measurement {measurement_id} changed state concurrently")
            # The canonical document (NaN as null, floats rounded): PostgreSQL's JSON type
            # refuses NaN, which feature values in the evidence can be.
            evidence = json.loads(verdict.to_json())
            evidence.pop("label", None)
            row = VerdictRow(
                measurement_id=measurement_id,
                site_id=m.site_id,
                vantage_id=m.vantage_id,
                transport=m.transport,
                measured_on=(aware(m.started_at) or now).date(),
                label=verdict.label,
                kind=verdict.kind,
                nearest=(verdict.nearest or None) and verdict.nearest[:64],
                confidence=verdict.confidence,
                evidence=evidence,
                classifier_version=verdict.classifier_version,
                created_at=now,
            )
            s.add(row)
            s.flush()
            self._count_verdict(s, row, m.campaign_id)
            return row

    def _count_verdict(self, s: Session, row: VerdictRow, campaign_id: int | None) -> None:
        """census_counts += 1 for the verdict's cell, in the verdict's transaction."""
        key = {
            "measured_on": row.measured_on,
            "vantage_id": row.vantage_id,
            "transport": row.transport,
            "campaign_id": campaign_id or 0,
            "label": row.label,
        }
        if self.dialect in ("postgresql", "sqlite"):
            if self.dialect == "postgresql":
                from sqlalchemy.dialects.postgresql import insert
            else:
                from sqlalchemy.dialects.sqlite import insert
            stmt = insert(CensusCount).values(**key, n=1)
            s.execute(stmt.on_conflict_do_update(index_elements=list(key), set_={"n": CensusCount.n + 1}))
        else:
            cond = [getattr(CensusCount, k) == v for k, v in key.items()]
            res = s.execute(update(CensusCount).where(*cond).values(n=CensusCount.n + 1))
            if res.rowcount != 1:  # type: ignore[attr-defined]
                s.add(CensusCount(**key, n=1))
        self._bump_census_version(s)

    @staticmethod
    def _bump_census_version(s: Session) -> None:
        # Last in its transaction: the row lock it takes is held only until the commit.
        s.execute(
            update(CensusVersion)
            .where(CensusVersion.id == 1)
            .values(version=CensusVersion.version + 1)
            .execution_options(synchronize_session=False)
        )

    def census_version(self) -> int:
        """Changes whenever the census does (every recorded verdict, every rebuild). Read it
        *before* computing a census answer to cache under it: the answer is then at least as new
        as the version it is filed under."""
        with self._reader.connect() as c:
            return int(c.scalar(select(CensusVersion.version).where(CensusVersion.id == 1)) or 0)

    def rebuild_census(self) -> int:
        """Recompute census_counts from the verdicts (after rows were bulk-loaded around the
        store); returns the number of cells. Safe to run any time: one transaction."""
        campaign = func.coalesce(Measurement.campaign_id, 0)
        cells = (
            select(
                VerdictRow.measured_on,
                VerdictRow.vantage_id,
                VerdictRow.transport,
                campaign,
                VerdictRow.label,
                func.count(),
            )
            .join(Measurement, Measurement.id == VerdictRow.measurement_id)
            .group_by(
                VerdictRow.measured_on,
                VerdictRow.vantage_id,
                VerdictRow.transport,
                campaign,
                VerdictRow.label,
            )
        )
        with self.sessions.begin() as s:
            s.execute(delete(CensusCount))
            s.execute(
                CensusCount.__table__.insert().from_select(
                    ["measured_on", "vantage_id", "transport", "campaign_id", "label", "n"], cells
                )
            )
            self._bump_census_version(s)
            return int(s.scalar(select(func.count()).select_from(CensusCount)) or 0)

    # ---- politeness -------------------------------------------------------------------------

    def opt_out(self, domain: str, reason: str = "") -> None:
        d = normalize_domain(domain)
        with self.sessions.begin() as s:
            if s.get(OptOut, d) is None:
                s.add(OptOut(domain=d, reason=reason))

    def is_opted_out(self, domain: str) -> bool:
        """An opt-out of example.com covers www.example.com and every other subdomain."""
        labels = normalize_domain(domain).split(".")
        suffixes = [".".join(labels[i:]) for i in range(len(labels) - 1)]
        with self.sessions() as s:
            return s.scalar(select(func.count()).where(OptOut.domain.in_(suffixes))) != 0

    def acquire_site(
        self, domain: str, holder: str, lease_seconds: float = 600, min_gap_seconds: float = 0
    ) -> bool:
        """Take the site's lease if nobody holds a live one and the last measurement started at
        least `min_gap_seconds` ago. One conditional UPDATE decides, so it is safe across workers.
        A lease that expires (its worker died) is free for the next taker."""
        now = utcnow()
        with self.sessions.begin() as s:
            site = self._site(s, domain)
            if s.get(SiteState, site.id) is None:
                try:
                    with s.begin_nested():
                        s.add(SiteState(site_id=site.id))
                except IntegrityError:
                    pass
            res = s.execute(
                update(SiteState)
                .where(
                    SiteState.site_id == site.id,
                    or_(SiteState.lease_holder.is_(None), SiteState.lease_expires_at < now),
                    or_(
                        SiteState.last_started_at.is_(None),
                        SiteState.last_started_at <= now - dt.timedelta(seconds=min_gap_seconds),
                    ),
                )
                .values(
                    lease_holder=holder,
                    lease_expires_at=now + dt.timedelta(seconds=lease_seconds),
                    last_started_at=now,
                )
                .execution_options(synchronize_session=False)
            )
            return res.rowcount == 1  # type: ignore[attr-defined]

    def release_site(self, domain: str, holder: str) -> bool:
        with self.sessions.begin() as s:
            site = self._site(s, domain, create=False)
            res = s.execute(
                update(SiteState)
                .where(SiteState.site_id == site.id, SiteState.lease_holder == holder)
                .values(lease_holder=None, lease_expires_at=None)
                .execution_options(synchronize_session=False)
            )
            return res.rowcount == 1  # type: ignore[attr-defined]

    def heartbeat(self, measurement_id: int, holder: str, lease_seconds: float) -> bool:
        """A running measurement's sign of life: push its site lease (held by `holder`) out to
        now + `lease_seconds` and stamp the row's `heartbeat_at`. A worker beats every few
        seconds while it measures, so leases can be short: a dead worker's lease lapses, and its
        row turns stale, `lease_seconds` after its last beat however long measurements take.
        False when the lease is no longer `holder`'s (it lapsed and another took it) or the row
        was requeued as dead: the caller's run lost its claim. A row already finished (its
        run's last write came before this beat) is True: nothing was lost."""
        with self.sessions.begin() as s:
            alive = self._beat(s, measurement_id, holder, lease_seconds, utcnow())
        if alive is None:
            raise NotFound(f"no measurement {measurement_id}")
        return alive

    def heartbeat_many(self, claims: Sequence[Claim]) -> dict[int, bool]:
        """`heartbeat` for many running measurements in one transaction (one connection): the
        beats of a whole worker. A measurement that no longer exists has lost its claim."""
        now = utcnow()
        with self.sessions.begin() as s:
            return {
                c.measurement_id: bool(self._beat(s, c.measurement_id, c.holder, c.lease_seconds, now))
                # in id order, as other many-row writes go: no lock-order cycles between them
                for c in sorted(claims, key=lambda c: c.measurement_id)
            }

    @staticmethod
    def _beat(
        s: Session, measurement_id: int, holder: str, lease_seconds: float, now: dt.datetime
    ) -> bool | None:
        site_id = s.scalar(select(Measurement.site_id).where(Measurement.id == measurement_id))
        if site_id is None:
            return None
        lease = s.execute(
            update(SiteState)
            .where(SiteState.site_id == site_id, SiteState.lease_holder == holder)
            .values(lease_expires_at=now + dt.timedelta(seconds=lease_seconds))
            .execution_options(synchronize_session=False)
        )
        if lease.rowcount != 1:  # type: ignore[attr-defined]
            return False  # not ours any more: leave the row to go stale and be requeued
        alive = s.execute(
            update(Measurement)
            # captured: the run is classifying; it is alive, though no longer "running".
            .where(Measurement.id == measurement_id, Measurement.state.in_(("running", "captured")))
            .values(heartbeat_at=now)
            .execution_options(synchronize_session=False)
        )
        if alive.rowcount == 1:  # type: ignore[attr-defined]
            return True
        # A beat between the run's last write and the end of its keep_alive finds the row
        # finished: the run is not lost (under load that window is wide).
        state = s.scalar(select(Measurement.state).where(Measurement.id == measurement_id))
        return state in FINISHED

    @contextlib.contextmanager
    def keep_alive(
        self,
        measurement_id: int,
        holder: str,
        lease_seconds: float,
        every: float,
        max_seconds: float | None = None,
    ) -> Iterator[threading.Event]:
        """Beat (`heartbeat`) every `every` seconds while the block runs; the beats of all the
        process's running measurements go together, from one thread in one transaction
        (ccscope/store/heartbeat.py). Yields an Event that is set if a beat finds the claim
        lost. A beat that fails (database briefly away) is logged and retried at the next
        interval. After `max_seconds` the beats stop: a run stuck past any length a live one can
        have (a thread blocked for good) lets its row go stale and be run again, instead of
        holding it and its site."""
        with self._heartbeats_lock:
            if self._heartbeats is None:
                self._heartbeats = Heartbeats(self.heartbeat_many)
        claim = self._heartbeats.add(measurement_id, holder, lease_seconds, every, max_seconds)
        try:
            yield claim.lost
        finally:
            self._heartbeats.remove(claim)

    # ---- crawler cache ----------------------------------------------------------------------

    def cached_object(self, domain: str) -> CrawlCache | None:
        """The crawler's unexpired pick for a site, or None."""
        d = normalize_domain(domain)
        with self.sessions() as s:
            row = s.scalar(
                select(CrawlCache).join(Site, Site.id == CrawlCache.site_id).where(Site.domain == d)
            )
            if row is None or (aware(row.expires_at) or utcnow()) <= utcnow():
                return None
            return row

    def cache_object(
        self, domain: str, url: str | None, size: int | None, detail: dict[str, Any], ttl_seconds: float
    ) -> None:
        now = utcnow()
        with self.sessions.begin() as s:
            site = self._site(s, domain)
            s.execute(delete(CrawlCache).where(CrawlCache.site_id == site.id))
            s.add(
                CrawlCache(
                    site_id=site.id,
                    url=url,
                    size=size,
                    detail=detail,
                    found_at=now,
                    expires_at=now + dt.timedelta(seconds=ttl_seconds),
                )
            )


def _campaign_fields(**kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if kw.get("top_n") is not None:
        n = int(kw["top_n"])
        if not 1 <= n <= 1_000_000:
            raise StoreError("top_n must be between 1 and 1,000,000")
        out["top_n"] = n
    if kw.get("transports") is not None:
        ts = list(dict.fromkeys(kw["transports"]))
        if not ts or any(t not in TRANSPORTS for t in ts):
            raise StoreError(f"transports must be a non-empty subset of {TRANSPORTS}")
        out["transports"] = ts
    if kw.get("profiles") is not None:
        ps = list(dict.fromkeys(kw["profiles"]))
        if not ps or any(not re.match(r"^[A-Za-z0-9_.:+-]{1,64}$", p) for p in ps):
            raise StoreError("profiles must be a non-empty list of profile names")
        for p in ps:
            try:
                check_profile_choice(p)
            except ProfileError as e:
                raise StoreError(str(e)) from None
        out["profiles"] = ps
    if kw.get("schedule") is not None:
        out["schedule"] = validate_cron(kw["schedule"])
    return out


def _pool_args(url: str) -> dict[str, int]:
    """Connection pool size: a worker runs K measurements, each with a heartbeat thread beside
    it, so SQLAlchemy's default 5 + 10 ran dry at K = 32 ("QueuePool limit ... reached").
    $CCSCOPE_DB_POOL sets the pool (overflow: twice that); in-memory SQLite keeps its own pool."""
    if url.startswith("sqlite") and (url.endswith(":memory:") or url.rstrip("/") == "sqlite:"):
        return {}
    size = settings().db_pool
    return {"pool_size": size, "max_overflow": 2 * size}


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets the API read while a worker writes; foreign keys are off by default in SQLite.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()
