"""Run the API with uvicorn: `python -m ccscope.api.server` (or the `ccscope api` command).

`--workers N` (default: CCSCOPE_API_WORKERS, else one per CPU) runs N uvicorn worker processes
on one socket; each opens its own store from CCSCOPE_DB_URL / CCSCOPE_TRACE_DIR, which `serve`
sets from its arguments. The schema is migrated once, by the parent, before any worker starts.
"""

from __future__ import annotations

import argparse
import logging
import os

import uvicorn
from fastapi import FastAPI

from ccscope.api.app import create_app
from ccscope.settings import settings
from ccscope.store import Store

log = logging.getLogger("ccscope.api")


def default_workers() -> int:
    n = settings().api_workers
    if n:
        return n
    return max(1, len(os.sched_getaffinity(0)))


def app_from_env() -> FastAPI:
    """The app factory each worker process calls (uvicorn --factory)."""
    return create_app(Store(pre_ping=False))


def serve(
    host: str = "127.0.0.1",
    port: int = 8080,
    db_url: str | None = None,
    trace_dir: str | None = None,
    workers: int | None = None,
) -> None:
    if os.geteuid() == 0:
        # Nothing here needs privileges; a compromised API process should not have them.
        log.warning("the API is running as root; run it as an unprivileged user")
    n = workers or default_workers()
    store = Store(db_url, trace_dir)
    store.migrate()
    common = {"host": host, "port": port, "log_level": "info", "proxy_headers": False, "access_log": False}
    if n == 1:
        store.close()
        uvicorn.run(create_app(Store(db_url, trace_dir, pre_ping=False)), **common)  # type: ignore[arg-type]
        return
    # Worker processes start from an import string and read the store's location from the
    # environment; pass on the resolved one so --db and --traces reach them.
    store.close()
    os.environ["CCSCOPE_DB_URL"] = store.url
    os.environ["CCSCOPE_TRACE_DIR"] = store.blobs_location
    # A worker must answer the supervisor's health check within timeout_worker_healthcheck or it
    # is killed and restarted; importing the app takes seconds on a busy machine, so the default
    # 5 s restarts workers forever there.
    uvicorn.run(
        "ccscope.api.server:app_from_env",
        factory=True,
        workers=n,
        timeout_worker_healthcheck=60,
        **common,  # type: ignore[arg-type]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ccscope-api", description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--db", help="SQLAlchemy URL (default: CCSCOPE_DB_URL or the embedded SQLite file)")
    ap.add_argument("--traces", help="trace directory (default: CCSCOPE_TRACE_DIR or the data dir)")
    ap.add_argument(
        "--workers", type=int, help="uvicorn worker processes (default: CCSCOPE_API_WORKERS or one per CPU)"
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    serve(args.host, args.port, args.db, args.traces, args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
