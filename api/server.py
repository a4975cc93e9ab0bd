"""Run the API with uvicorn: `python -m ccscope.api.server` (or the `ccscope api` command)."""

from __future__ import annotations

import argparse
import logging
import os

import uvicorn

from ccscope.api.app import create_app
from ccscope.store import Store

log = logging.getLogger("ccscope.api")


def serve(
    host: str = "127.0.0.1", port: int = 8080, db_url: str | None = None, trace_dir: str | None = None
) -> None:
    if os.geteuid() == 0:
        # Nothing here needs privileges; a compromised API process should not have them.
        log.warning("the API is running as root; run it as an unprivileged user")
    store = Store(db_url, trace_dir)
    store.migrate()
    uvicorn.run(create_app(store), host=host, port=port, log_level="info", proxy_headers=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ccscope-api", description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--db", help="SQLAlchemy URL (default: CCSCOPE_DB_URL or the embedded SQLite file)")
    ap.add_argument("--traces", help="trace directory (default: CCSCOPE_TRACE_DIR or the data dir)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    serve(args.host, args.port, args.db, args.traces)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
