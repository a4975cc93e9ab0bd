"""Open-data downloads: the census as CSV and Parquet, a measurement's trace as Parquet.

The bytes are built by ccscope.export, the same functions `ccscope export` uses.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import Response, StreamingResponse

from ccscope.api.routers import stored_trace
from ccscope.api.schemas import ErrorOut
from ccscope.errors import TraceFormatError
from ccscope.export import MEDIA_TYPES, census_bytes, census_rows, iter_csv, trace_parquet
from ccscope.store.core import NotFound, Store
from ccscope.trace import Trace

Level = Literal["verdicts", "shares"]


def census_filters(
    campaign_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    date_from: dt.date | None = None,
    date_to: dt.date | None = None,
    vantage: Annotated[str | None, Query(max_length=64)] = None,
    transport: Literal["tcp", "quic"] | None = None,
) -> dict[str, Any]:
    """The query parameters every census download takes, as the export functions' keywords."""
    return {"campaign_id": campaign_id, "date_from": date_from, "date_to": date_to,
            "vantage": vantage, "transport": transport}  # fmt: skip


Filters = Annotated[dict[str, Any], Depends(census_filters)]


def _census_name(f: dict[str, Any], level: str, ext: str) -> str:
    cid = f["campaign_id"]
    return f"ccscope-census{f'-{cid}' if cid else ''}-{level}.{ext}"


def opendata_router(store: Store) -> APIRouter:
    r = APIRouter(tags=["open data"])

    @r.get("/v1/census.csv", response_class=Response, responses={200: {"content": {"text/csv": {}}}})
    def census_csv(f: Filters, level: Level = "verdicts") -> Response:
        """The census as CSV: one row per verdict (`level=verdicts`) or per census cell
        (`level=shares`), streamed; the same bytes as `ccscope export census`."""
        cols, rows = census_rows(store, level, **f)
        name = _census_name(f, level, "csv")
        return StreamingResponse(
            iter_csv(cols, rows),
            media_type=MEDIA_TYPES["csv"],
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    @r.get(
        "/v1/census.parquet",
        response_class=Response,
        responses={200: {"content": {"application/vnd.apache.parquet": {}}}},
    )
    def census_parquet(f: Filters, level: Level = "verdicts") -> Response:
        """The census as Parquet (typed columns), the same rows as /v1/census.csv."""
        data = census_bytes(store, "parquet", level, **f)
        name = _census_name(f, level, "parquet")
        return Response(
            data,
            media_type=MEDIA_TYPES["parquet"],
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    @r.get(
        "/v1/measurements/{measurement_id}/trace.parquet",
        response_class=Response,
        responses={
            200: {"content": {"application/vnd.apache.parquet": {}}},
            404: {"model": ErrorOut},
            503: {"model": ErrorOut},
        },
    )
    def trace_as_parquet(
        measurement_id: Annotated[int, Path(ge=1, le=2**31 - 1)],
        sha256: Annotated[str | None, Query(pattern=r"^[0-9a-f]{64}$")] = None,
    ) -> Response:
        """A trace of the measurement as Parquet (the first unless `sha256` names another):
        one row per sample, the trace's metadata in the file's key-value metadata."""
        t, raw = stored_trace(store, measurement_id, sha256, "application/json")
        try:
            data = trace_parquet(Trace.from_dict(json.loads(raw)))
        except (TraceFormatError, ValueError):
            # Stored as JSON but not a ccscope trace (nothing the service writes): no Parquet of it.
            raise NotFound(f"measurement {measurement_id} has no readable ccscope trace") from None
        return Response(
            data,
            media_type=MEDIA_TYPES["parquet"],
            headers={
                "Content-Disposition": f'attachment; filename="ccscope-{measurement_id}-{t.profile}.parquet"'
            },
        )

    return r
