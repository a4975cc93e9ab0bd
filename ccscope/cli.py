"""The `ccscope` command line. Each subcommand imports its component lazily so that
`ccscope --help` stays fast and a missing optional part does not break the others."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from ccscope import __version__
from ccscope.errors import CCScopeError


def _cmd_shell(args: argparse.Namespace) -> int:
    from ccscope.capture.shell import link_argv
    from ccscope.profile import get_profile

    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    link_opts, sep, rest = _split_dashdash(cmd)
    if not sep:
        raise CCScopeError("usage: ccscope shell [--profile A|B] [LINK OPTIONS] -- COMMAND [ARGS]")
    opts = get_profile(args.profile).link_args() if args.profile else []
    argv = link_argv([*opts, *link_opts], rest)
    os.execv(argv[0], argv)
    return 0  # not reached


def _split_dashdash(items: list[str]) -> tuple[list[str], bool, list[str]]:
    if "--" in items:
        i = items.index("--")
        return items[:i], True, items[i + 1 :]
    return items, False, []


def _cmd_measure(args: argparse.Namespace) -> int:
    from ccscope.capture.measure import measure

    m = measure(
        args.url,
        profiles=args.profile or ["A", "B"],
        out_dir=Path(args.out) if args.out else None,
        lab=args.lab,
        timeout=args.timeout,
        max_bytes=args.max_bytes,
        transport=args.transport,
    )
    if args.json:
        print(json.dumps(m.to_dict(), indent=2, default=str))
    else:
        print(format_measurement(m.to_dict()))
    return 0 if m.ok else 4


def format_measurement(d: dict[str, Any]) -> str:
    from ccscope.capture.measure import bif_errors, format_pct

    lines = [f"{d['url']}  run {d['run_id']}  -> {d['out_dir']}"]
    hdr = f"{'profile':<8}{'ok':<5}{'bytes':>9}{'secs':>7}{'points':>8}{'maxBiF':>8}{'retx':>6}"
    hdr += f"{'RTTint':>8}{'RTTbase':>9}"
    gt = any(r.get("groundtruth") for r in d["runs"])
    if gt:
        hdr += f"{'cca':>14}{'err cap':>9}{'err snd':>9}{'strict':>8}"
    lines.append(hdr)
    for r in d["runs"]:
        row = (
            f"{r['profile']:<8}{'yes' if r['ok'] else 'NO':<5}{r['bytes']:>9}"
            f"{r['duration_s']:>7.1f}{r['points']:>8}{r['max_bif']:>8}{r['retransmits']:>6}"
            f"{_ms(r['internet_rtt_ms']):>8}{_ms(r['base_rtt_ms']):>9}"
        )
        g = r.get("groundtruth")
        if gt and g:
            cap, snd, strict = bif_errors(g)
            row += f"{g.get('cca') or '?':>14}{format_pct(cap):>9}{format_pct(snd):>9}{format_pct(strict):>8}"
        lines.append(row)
        if r.get("error"):
            lines.append(f"         error: {r['error']}")
    if gt and d.get("transport", "tcp") == "quic":
        lines.append(
            "err = mean |BiF estimated from the encrypted capture - BiF in the server's qlog| over "
            "time (1 ms grid), % of path BDP;\n      cap = as seen at the bottleneck, snd = shifted "
            "to the sender; strict = snd at every estimate event"
        )
    elif gt:
        lines.append(
            "err = mean |BiF measured - BiF from the server's TCP_INFO| beyond the truth's 1 ms "
            "resolution, % of path BDP;\n      cap = as seen at the bottleneck, snd = shifted to "
            "the sender; strict = snd against the last truth sample"
        )
    return "\n".join(lines)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _cmd_trace(args: argparse.Namespace) -> int:
    from ccscope.trace import Trace

    if args.trace_cmd == "show":
        for f in args.files:
            t = Trace.load(f)
            info = {
                "file": f,
                "flow": str(t.flow),
                "source": t.source,
                "points": len(t.t),
                "duration_s": round(t.duration, 3),
                "bytes_acked": t.bytes_acked,
                "max_bif": int(t.bif.max()) if len(t.bif) else 0,
                "base_rtt_ms": t.base_rtt_ms,
                "internet_rtt_ms": t.internet_rtt_ms,
                "partial": t.partial,
                "alignment": t.alignment,
                "profile": (t.profile or {}).get("name"),
                "events": {k: len(v) for k, v in t.events.items()},
            }
            print(json.dumps(info) if args.json else "\n".join(f"{k:>16}: {v}" for k, v in info.items()))
        return 0
    # import: pcap or Nebby-style CSV -> trace files
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for f in args.files:
        p = Path(f)
        if p.suffix.lower() in (".csv", ".tsv", ".txt"):
            from ccscope.capture.nebby_csv import traces_from_csv

            res = traces_from_csv(p, align=args.align)
        else:
            from ccscope.capture.tcp_bif import flows_from_pcap

            res = flows_from_pcap(p, align=args.align)
        for i, t in enumerate(res.traces[: args.flows]):
            dest = out / f"{p.stem}.{i}.trace.json"
            t.save(dest)
            written.append({"file": str(dest), "flow": str(t.flow), "points": len(t.t), "partial": t.partial})
    print(
        json.dumps(written, indent=2)
        if args.json
        else "\n".join(
            f"{w['file']}  {w['flow']}  {w['points']} points{'  (partial)' if w['partial'] else ''}"
            for w in written
        )
    )
    return 0 if written else 1


def _cmd_cleanup(args: argparse.Namespace) -> int:
    import subprocess

    from ccscope.capture.shell import link_binary

    return subprocess.call([str(link_binary()), "--cleanup"])


def _cmd_demo(args: argparse.Namespace) -> int:
    from ccscope.demo import run_demo

    return run_demo(
        serve=not args.no_serve,
        host=args.host,
        port=args.port,
        concurrency=args.concurrency,
        keep_lab=args.keep_lab,
        db_url=args.db,
        trace_dir=args.traces,
    )


def _cmd_census(args: argparse.Namespace) -> int:
    from ccscope.store.core import Store
    from ccscope.workers.census import VantageSpec, import_list_file, lab_truth, run_census

    store = Store(args.db, args.traces)
    store.migrate()
    list_name, size = import_list_file(store, args.list, args.name)
    vantages = [VantageSpec(v.strip()) for v in args.vantage.split(",") if v.strip()]
    if not args.json:
        print(
            f"census: top {min(args.top, size)} of {size} sites in {list_name} from "
            f"{', '.join(v.name for v in vantages)}; profiles {args.profiles} ...",
            file=sys.stderr,
            flush=True,
        )
    rep = run_census(
        store,
        list_name,
        args.top,
        vantages,
        profiles=tuple(p for p in args.profiles.split(",") if p),
        lab=args.lab,
        concurrency=args.concurrency,
        timeout=args.timeout,
        truth=lab_truth() if args.lab else None,
    )
    print(json.dumps(rep.to_dict(), indent=2, default=str) if args.json else rep.format())
    return 0 if rep.results and all(r.state == "classified" for r in rep.results) else 4


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="ccscope",
        description="Which congestion control does this web server run?",
    )
    ap.add_argument("--version", action="version", version=f"ccscope {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    from ccscope.transports import TRANSPORTS

    p = sub.add_parser(
        "shell",
        help="run a command behind an emulated link (delay, rate, drop-tail buffer, capture)",
        description="Run COMMAND in a fresh network namespace behind the ccscope-link emulator. "
        "Link options are passed to ccscope-link (see `ccscope-link --help`); --profile "
        "prepends a standard profile's options.",
    )
    p.add_argument("--profile", help="start from a standard profile (A: +50 ms, B: +100 ms)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="[LINK OPTIONS] -- COMMAND [ARGS]")
    p.set_defaults(func=_cmd_shell)

    p = sub.add_parser("measure", help="download URL through the standard profiles, write traces")
    p.add_argument("url")
    p.add_argument("--profile", action="append", help="profile to use (repeatable; default A and B)")
    p.add_argument("--out", help="output directory (default runs/<time>/<run id>)")
    p.add_argument(
        "--lab",
        action="store_true",
        help="lab mode: allow lab targets; compare with ground truth",
    )
    p.add_argument("--timeout", type=float, default=90.0, help="seconds per download (default 90)")
    p.add_argument("--max-bytes", type=int, default=16 * 1024 * 1024)
    p.add_argument(
        "--transport",
        default="tcp",
        choices=TRANSPORTS,
        help="tcp (default) or quic (HTTP/3; the profiles become their QUIC variants, e.g. A-quic)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.set_defaults(func=_cmd_measure)

    p = sub.add_parser("trace", help="inspect traces, import pcaps and Nebby-style CSVs")
    tsub = p.add_subparsers(dest="trace_cmd", required=True)
    q = tsub.add_parser("show", help="summarise trace files")
    q.add_argument("files", nargs="+")
    q.add_argument("--json", action="store_true")
    q = tsub.add_parser("import", help="pcap/pcapng or tshark CSV -> trace files")
    q.add_argument("files", nargs="+")
    q.add_argument("--out", default=".", help="directory for the trace files")
    q.add_argument("--align", choices=["capture", "sender"], default="capture")
    q.add_argument("--flows", type=int, default=1, help="how many flows per file, largest first")
    q.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_trace)

    from ccscope.lab.cli import register as register_lab

    register_lab(sub)

    from ccscope.classifier.cli import register as register_classifier

    register_classifier(sub)

    from ccscope.classifier.collect import register as register_collect

    register_collect(sub)

    from ccscope.classifier.quic_dataset import register as register_quic

    register_quic(sub)

    from ccscope.store.cli import register as register_store

    register_store(sub)

    from ccscope.workers.cli import register as register_workers

    register_workers(sub)

    p = sub.add_parser(
        "demo",
        help="the main job: a census of lab sites through the service, then the API serving it",
    )
    p.add_argument("--no-serve", action="store_true", help="print the census and exit")
    p.add_argument("--host", default="127.0.0.1", help="API address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="API port (default 8080)")
    p.add_argument("--concurrency", type=int, default=16, help="concurrent measurements per vantage")
    p.add_argument("--keep-lab", action="store_true", help="leave the lab running afterwards")
    p.add_argument("--db", help="SQLAlchemy URL (default: CCSCOPE_DB_URL or the embedded SQLite file)")
    p.add_argument("--traces", help="trace directory (default: CCSCOPE_TRACE_DIR or the data dir)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser(
        "census",
        help="measure and classify the top N sites of a list now (embedded workers), print shares",
        description="Import a Tranco-style (rank,domain) or Alexa-style CSV, create a one-off "
        "campaign over its top N sites and run it now in this process from the named vantage "
        "point(s), through the store (results stay there for the API).",
    )
    p.add_argument("--list", required=True, metavar="FILE", help="Tranco or Alexa-style CSV")
    p.add_argument("--top", type=int, required=True, metavar="N")
    p.add_argument("--name", help="list name in the store (default: the file's stem)")
    p.add_argument("--vantage", default="local", help="vantage point name(s), comma-separated")
    p.add_argument("--profiles", default="A,B", help="standard profiles to download through")
    p.add_argument("--concurrency", type=int, default=16, help="concurrent measurements per vantage")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per download")
    p.add_argument("--lab", action="store_true", help="the list names lab sites (lab mode)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--db", help="SQLAlchemy URL (default: CCSCOPE_DB_URL or the embedded SQLite file)")
    p.add_argument("--traces", help="trace directory (default: CCSCOPE_TRACE_DIR or the data dir)")
    p.set_defaults(func=_cmd_census)

    p = sub.add_parser("cleanup", help="remove state left by killed shells")
    p.set_defaults(func=_cmd_cleanup)
    return ap


def _terminate(signum: int, _frame: object) -> None:
    # SIGTERM (a service manager, `kill`) unwinds like Ctrl-C, so labs and shells are torn down.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(args.func(args) or 0)
    except CCScopeError as e:
        print(f"ccscope: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
