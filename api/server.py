"""Run the API with uvicorn: `python -m ccscope.api.server` (or the `ccscope api` command).

`--workers N` (default: CCSCOPE_API_WORKERS, else one per CPU) runs N uvicorn worker processes
on one socket; each opens its own store from CCSCOPE_DB_URL / CCSCOPE_TRACE_DIR, which `serve`
sets from its arguments. The schema is migrated once, by the parent, before any worker starts.
"""

from __future__ import annotations

import argparse
import logging
import os
import pwd
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from ccscope.api.app import create_app
from ccscope.errors import CCScopeError
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


def _api_user(name: str | None) -> pwd.struct_passwd:
    names = [name] if name else ["ccscope", "nobody"]
    for n in names:
        try:
            pw = pwd.getpwuid(int(n)) if n.isdigit() else pwd.getpwnam(n)
        except (KeyError, ValueError):
            continue
        if pw.pw_uid == 0:
            raise CCScopeError(f"--user {n} is root; the API does not run as root")
        return pw
    raise CCScopeError(
        f"no user {name or 'ccscope (or nobody)'} to run the API as (deploy/install.sh creates ccscope)"
    )


def _local_paths(store: Store) -> list[Path]:
    """Files and directories of the store the API must be able to write (SQLite, trace dir)."""
    out = []
    url = store.url
    if url.startswith("sqlite") and ":memory:" not in url:
        db = Path(url.split(":///", 1)[1]) if ":///" in url else None
        if db is not None:
            out.append(db.parent)
    loc = store.blobs_location
    if "://" not in loc:
        out.append(Path(loc))
    return out


def drop_root(user: str | None, store: Store) -> pwd.struct_passwd:
    """Started as root: become an unprivileged user (default `ccscope`) before serving anything.
    Nothing the API does needs privileges, and a compromised API process must not have them.
    The store's local files must be reachable by that user: checked first, from a child that
    has already dropped, so the answer counts ACLs and every directory on the way."""
    pw = _api_user(user)
    paths = _local_paths(store)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        try:
            os.setgroups([])
            os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
            os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
            bad = [i for i, p in enumerate(paths) if not os.access(p, os.R_OK | os.W_OK | os.X_OK)]
            os._exit(100 + bad[0] if bad else 0)
        except BaseException:
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code >= 100:
        raise CCScopeError(
            f"refusing to serve as root, and user {pw.pw_name} (the API drops to it) cannot write "
            f"{paths[code - 100]}: give it that directory (chown -R {pw.pw_name}), pass --user OWNER, "
            "or start the API as an unprivileged user"
        )
    if code != 0:
        raise CCScopeError(f"cannot drop privileges to user {pw.pw_name}")
    os.setgroups([])
    os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
    os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise CCScopeError("still root after dropping privileges")
    os.environ["HOME"] = pw.pw_dir
    log.info("started as root: serving as user %s (uid %d)", pw.pw_name, pw.pw_uid)
    return pw


def serve(
    host: str = "127.0.0.1",
    port: int = 8080,
    db_url: str | None = None,
    trace_dir: str | None = None,
    workers: int | None = None,
    user: str | None = None,
) -> None:
    n = workers or default_workers()
    if os.geteuid() == 0:
        probe = Store(db_url, trace_dir)  # only to learn where its files are: nothing opened
        drop_root(user, probe)
        db_url, trace_dir = probe.url, probe.blobs_location
        probe.close()
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
    ap.add_argument("--user", help="started as root, serve as this user (default: ccscope, else nobody)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    try:
        serve(args.host, args.port, args.db, args.traces, args.workers, args.user)
    except CCScopeError as e:
        print(f"ccscope api: {e}", flush=True)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
