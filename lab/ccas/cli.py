"""`ccscope lab ccas ...`: load, unload and list the BPF congestion-control zoo."""

from __future__ import annotations

import argparse
import json
import sys

from . import DEFAULT_SET, CCAError, available_ccas, kernel_available, load, loaded, unload, unload_all, zoo


def _parse_params(items: list[str]) -> dict[str, str]:
    out = {}
    for kv in items or []:
        k, sep, v = kv.partition("=")
        if not sep:
            raise SystemExit(f"--param wants key=value, got {kv!r}")
        out[k.strip()] = v.strip()
    return out


def _cmd_load(args: argparse.Namespace) -> int:
    names = args.names or list(DEFAULT_SET)
    if args.as_name and len(names) != 1:
        print("ccas load: --as needs exactly one NAME", file=sys.stderr)
        return 2
    params = _parse_params(args.param)
    try:
        got = load(names, params, as_name=args.as_name, replace=args.replace)
    except CCAError as e:
        print(f"ccas load: {e}", file=sys.stderr)
        return 1
    print(" ".join(got))
    return 0


def _cmd_unload(args: argparse.Namespace) -> int:
    try:
        if args.all:
            unload_all()
        else:
            unload(args.names)
    except CCAError as e:
        print(f"ccas unload: {e}", file=sys.stderr)
        return 1
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    try:
        rows = loaded()
        z = zoo() if args.zoo else None
    except CCAError as e:
        print(f"ccas list: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"loaded": rows, "zoo": z, "kernel_available": kernel_available()}, indent=1))
        return 0
    if z is not None:
        for c in z:
            print(c["name"])
            for p in c["params"]:
                scale = f"/{p['scale']}" if p["scale"] != 1 else ""
                print(f"    {p['name']:<24} {p['default']:>8}{scale:<6} {p['doc']}")
        return 0
    if not rows:
        print("no zoo CCAs loaded; built: " + " ".join(available_ccas()))
    for r in rows:
        state = "registered" if r["registered"] else "NOT REGISTERED"
        params = " ".join(f"{k}={v}" for k, v in r["params"].items())
        print(f"{r['name']:<16} {r['base']:<10} {state} {params}".rstrip())
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Adds `ccas load|unload|list` to a parser's subcommands."""
    p = subparsers.add_parser("ccas", help="BPF congestion-control zoo: load, unload, list")
    sub = p.add_subparsers(dest="ccas_cmd", required=True)

    q = sub.add_parser("load", help="register zoo CCAs (the default set if no NAME)")
    q.add_argument("names", nargs="*", metavar="NAME", help="cubic or cc_cubic, ...")
    q.add_argument("--as", dest="as_name", metavar="NEWNAME", help="register under another name (variants)")
    q.add_argument(
        "--param", "-p", action="append", metavar="KEY=VALUE", help="load-time parameter (repeatable)"
    )
    q.add_argument("--replace", action="store_true", help="reload if loaded with other params")
    q.set_defaults(func=_cmd_load)

    q = sub.add_parser("unload", help="unregister zoo CCAs")
    q.add_argument("names", nargs="*", metavar="NAME")
    q.add_argument("--all", action="store_true", help="everything ccscope loaded")
    q.set_defaults(func=_cmd_unload)

    q = sub.add_parser("list", help="what is loaded (or --zoo: what can be, with parameters)")
    q.add_argument("--zoo", action="store_true", help="list built CCAs and their parameters")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_cmd_list)
    return p


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ccscope-ccas")
    register(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(["ccas", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
