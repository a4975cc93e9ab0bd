"""`ccscope worker` and `ccscope campaign run`: run measurements, via Celery or embedded.

`register(subparsers)` adds them to the main parser. Without --embedded, `worker` is a Celery
worker consuming `measure.<vantage>` and `campaign run` dispatches to the vantage queues; with
--embedded everything runs in this process against the store (the embedded default needs no
broker).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any

from ccscope.store.core import Store


def register(subparsers: Any) -> None:
    def common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--db", help="SQLAlchemy URL (default: CCSCOPE_DB_URL or the embedded SQLite file)")
        p.add_argument("--traces", help="trace directory (default: CCSCOPE_TRACE_DIR or the data dir)")
        p.add_argument("--embedded", action="store_true", help="run in this process, no broker")
        p.add_argument("--lab", action="store_true", help="measure lab targets (lab mode)")
        p.add_argument("--profiles", default="A,B", help="profiles of a 'default' measurement")
        return p

    p = common(subparsers.add_parser("worker", help="run measurements for one vantage point"))
    p.add_argument("--vantage", required=True)
    p.add_argument("--concurrency", type=int, default=4, help="concurrent measurements")
    p.add_argument(
        "--access",
        metavar="LINK_OPTIONS",
        help="emulate this vantage point's access path around every download, as ccscope-link "
        "options (lab vantage points), e.g. '--delay 60 --jitter 1'",
    )
    p.add_argument(
        "--control",
        action="store_true",
        help="also consume the control queue (campaign planning sent by beat or `campaign run`)",
    )
    p.add_argument(
        "--netns",
        action="store_true",
        help="run the worker in its own network namespace (a separate host's view); with --access "
        "that namespace's link is the access path. The store, broker and S3 endpoint must then be "
        "at addresses the namespace can route to, not loopback",
    )
    p.set_defaults(func=cmd_worker)

    p = subparsers.add_parser("campaign", help="run a campaign now")
    sub = p.add_subparsers(dest="action", required=True)
    r = common(sub.add_parser("run", help="queue the campaign's current slot and run it"))
    r.add_argument("id", type=int)
    r.add_argument("--slot", help="slot name (default: the campaign's latest cron tick)")
    r.add_argument("--concurrency", type=int, default=4)
    r.set_defaults(func=cmd_campaign_run)


def _env(args: argparse.Namespace) -> None:
    # Celery workers and their tasks read the store and knobs from the environment.
    if args.db:
        os.environ["CCSCOPE_DB_URL"] = args.db
    if args.traces:
        os.environ["CCSCOPE_TRACE_DIR"] = args.traces
    if args.lab:
        os.environ["CCSCOPE_LAB"] = "1"
    os.environ["CCSCOPE_WORKER_PROFILES"] = args.profiles
    if getattr(args, "access", None):
        os.environ["CCSCOPE_WORKER_ACCESS"] = args.access


def _store(args: argparse.Namespace) -> Store:
    s = Store(args.db, args.traces)
    s.migrate()
    return s


def _embedded(args: argparse.Namespace, store: Store, vantages: list[str]) -> Any:
    from ccscope.workers.embedded import EmbeddedWorkers
    from ccscope.workers.tasks import WorkerConfig

    cfgs = [WorkerConfig.from_env(v) for v in vantages]
    return EmbeddedWorkers(store, cfgs, concurrency=args.concurrency)


def _inner_worker_argv(args: argparse.Namespace) -> list[str]:
    """The same worker, minus --netns and --access (the namespace is the access path)."""
    argv = [sys.executable, "-c", "from ccscope.cli import main; raise SystemExit(main())", "worker"]
    argv += ["--vantage", args.vantage, "--concurrency", str(args.concurrency), "--profiles", args.profiles]
    for flag, value in (("--db", args.db), ("--traces", args.traces)):
        if value:
            argv += [flag, value]
    argv += [
        f for f, on in (("--embedded", args.embedded), ("--lab", args.lab), ("--control", args.control)) if on
    ]
    return argv


def cmd_worker(args: argparse.Namespace) -> int:
    from ccscope.workers import vantage

    if args.netns and not vantage.inside():
        _env(args)
        os.environ.pop("CCSCOPE_WORKER_ACCESS", None)
        problems = [] if args.embedded else vantage.check_reachable_services()
        if problems:
            print(
                f"ccscope worker: vantage point {args.vantage!r} in its own namespace cannot reach: "
                + "; ".join(problems),
                file=sys.stderr,
            )
            return 1
        access = shlex.split(args.access) if args.access else []
        return vantage.run_in_vantage_netns(args.vantage, access, _inner_worker_argv(args))
    _env(args)
    if args.embedded:
        store = _store(args)
        store.add_vantage(args.vantage)
        with _embedded(args, store, [args.vantage]) as w:
            try:
                w.serve(args.vantage)
            except KeyboardInterrupt:
                w.close(wait=False)
        return 0
    from ccscope.workers.celery_app import CONTROL_QUEUE, queue_name
    from ccscope.workers.supervise import supervise

    queues = [queue_name(args.vantage), *([CONTROL_QUEUE] if args.control else [])]
    argv = [sys.executable, "-m", "celery", "-A", "ccscope.workers.celery_app", "worker"]
    argv += ["-Q", ",".join(queues), "-n", f"{args.vantage}@%h", "--concurrency", str(args.concurrency)]
    # Measurements wait on subprocesses: threads are enough and cheap. Workers share nothing but
    # the broker and the store: no gossip, mingle or event heartbeats (they slow every start).
    argv += ["--pool", "threads", "--loglevel", "INFO", "--without-gossip", "--without-mingle"]
    argv += ["--without-heartbeat"]
    return supervise(argv, f"the Celery worker of vantage point {args.vantage!r}")


def cmd_campaign_run(args: argparse.Namespace) -> int:
    _env(args)
    store = _store(args)
    if args.embedded:
        c = store.get_campaign(args.id)
        with _embedded(args, store, [v.name for v in c.vantages]) as w:
            outs = w.run_campaign(args.id, args.slot)
        counts: dict[str, int] = {}
        for o in outs:
            counts[o.state] = counts.get(o.state, 0) + 1
        from ccscope.workers.tasks import shortfall

        short = shortfall(c.top_n, len(store.top_sites(c.site_list.id, c.top_n)), c.site_list.name)
        doc = {"campaign_id": args.id, "measurements": len(outs), "states": counts}
        print(json.dumps(doc | ({"warning": short} if short else {})))
        return 0 if outs and all(o.state in ("classified", "failed") for o in outs) else 1
    from ccscope.workers.celery_app import plan_campaign_task

    print(json.dumps(plan_campaign_task.delay(args.id, args.slot).get(timeout=120)))
    return 0
