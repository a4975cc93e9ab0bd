"""The ccscope REST API (FastAPI; OpenAPI at /openapi.json, docs at /docs).

Reads are public; writes need `Authorization: Bearer <CCSCOPE_API_TOKEN>`. The API only reads and
writes the store: it never measures, needs no privileges, and imports nothing from capture/.
Every error is a JSON body `{"error": code, "detail": ...}`; internal errors never show a trace.
"""

# No `from __future__ import annotations` here: FastAPI resolves the route signatures at runtime,
# and they refer to locals of create_app (the bearer scheme) that string annotations cannot reach.

import datetime as dt
import hmac
import logging
import uuid
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Path, Query, Request, Response
from fastapi.exceptions import HTTPException as FastAPIHTTPException
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ccscope import __version__
from ccscope.api.routers import stored_trace
from ccscope.api.schemas import (
    CampaignIn,
    CampaignOut,
    CampaignPage,
    CampaignPatch,
    CensusOut,
    CensusRowOut,
    DomainOut,
    ErrorOut,
    MeasurementIn,
    MeasurementOut,
    TraceOut,
    Transport,
    VerdictOut,
)
from ccscope.crawler.robots import RobotsAnswer, check_url
from ccscope.errors import CCScopeError, TargetRefused
from ccscope.settings import settings
from ccscope.store import Conflict, IllegalTransition, NotFound, OptedOut, Store, StoreError, normalize_domain
from ccscope.store.common import aware
from ccscope.store.models import Campaign, Measurement
from ccscope.store.queries import VerdictView
from ccscope.targets import TargetPolicy, lab_mode_enabled, parse_url

log = logging.getLogger("ccscope.api")
DOMAIN_PATTERN = (
    r"^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?$"
)
# Ids fit the database's INTEGER; a bigger number is a 422, not an overflow deep in the driver.
Id = Annotated[int, Path(ge=1, le=2**31 - 1)]
CENSUS_CACHE_SIZE = 1024  # census answers kept per process (see get_census)
MAX_BODY_BYTES = 64 * 1024  # the largest legitimate body (a campaign) is well under 1 KB
_ERRORS = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
           405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
           415: "unsupported_media_type", 422: "invalid_request", 503: "unavailable"}  # fmt: skip


