"""The store's tables, as typed SQLAlchemy 2 ORM classes.

Portable types only (no PostgreSQL arrays, no SQLite quirks) so that the embedded SQLite default
and the distributed PostgreSQL deployment run the same code. The Alembic migration in
`migrations/versions` mirrors these classes; `tests/store` checks the two agree.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    # Timezone-aware timestamps everywhere; SQLite drops the zone, so `aware()` restores it on read.
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dt.datetime: DateTime(timezone=True),
        dict[str, Any]: JSON,
    }


class SiteList(Base):
    __tablename__ = "site_lists"
    __table_args__ = (UniqueConstraint("name", "list_date", name="uq_site_lists_name_date"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    list_date: Mapped[dt.date] = mapped_column(Date)
    source_format: Mapped[str] = mapped_column(String(20))  # "tranco" | "alexa"
    size: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Site(Base):
    __tablename__ = "sites"

    id: Mapped[int] = mapped_column(primary_key=True)
    domain: Mapped[str] = mapped_column(String(253), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ListEntry(Base):
    __tablename__ = "list_entries"
    __table_args__ = (UniqueConstraint("list_id", "site_id", name="uq_list_entries_site"),)

    list_id: Mapped[int] = mapped_column(ForeignKey("site_lists.id", ondelete="CASCADE"), primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    site_id: Mapped[int] = mapped_column(ForeignKey("sites.id"))


class VantagePoint(Base):
    __tablename__ = "vantage_points"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


campaign_vantages = Table(
    "campaign_vantages",
    Base.metadata,
    Column("campaign_id", ForeignKey("campaigns.id", ondelete="CASCADE"), primary_key=True),
    Column("vantage_id", ForeignKey("vantage_points.id"), primary_key=True),
)


class Campaign(Base):
    __tablename__ = "campaigns"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    list_id: Mapped[int] = mapped_column(ForeignKey("site_lists.id"))
    top_n: Mapped[int] = mapped_column(Integer)
    transports: Mapped[list[str]] = mapped_column(JSON)
    profiles: Mapped[list[str]] = mapped_column(JSON)
    schedule: Mapped[str] = mapped_column(String(100))  # 5-field cron, UTC
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    site_list: Mapped[SiteList] = relationship(lazy="joined")
    vantages: Mapped[list[VantagePoint]] = relationship(
        secondary=campaign_vantages, lazy="selectin", order_by=VantagePoint.name
    )


class Measurement(Base):
    __tablename__ = "measurements"
    __table_args__ = (
        # A redelivered task computes the same key, so it finds the row instead of adding one.
        UniqueConstraint("idempotency_key", name="uq_measurements_idempotency_key"),
        Index("ix_measurements_state", "state"),
        Index("ix_measurements_site", "site_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(64))
    campaign_id: Mapped[int | None] = mapped_column(ForeignKey("campaigns.id"), nullable=True)
    site_id: Mapped[int] = mapped_column(ForeignKey("sites.id"))
    vantage_id: Mapped[int] = mapped_column(ForeignKey("vantage_points.id"))
    transport: Mapped[str] = mapped_column(String(16))
    profile: Mapped[str] = mapped_column(String(64), default="default")
    slot: Mapped[str] = mapped_column(String(64))  # the scheduled slot (ISO time) or a request id
    url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    state: Mapped[str] = mapped_column(String(16), default="queued")
    failure_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    # The running worker's last sign of life (Store.heartbeat); a silent row is a dead worker's.
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)

    site: Mapped[Site] = relationship(lazy="joined")
    vantage: Mapped[VantagePoint] = relationship(lazy="joined")
    traces: Mapped[list[TraceFile]] = relationship(lazy="selectin", order_by="TraceFile.id")


class TraceFile(Base):
    __tablename__ = "traces"
    __table_args__ = (UniqueConstraint("measurement_id", "sha256", name="uq_traces_measurement_sha"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    measurement_id: Mapped[int] = mapped_column(ForeignKey("measurements.id", ondelete="CASCADE"))
    sha256: Mapped[str] = mapped_column(String(64))  # also the blob's name in the trace backend
    size: Mapped[int] = mapped_column(BigInteger)
    profile: Mapped[str] = mapped_column(String(64), default="default")
    media_type: Mapped[str] = mapped_column(String(100), default="application/json")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class VerdictRow(Base):
    __tablename__ = "verdicts"
    __table_args__ = (
        # Denormalised keys: the domain lookup and the census never need to join measurements.
        Index("ix_verdicts_site_time", "site_id", "created_at"),
        Index("ix_verdicts_census", "measured_on", "vantage_id", "transport"),
        Index("ix_verdicts_kind_day", "kind", "measured_on"),  # the Unknown share and its families
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    measurement_id: Mapped[int] = mapped_column(
        ForeignKey("measurements.id", ondelete="CASCADE"), unique=True
    )
    site_id: Mapped[int] = mapped_column(ForeignKey("sites.id"))
    vantage_id: Mapped[int] = mapped_column(ForeignKey("vantage_points.id"))
    transport: Mapped[str] = mapped_column(String(16))
    measured_on: Mapped[dt.date] = mapped_column(Date)
    label: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    nearest: Mapped[str | None] = mapped_column(String(64), nullable=True)  # unknown: closest family
    confidence: Mapped[float] = mapped_column(Float)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON)
    classifier_version: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    vantage: Mapped[VantagePoint] = relationship(lazy="joined")


class CensusCount(Base):
    """The census, kept aggregated: verdicts per (day, vantage, transport, campaign, label).

    `record_verdict` adds one in the same transaction as the verdict, so it is always exactly the
    GROUP BY of `verdicts` (`Store.rebuild_census` recomputes it after a bulk load); the census
    query then reads a few hundred rows instead of every verdict. `campaign_id` 0 stands for
    measurements queued outside a campaign (a primary key column cannot be NULL)."""

    __tablename__ = "census_counts"

    measured_on: Mapped[dt.date] = mapped_column(Date, primary_key=True)
    vantage_id: Mapped[int] = mapped_column(ForeignKey("vantage_points.id"), primary_key=True)
    transport: Mapped[str] = mapped_column(String(16), primary_key=True)
    campaign_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    label: Mapped[str] = mapped_column(String(64), primary_key=True)
    n: Mapped[int] = mapped_column(Integer)


class CensusVersion(Base):
    """One row: bumped by every change to census_counts, in the same transaction, so a reader can
    tell in one cheap query whether a census answer it computed earlier is still current."""

    __tablename__ = "census_version"

    id: Mapped[int] = mapped_column(primary_key=True)  # always 1
    version: Mapped[int] = mapped_column(BigInteger)


class SiteState(Base):
    """Politeness state of one site, shared by every worker through the database."""

    __tablename__ = "site_state"

    site_id: Mapped[int] = mapped_column(ForeignKey("sites.id"), primary_key=True)
    lease_holder: Mapped[str | None] = mapped_column(String(128), nullable=True)
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    last_started_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)


class OptOut(Base):
    __tablename__ = "opt_outs"

    domain: Mapped[str] = mapped_column(String(253), primary_key=True)  # covers its subdomains too
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class CrawlCache(Base):
    """The crawler's pick for a site, reused until it expires."""

    __tablename__ = "crawl_cache"

    site_id: Mapped[int] = mapped_column(ForeignKey("sites.id"), primary_key=True)
    url: Mapped[str | None] = mapped_column(String(2048), nullable=True)  # None: nothing usable found
    size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)
    found_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[dt.datetime] = mapped_column()
