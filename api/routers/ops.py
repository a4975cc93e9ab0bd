"""`/health` and `/metrics` (Prometheus text format), and the middleware that feeds the metrics.

`/health` answers 200 when the store answers a query and, when a broker is configured
(CCSCOPE_BROKER_URL), the broker answers a PING; else 503 with what failed. `/metrics` has the
requests by route and status, their latency histogram, measurements by state, verdicts by label
and the queue depth (queued measurements in the store; per vantage queue on the broker too).
Each process keeps its own request counters (one registry per app).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ccscope.store.core import Store

LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BROKER_TIMEOUT = 1.0  # seconds: a health check must answer even when the broker does not


def _route_of(scope: Scope) -> str:
    """The route's template (/v1/domains/{domain}), not the raw path: bounded label values.
    The router writes the matched route into the scope it was handed."""
    return getattr(scope.get("route"), "path", None) or "unmatched"


class RequestMetrics:
    """Count requests and time them (plain ASGI: no per-request task or body buffering)."""

    def __init__(self, app: ASGIApp, *, requests: Counter, latency: Histogram) -> None:
        self.app, self.requests, self.latency = app, requests, latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500

        async def record_status(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = int(msg["status"])
            await send(msg)

        try:
            await self.app(scope, receive, record_status)
        finally:
            route = _route_of(scope)
            self.requests.labels(scope.get("method", "?"), route, str(status)).inc()
            self.latency.labels(route).observe(time.perf_counter() - t0)


class StoreCollector:
    """Gauges read from the store at scrape time (cheap: grouped counts, the census table)."""

    def __init__(self, store: Store, broker_url: str | None) -> None:
        self.store, self.broker_url = store, broker_url

    def collect(self) -> Any:
        states = GaugeMetricFamily("ccscope_measurements", "Measurements by state", labels=["state"])
        counts = self.store.measurement_states()
        for s in ("queued", "running", "captured", "classified", "failed"):
            states.add_metric([s], counts.get(s, 0))
        yield states
        labels = GaugeMetricFamily("ccscope_verdicts", "Verdicts by label", labels=["label"])
        for lab, n in sorted(self.store.verdict_labels().items()):
            labels.add_metric([lab], n)
        yield labels
        depth = GaugeMetricFamily("ccscope_queue_depth", "Measurements waiting", labels=["queue"])
        depth.add_metric(["store"], counts.get("queued", 0))
        for name, n in _broker_queues(self.broker_url, [v.name for v in self.store.vantages()]).items():
            depth.add_metric([name], n)
        yield depth


def _broker_queues(url: str | None, vantages: list[str]) -> dict[str, int]:
    if not url or not url.startswith(("redis://", "rediss://")):
        return {}
    import redis

    from ccscope.workers.celery_app import queue_name

    try:
        r = redis.Redis.from_url(url, socket_timeout=BROKER_TIMEOUT, socket_connect_timeout=BROKER_TIMEOUT)
        return {queue_name(v): int(r.llen(queue_name(v))) for v in vantages}
    except Exception:  # the broker being down shows on /health; metrics still answer
        return {}


def broker_ping(url: str | None) -> tuple[bool, str]:
    if not url:
        return True, "none configured (embedded workers)"
    if not url.startswith(("redis://", "rediss://")):
        return True, "not checked (not a Redis URL)"
    import redis

    try:
        r = redis.Redis.from_url(url, socket_timeout=BROKER_TIMEOUT, socket_connect_timeout=BROKER_TIMEOUT)
        r.ping()
    except Exception as e:
        return False, f"unreachable: {type(e).__name__}"
    return True, "ok"


def install(app: FastAPI, store: Store, broker_url: str | None) -> None:
    """Add the request metrics middleware and the /health and /metrics routes to `app`."""
    registry = CollectorRegistry()
    requests = Counter(
        "ccscope_http_requests", "HTTP requests", ["method", "route", "status"], registry=registry
    )
    latency = Histogram(
        "ccscope_http_request_seconds",
        "HTTP request latency (server time)",
        ["route"],
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    registry.register(StoreCollector(store, broker_url))

    app.add_middleware(RequestMetrics, requests=requests, latency=latency)

    r = APIRouter(tags=["operations"])

    @r.get("/health", responses={503: {"description": "the store or the broker does not answer"}})
    def health() -> JSONResponse:
        """200 when the store (and the broker, if one is configured) answer; else 503."""
        try:
            store.ping()
            db = (True, "ok")
        except Exception as e:
            db = (False, f"unreachable: {type(e).__name__}")
        broker = broker_ping(broker_url)
        ok = db[0] and broker[0]
        body = {"status": "ok" if ok else "unavailable", "store": db[1], "broker": broker[1]}
        return JSONResponse(body, status_code=200 if ok else 503)

    @r.get("/metrics", response_class=Response)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(r)