def _err(
    status: int, detail: Any, code: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = {"error": code or _ERRORS.get(status, "error"), "detail": detail}
    return JSONResponse(body, status_code=status, headers=headers)


def _domain_error_handler(status: int, code: str | None) -> Any:
    async def handler(_r: Request, e: Exception) -> JSONResponse:
        return _err(status, str(e), code)

    return handler


class BodyLimit:
    """Refuse request bodies over `limit` bytes, declared or streamed (chunked), with a 413."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        too_big = _err(413, f"request bodies are limited to {self.limit} bytes")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await too_big(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            seen += len(msg.get("body", b""))
            if seen > self.limit:
                raise _TooBig()
            return msg

        started = False

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, limited, tracking_send)
        except _TooBig:
            if not started:
                await too_big(scope, receive, send)


class _TooBig(FastAPIHTTPException):
    # An HTTPException, so FastAPI's body reader re-raises it (as a 413) instead of turning it into
    # a generic 400 "error parsing the body".
    def __init__(self) -> None:
        super().__init__(413, f"request bodies are limited to {MAX_BODY_BYTES} bytes")


class RobotsDisallowed(CCScopeError):
    """The target's robots.txt says ccscope may not fetch it (or could not be read)."""


ROBOTS_TIMEOUT = 10.0  # seconds for a queued URL's robots.txt check


def create_app(
    store: Store | None = None,
    *,
    token: str | None = None,
    lab: bool | None = None,
    robots: Callable[[str], RobotsAnswer] | None = None,
    target_policy: TargetPolicy | None = None,
) -> FastAPI:
    """The app over `store` (default: Store() from the environment). `token` defaults to
    CCSCOPE_API_TOKEN; without one every write is refused. `lab` (or CCSCOPE_LAB=1) adds the
    lab's own prefixes to the public addresses a target may resolve to; `target_policy` says
    exactly which. `robots(url)` decides whether a queued URL may be fetched (default: its
    site's robots.txt, fetched through the vetting client under the same policy)."""
    st = store or Store()
    api_token = token if token is not None else settings().api_token
    lab_mode = lab_mode_enabled(bool(lab)) if lab is not False else False
    policy = target_policy or (TargetPolicy.for_lab() if lab_mode else TargetPolicy.public())
    robots_check = robots or (lambda url: check_url(url, policy=policy, timeout=ROBOTS_TIMEOUT))
    app = FastAPI(
        title="ccscope",
        version=__version__,
        description="Which congestion control algorithm do web servers run? Census results and "
        "measurement requests. Writes need a bearer token.",
        responses={422: {"model": ErrorOut}},
    )
    app.add_middleware(BodyLimit)
    app.state.store = st
    census_cache: dict[tuple[Any, ...], tuple[int, str]] = {}
    bearer = HTTPBearer(auto_error=False)

    def require_token(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        if not api_token:
            raise HTTPException(403, "writes are disabled: the server has no API token configured")
        if creds is None or not hmac.compare_digest(creds.credentials.encode(), api_token.encode()):
            raise HTTPException(
                401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
            )

    # ---- error handling: JSON, specific, never a traceback ------------------------------------

    @app.exception_handler(HTTPException)
    async def http_error(_r: Request, e: HTTPException) -> JSONResponse:
        return _err(e.status_code, e.detail, headers=getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(_r: Request, e: RequestValidationError) -> JSONResponse:
        # Location and message only: echoing the input back could reflect megabytes or secrets.
        detail = [
            {"loc": list(x.get("loc", ())), "msg": str(x.get("msg", ""))[:300]} for x in e.errors()[:20]
        ]
        return _err(422, detail)

    # Domain errors -> (status, error code; None: the status's generic code).
    for exc, status, code in (
        (NotFound, 404, None),
        (Conflict, 409, None),
        (OptedOut, 409, "opted_out"),
        (RobotsDisallowed, 422, "robots_disallowed"),
        (IllegalTransition, 409, "illegal_transition"),
        (StoreError, 422, None),
        (TargetRefused, 422, "target_refused"),
    ):
        app.add_exception_handler(exc, _domain_error_handler(status, code))

    @app.exception_handler(Exception)
    async def internal(_r: Request, e: Exception) -> JSONResponse:
        log.exception("internal error")
        return _err(500, "internal error", "internal")

    # ---- reads --------------------------------------------------------------------------------

    @app.get("/v1/domains/{domain}", response_model=DomainOut, responses={404: {"model": ErrorOut}})
    def get_domain(
        domain: Annotated[str, Path(max_length=253, pattern=DOMAIN_PATTERN, examples=["example.com"])],
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    ) -> Response:
        """The latest verdict per transport and vantage point, plus the history (paginated)."""
        d = normalize_domain(domain)
        latest, history, total = st.domain_report(d, limit=limit, offset=offset)
        out = DomainOut(
            domain=d,
            latest=[_verdict(v) for v in latest],
            history=[_verdict(v) for v in history],
            total=total,
            limit=limit,
            offset=offset,
        )
        # Validated once, above, and serialised once here (FastAPI would validate the model
        # again against response_model before serialising it: twice the work on the hot path).
        return _json(out)

    @app.get("/v1/census", response_model=CensusOut)
    def get_census(
        date_from: dt.date | None = None,
        date_to: dt.date | None = None,
        vantage: Annotated[str | None, Query(max_length=64)] = None,
        transport: Transport | None = None,
        campaign_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    ) -> Response:
        """Label counts and shares per date, vantage point and transport."""
        # Answers are cached per filter under the census version read *before* computing them,
        # so a cached answer is served only while no verdict has been recorded since.
        key = (date_from, date_to, vantage, transport, campaign_id)
        version = st.census_version()
        hit = census_cache.get(key)
        if hit is not None and hit[0] == version:
            return Response(hit[1], media_type="application/json")
        rows = st.census(date_from, date_to, vantage, transport, campaign_id)
        body = CensusOut(
            rows=[
                CensusRowOut(
                    date=r.date,
                    vantage=r.vantage,
                    transport=r.transport,
                    label=r.label,
                    count=r.count,
                    total=r.total,
                    share=round(r.share, 6),
                )
                for r in rows
            ]
        ).model_dump_json()
        if len(census_cache) >= CENSUS_CACHE_SIZE:
            census_cache.clear()  # filters are few in practice; a flood of odd ones just resets
        census_cache[key] = (version, body)
        return Response(body, media_type="application/json")

    @app.get("/v1/campaigns", response_model=CampaignPage)
    def list_campaigns(
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    ) -> CampaignPage:
        items, total = st.list_campaigns(limit, offset)
        return CampaignPage(items=[_campaign(c) for c in items], total=total, limit=limit, offset=offset)

    @app.get("/v1/campaigns/{campaign_id}", response_model=CampaignOut, responses={404: {"model": ErrorOut}})
    def get_campaign(campaign_id: Id) -> CampaignOut:
        return _campaign(st.get_campaign(campaign_id))

    @app.get(
        "/v1/measurements/{measurement_id}",
        response_model=MeasurementOut,
        responses={404: {"model": ErrorOut}},
    )
    def get_measurement(measurement_id: Id) -> MeasurementOut:
        return _measurement(st, st.get_measurement(measurement_id))

    @app.get(
        "/v1/measurements/{measurement_id}/trace",
        response_class=Response,
        responses={
            200: {"content": {"application/json": {}, "application/octet-stream": {}}},
            404: {"model": ErrorOut},
            503: {"model": ErrorOut},
        },
    )
    def get_trace(
        measurement_id: Id, sha256: Annotated[str | None, Query(pattern=r"^[0-9a-f]{64}$")] = None
    ) -> Response:
        """Download a trace of the measurement (the first one unless `sha256` names another)."""
        t, data = stored_trace(st, measurement_id, sha256)
        return Response(
            data,
            media_type=t.media_type,
            headers={
                "ETag": f'"{t.sha256}"',
                "Content-Disposition": f'attachment; filename="ccscope-{measurement_id}-{t.sha256[:12]}"',
            },
        )

    # ---- operations, open data and the dashboard (their own modules) -------------------------

    _include_routers(app, st)

    # ---- writes -------------------------------------------------------------------------------

    auth = [Depends(require_token)]
    write_errors: dict[int | str, dict[str, Any]] = {
        401: {"model": ErrorOut},
        403: {"model": ErrorOut},
        404: {"model": ErrorOut},
        409: {"model": ErrorOut},
        413: {"model": ErrorOut},
    }

    @app.post(
        "/v1/campaigns",
        response_model=CampaignOut,
        status_code=201,
        dependencies=auth,
        responses=write_errors,
    )
    def create_campaign(body: CampaignIn) -> CampaignOut:
        c = st.create_campaign(
            body.name,
            body.list_name,
            body.top_n,
            body.transports,
            body.profiles,
            body.vantages,
            body.schedule,
            body.enabled,
        )
        return _campaign(c)

    @app.patch(
        "/v1/campaigns/{campaign_id}", response_model=CampaignOut, dependencies=auth, responses=write_errors
    )
    def patch_campaign(campaign_id: Id, body: CampaignPatch) -> CampaignOut:
        changes = body.model_dump(exclude_none=True)
        return _campaign(st.update_campaign(campaign_id, **changes))

    @app.post(
        "/v1/measurements",
        response_model=MeasurementOut,
        status_code=202,
        dependencies=auth,
        responses=write_errors,
    )
    def post_measurement(
        body: MeasurementIn,
        response: Response,
        idempotency_key: Annotated[str | None, Header(max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")] = None,
    ) -> MeasurementOut:
        """Queue a measurement of one site now. The target must resolve to public addresses only
        (lab mode excepted); an opted-out site is refused (409 `opted_out`) without being
        contacted; and the site's robots.txt must allow ccscope to fetch the URL (for a bare
        domain, its home page, where the crawler starts), else 422 `robots_disallowed` (an
        unreachable robots.txt, or a 5xx, counts as disallowing everything, per RFC 9309).
        A bare domain leaves the object to the crawler, as in campaigns. With an
        `Idempotency-Key` header a retried request returns the measurement it queued the first
        time (200) instead of queueing another."""
        given = "://" in body.target
        url = body.target if given else f"https://{body.target}/"
        _scheme, host, _port, _path = parse_url(url)
        domain = normalize_domain(host)
        policy.resolve(url)
        if st.is_opted_out(domain):
            raise OptedOut(f"{domain} has opted out of measurement")
        answer = robots_check(url)
        if not answer.allowed:
            raise RobotsDisallowed(f"robots.txt: {answer.reason}")
        slot = f"req:{idempotency_key}" if idempotency_key else f"now:{uuid.uuid4()}"
        m, created = st.enqueue_measurement(
            domain, body.vantage, body.transport, slot, profile=body.profile, url=url if given else None
        )
        if not created:
            response.status_code = 200
        return _measurement(st, m)

    return app


def _include_routers(app: FastAPI, st: Store) -> None:
    from ccscope.api.routers import ops
    from ccscope.api.routers.opendata import opendata_router
    from ccscope.dashboard.router import dashboard_router

    ops.install(app, st, settings().broker_url)
    app.include_router(opendata_router(st))
    app.include_router(dashboard_router(st))


def _json(model: BaseModel) -> Response:
    return Response(model.model_dump_json(), media_type="application/json")


def _verdict(v: VerdictView) -> VerdictOut:
    return VerdictOut(
        measurement_id=v.measurement_id,
        vantage=v.vantage,
        transport=v.transport,
        label=v.label,
        kind=v.kind,
        confidence=v.confidence,
        classifier_version=v.classifier_version,
        measured_on=v.measured_on,
        created_at=v.created_at,
        evidence=v.evidence,
    )


def _campaign(c: Campaign) -> CampaignOut:
    return CampaignOut(
        id=c.id,
        name=c.name,
        list_name=c.site_list.name,
        list_date=c.site_list.list_date,
        top_n=c.top_n,
        transports=c.transports,
        profiles=c.profiles,
        vantages=[v.name for v in c.vantages],
        schedule=c.schedule,
        enabled=c.enabled,
        created_at=aware(c.created_at) or c.created_at,
        updated_at=aware(c.updated_at) or c.updated_at,
    )


def _measurement(st: Store, m: Measurement) -> MeasurementOut:
    v = st.get_verdict(m.id)
    return MeasurementOut(
        id=m.id,
        state=m.state,
        failure_reason=m.failure_reason,
        domain=m.site.domain,
        url=m.url,
        vantage=m.vantage.name,
        transport=m.transport,
        profile=m.profile,
        campaign_id=m.campaign_id,
        attempts=m.attempts,
        created_at=aware(m.created_at) or m.created_at,
        started_at=aware(m.started_at),
        finished_at=aware(m.finished_at),
        traces=[
            TraceOut(
                sha256=t.sha256,
                size=t.size,
                profile=t.profile,
                media_type=t.media_type,
                href=f"/v1/measurements/{m.id}/trace?sha256={t.sha256}",
            )
            for t in m.traces
        ],
        verdict=_verdict(VerdictView.of(v)) if v is not None else None,
    )
