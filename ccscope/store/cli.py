"""`ccscope db | lists | vantage | optout | crawl | api`: the service's housekeeping commands.

`register(subparsers)` adds them to the main parser; handlers return exit codes and raise
CCScopeError (StoreError, TargetRefused) for the main loop to print. The store is the embedded
SQLite default unless --db or CCSCOPE_DB_URL names another.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

from ccscope.errors import CCScopeError
from ccscope.store.core import Store


def register(subparsers: Any) -> None:
    def with_db(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--db", help="SQLAlchemy URL (default: CCSCOPE_DB_URL or the embedded SQLite file)")
        p.add_argument("--traces", help="trace directory (default: CCSCOPE_TRACE_DIR or the data dir)")
        return p

    p = with_db(subparsers.add_parser("db", help="create or upgrade the store's schema"))
    p.add_argument("action", choices=["migrate"])
    p.set_defaults(func=cmd_db)

    p = with_db(subparsers.add_parser("lists", help="import a ranked site list (Tranco or Alexa CSV)"))
    p.add_argument("action", choices=["import"])
    p.add_argument("file")
    p.add_argument("--name", required=True, help="list name, e.g. tranco")
    p.add_argument("--date", type=dt.date.fromisoformat, help="list date (default: from the file name)")
    p.add_argument("--format", choices=["tranco", "alexa"], help="default: detected (header or not)")
    p.add_argument("--json", action="store_true", help="what was imported, as JSON")
    p.set_defaults(func=cmd_lists)

    p = with_db(subparsers.add_parser("vantage", help="add or list vantage points"))
    p.add_argument("action", choices=["add", "list"])
    p.add_argument("name", nargs="?")
    p.add_argument("--description", default="")
    p.add_argument("--json", action="store_true", help="the vantage points as JSON")
    p.set_defaults(func=cmd_vantage)

    p = with_db(subparsers.add_parser("optout", help="exclude a domain (and its subdomains) for good"))
    p.add_argument("action", choices=["add", "check"])
    p.add_argument("domain")
    p.add_argument("--reason", default="")
    p.set_defaults(func=cmd_optout)

    p = with_db(subparsers.add_parser("crawl", help="find the largest object worth downloading on a site"))
    p.add_argument("domain")
    p.add_argument("--lab", action="store_true", help="also allow the lab's own prefixes (lab mode)")
    p.add_argument(
        "--ttl", type=float, default=7 * 24 * 3600, help="cache lifetime, seconds (0: ask the site afresh)"
    )
    p.set_defaults(func=cmd_crawl)

    p = with_db(
        subparsers.add_parser("api", help="serve the REST API (unprivileged; token: CCSCOPE_API_TOKEN)")
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument(
        "--workers", type=int, help="uvicorn worker processes (default: CCSCOPE_API_WORKERS or one per CPU)"
    )
    p.set_defaults(func=cmd_api)


def _store(args: argparse.Namespace) -> Store:
    s = Store(args.db, args.traces)
    s.migrate()
    return s


def cmd_db(args: argparse.Namespace) -> int:
    from ccscope.store.blobs import S3Blobs

    s = _store(args)
    print(f"store schema is current ({s.dialect})")
    if isinstance(s.blobs, S3Blobs) and s.blobs.ensure_bucket():
        print(f"created bucket {s.blobs.bucket} for the traces")
    return 0


def cmd_lists(args: argparse.Namespace) -> int:
    from ccscope.crawler.lists import ListFormatError, date_from_name, read_list

    try:
        parsed = read_list(args.file, args.format)
    except (ListFormatError, OSError) as e:
        raise CCScopeError(f"{args.file}: {e}") from None
    day = args.date or date_from_name(args.file) or dt.date.today()
    sl = _store(args).import_list(args.name, day, parsed.entries, parsed.source_format)
    if args.json:
        doc = {
            "name": args.name,
            "date": day.isoformat(),
            "sites": sl.size,
            "format": parsed.source_format,
            "skipped": parsed.skipped,
            "problems": list(parsed.problems),
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(f"imported {sl.size} sites as {args.name} {day} ", end="")
    print(f"({parsed.source_format}; {parsed.skipped} lines skipped)")
    for p in parsed.problems:
        print(f"  {p}")
    return 0


def cmd_vantage(args: argparse.Namespace) -> int:
    s = _store(args)
    if args.action == "add":
        if not args.name:
            raise CCScopeError("vantage add needs a name")
        s.add_vantage(args.name, args.description)
    vs = s.vantages()
    if args.json:
        print(json.dumps([{"name": v.name, "description": v.description} for v in vs], indent=2))
        return 0
    for v in vs:
        print(f"{v.name}\t{v.description}")
    return 0


def cmd_optout(args: argparse.Namespace) -> int:
    s = _store(args)
    if args.action == "add":
        s.opt_out(args.domain, args.reason)
    out = s.is_opted_out(args.domain)
    print(f"{args.domain}: {'opted out' if out else 'not opted out'}")
    return 0


def cmd_crawl(args: argparse.Namespace) -> int:
    from ccscope.crawler.site import pick_object

    p = pick_object(_store(args), args.domain, lab=args.lab, ttl_seconds=args.ttl)
    out = {"domain": args.domain, "url": p.url, "size": p.size, "cached": p.cached}
    if not p.url:
        out["reason"] = p.reason
    print(json.dumps(out))
    return 0 if p.url else 4


def cmd_api(args: argparse.Namespace) -> int:
    from ccscope.api.server import serve

    serve(args.host, args.port, args.db, args.traces, args.workers)
    return 0
