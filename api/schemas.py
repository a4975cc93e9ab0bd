"""The API's request and response bodies (they are the OpenAPI schema)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ccscope.errors import CCScopeError
from ccscope.profile import check_profile_choice
from ccscope.store.core import validate_cron
from ccscope.transports import TRANSPORTS

# The catalogued transports (ccscope/transports.py) as the schema's enum.
Transport = Literal[TRANSPORTS]  # type: ignore[valid-type]
_N_TRANSPORTS = len(TRANSPORTS)
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
_VANTAGE = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class Strict(BaseModel):
    # Unknown fields are an error, not silently ignored: a typo must not change what runs.
    model_config = ConfigDict(extra="forbid")


def _cron(v: str | None) -> str | None:
    # Refused here (a 422 naming the field and the reason), not when beat builds its schedule.
    try:
        return None if v is None else validate_cron(v)
    except CCScopeError as e:
        raise ValueError(str(e)) from None


def _profiles(v: list[str] | None) -> list[str] | None:
    try:
        return None if v is None else [check_profile_choice(p) for p in v]
    except CCScopeError as e:
        raise ValueError(str(e)) from None


class ErrorOut(BaseModel):
    error: str
    detail: Any = None


class VerdictOut(BaseModel):
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


class DomainOut(BaseModel):
    domain: str
    latest: list[VerdictOut] = Field(description="the newest verdict per (transport, vantage point)")
    history: list[VerdictOut] = Field(description="one page of all verdicts, newest first")
    total: int
    limit: int
    offset: int


class CensusRowOut(BaseModel):
    date: dt.date
    vantage: str
    transport: str
    label: str
    count: int
    total: int
    share: float


class CensusOut(BaseModel):
    rows: list[CensusRowOut]


class CampaignIn(Strict):
    name: str = Field(pattern=_NAME)
    list_name: str = Field(min_length=1, max_length=100, description="name of an imported site list")
    top_n: int = Field(ge=1, le=1_000_000)
    transports: list[Transport] = Field(min_length=1, max_length=_N_TRANSPORTS)
    profiles: list[str] = Field(default=["default"], min_length=1, max_length=20)
    vantages: list[str] = Field(min_length=1, max_length=100)
    schedule: str = Field(min_length=9, max_length=100, description="5-field cron, UTC")
    enabled: bool = True

    _check_schedule = field_validator("schedule")(_cron)
    _check_profiles = field_validator("profiles")(_profiles)


class CampaignPatch(Strict):
    top_n: int | None = Field(default=None, ge=1, le=1_000_000)
    transports: list[Transport] | None = Field(default=None, min_length=1, max_length=_N_TRANSPORTS)
    profiles: list[str] | None = Field(default=None, min_length=1, max_length=20)
    vantages: list[str] | None = Field(default=None, min_length=1, max_length=100)
    schedule: str | None = Field(default=None, min_length=9, max_length=100)
    enabled: bool | None = None

    _check_schedule = field_validator("schedule")(_cron)
    _check_profiles = field_validator("profiles")(_profiles)


class CampaignOut(BaseModel):
    id: int
    name: str
    list_name: str
    list_date: dt.date
    top_n: int
    transports: list[str]
    profiles: list[str]
    vantages: list[str]
    schedule: str
    enabled: bool
    created_at: dt.datetime
    updated_at: dt.datetime


class CampaignPage(BaseModel):
    items: list[CampaignOut]
    total: int
    limit: int
    offset: int


class MeasurementIn(Strict):
    target: str = Field(
        min_length=1, max_length=2048, description="a domain (example.com) or an http(s) URL on it"
    )
    vantage: str = Field(pattern=_VANTAGE)
    transport: Transport = "tcp"
    profile: str = Field(default="default", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}$")

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, v: str) -> str:
        try:
            return check_profile_choice(v)
        except CCScopeError as e:
            raise ValueError(str(e)) from None


class TraceOut(BaseModel):
    sha256: str
    size: int
    profile: str
    media_type: str
    href: str


class MeasurementOut(BaseModel):
    id: int
    state: str
    failure_reason: str | None
    domain: str
    url: str | None
    vantage: str
    transport: str
    profile: str
    campaign_id: int | None
    attempts: int
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    traces: list[TraceOut]
    verdict: VerdictOut | None
