"""The `ccscope` command line. Each subcommand imports its component lazily so that
`ccscope --help` stays fast and a missing optional part does not break the others."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ccscope import __version__
from ccscope.errors import (
    EXIT_FAILED,
    EXIT_INSUFFICIENT,
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    EXIT_SETUP,
    EXIT_UNKNOWN,
    CCScopeError,
    exit_codes_help,
)

# Exit codes each command can return beyond 0, 1 and 2 (listed in its --help).
EXIT_CODES: dict[str, tuple[int, ...]] = {
    "shell": (EXIT_SETUP,),
    "measure": (EXIT_REFUSED, EXIT_FAILED, EXIT_SETUP),
    "check": (EXIT_REFUSED, EXIT_FAILED, EXIT_UNKNOWN, EXIT_INSUFFICIENT, EXIT_SETUP),
    "census": (EXIT_FAILED, EXIT_SETUP),
    "demo": (EXIT_SETUP,),
    "crawl": (EXIT_REFUSED, EXIT_FAILED),
    "worker": (EXIT_SETUP,),
    "lab": (EXIT_SETUP,),
}


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
    from ccscope.progress import Steps, ticking

    profiles = args.profile or ["A", "B"]
    steps = Steps(len(profiles), lines=False)  # on a terminal only: stdout carries the result

    def around(name: str, i: int, n: int) -> Any:
        steps.step(f"downloading through profile {name} ...")
        return ticking(f"profile {name}")

    # Concurrent profiles share one progress line: per-profile steps would interleave.
    concurrent = args.concurrent or args.adaptive
    whole = ticking(f"profiles {'+'.join(profiles)} at once") if concurrent else nullcontext()
    with whole:
        m = measure(
            args.url,
            profiles=profiles,
            out_dir=Path(args.out) if args.out else None,
            lab=args.lab,
            timeout=args.timeout,
            max_bytes=args.max_bytes,
            on_profile=None if concurrent else around,
            concurrent=concurrent,
            transport=args.transport,
            stopping=_stopping_rule() if args.adaptive else None,
        )
    if args.json:
        print(json.dumps(m.to_dict(), indent=2, default=str))
    else:
        print(format_measurement(m.to_dict()))
    return 0 if m.ok else 4


def _stopping_rule() -> Any:
    from ccscope.classifier.stopping import StoppingRule

    return StoppingRule()


def format_measurement(d: dict[str, Any]) -> str:
    from ccscope.capture.measure import bif_errors, format_pct, timing_warning

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
        if warn := timing_warning(r["profile"], r.get("timing")):
            lines.append(f"         {warn}")
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
    st = d.get("stopping")
    if st:
        if st.get("settled"):
            lines.append(
                f"adaptive stopping: stopped at {st['stopped_at_s']:.1f} s of trace, the verdict "
                f"({st['verdict']}) settled over {st['rule']['stable']} checks"
            )
        else:
            lines.append(
                f"adaptive stopping: not settled after {len(st['checks'])} checks; the downloads ran "
                "to their end or the evidence cap"
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
    if args.trace_cmd == "plot":
        return _trace_plot(args)
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


def _trace_plot(args: argparse.Namespace) -> int:
    from ccscope.classifier.cli import load_traces
    from ccscope.plot import plot_traces

    traces = [t for f in args.files for t in load_traces(f, args.align)]
    verdict = None
    if args.verdict:
        from ccscope.verdict import Verdict

        try:
            doc = json.loads(Path(args.verdict).read_text())
        except (OSError, ValueError) as e:
            raise CCScopeError(f"{args.verdict}: cannot read the verdict: {e}") from None
        if isinstance(doc, dict) and "verdicts" in doc:  # classify --json's document: its first
            doc = (doc["verdicts"] or [{}])[0].get("verdict", {})
        try:
            verdict = Verdict.from_dict(doc)
        except (ValueError, KeyError, TypeError) as e:
            raise CCScopeError(f"{args.verdict}: not a verdict: {e}") from None
    elif args.classify:
        from ccscope.classifier.core import classify
        from ccscope.classifier.model import ModelError

        try:
            verdict = classify(traces)
        except ModelError as e:
            raise CCScopeError(str(e)) from None
    out = plot_traces(traces, args.out, verdict)
    print(json.dumps({"plot": str(out)}) if args.json else str(out))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from ccscope.check import run_check

    res = run_check(
        args.target,
        out_dir=Path(args.out) if args.out else None,
        lab=args.lab,
        timeout=args.timeout,
        plot=not args.no_plot,
        model_path=args.model,
        transport=args.transport,
    )
    print(json.dumps(res.to_dict(), indent=2, default=str) if args.json else res.format())
    return res.exit_code


def _cmd_export(args: argparse.Namespace) -> int:
    from ccscope.export import census_bytes, trace_parquet
    from ccscope.store.core import Store

    if args.export_cmd == "census":
        store = Store(args.db, args.traces)
        store.migrate()
        data = census_bytes(
            store,
            args.format,
            args.level,
            campaign_id=args.campaign,
            date_from=args.date_from,
            date_to=args.date_to,
            vantage=args.vantage,
            transport=args.transport,
        )
        if args.out in (None, "-"):
            if args.format == "parquet" and sys.stdout.isatty():
                raise CCScopeError("Parquet is binary: give --out FILE (or redirect stdout)")
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            Path(args.out).write_bytes(data)
            print(
                json.dumps({"file": args.out, "bytes": len(data)}) if args.json else args.out, file=sys.stderr
            )
        return 0
    # traces: of a stored measurement, or trace files
    out = Path(args.out or ".")
    out.mkdir(parents=True, exist_ok=True)
    written: list[dict[str, Any]] = []
    if args.measurement is not None:
        from ccscope.trace import Trace
        from ccscope.workers.tasks import PCAP_MEDIA_TYPE, TRACE_MEDIA_TYPE

        store = Store(args.db, args.traces)
        store.migrate()
        m = store.get_measurement(args.measurement)
        for tf in m.traces:
            data = store.read_trace(tf.sha256)
            stem = f"m{m.id}-{tf.profile}"
            if args.format == "pcap":
                if tf.media_type != PCAP_MEDIA_TYPE:
                    continue
                dest = out / f"{stem}.pcap"
            elif tf.media_type != TRACE_MEDIA_TYPE:
                continue
            elif args.format == "parquet":
                data, dest = trace_parquet(Trace.from_dict(json.loads(data))), out / f"{stem}.parquet"
            else:
                dest = out / f"{stem}.trace.json"
            dest.write_bytes(data)
            written.append({"file": str(dest), "profile": tf.profile, "bytes": len(data)})
        if not written and args.format == "pcap":
            raise CCScopeError(
                f"measurement {m.id} kept no capture: workers keep pcaps only with "
                "CCSCOPE_WORKER_KEEP_PCAP=1 (off by default)"
            )
    else:
        from ccscope.classifier.cli import load_traces

        if args.format == "pcap":
            raise CCScopeError("a trace file holds no packets: --format pcap needs --measurement N")
        for f in args.files:
            for t in load_traces(f, args.align):
                dest = out / (
                    Path(f).name.split(".")[0] + (".parquet" if args.format == "parquet" else ".trace.json")
                )
                data = trace_parquet(t) if args.format == "parquet" else json.dumps(t.to_dict()).encode()
                dest.write_bytes(data)
                written.append({"file": str(dest), "bytes": len(data)})
    if not written:
        raise CCScopeError("nothing to export")
    print(json.dumps(written, indent=2) if args.json else "\n".join(w["file"] for w in written))
    return 0


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
        as_json=args.json,
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
        "--concurrent",
        action="store_true",
        help="measure the profiles at the same time, each in its own shell (default: one after another)",
    )
    p.add_argument(
        "--adaptive",
        action="store_true",
        help="stop the downloads once the verdict has settled (adaptive stopping; implies --concurrent; "
        "never before 14 s of trace, at the latest after max(25 s, 120 RTTs))",
    )
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
    q = tsub.add_parser(
        "import",
        help="pcap/pcapng (also .gz) or tshark CSV -> trace files",
        description="Turn captures into trace files. The default alignment, sender, is the one "
        "the classifier reads, so an imported trace classifies as its capture does.",
    )
    q.add_argument("files", nargs="+")
    q.add_argument("--out", default=".", help="directory for the trace files")
    q.add_argument(
        "--align",
        choices=["capture", "sender"],
        default="sender",
        help="sender (default: shifted to the server, what the classifier reads) or capture "
        "(BiF as seen at the bottleneck, the published method's)",
    )
    q.add_argument("--flows", type=int, default=1, help="how many flows per file, largest first")
    q.add_argument("--json", action="store_true")
    q = tsub.add_parser(
        "plot",
        help="PNG of traces: BiF, pipe, SACKed, retransmissions, and what the classifier read",
        description="Plot trace files or captures (one panel per file). With --classify (or "
        "--verdict FILE from `classify --json`) the panels also show slow start's end, the "
        "segments of congestion avoidance, the back-offs with their beta and the ProbeRTT dips.",
    )
    q.add_argument("files", nargs="+")
    q.add_argument("--out", required=True, metavar="F.png")
    q.add_argument("--classify", action="store_true", help="classify the traces and mark what was read")
    q.add_argument("--verdict", metavar="JSON", help="marks from a saved verdict instead")
    q.add_argument("--align", choices=["capture", "sender"], default="sender", help="for captures")
    q.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_trace)

    p = sub.add_parser(
        "check",
        help="which CCA does this site run? crawl, measure both profiles, classify, plot",
        description="One step: find the site's largest object (robots.txt obeyed; a URL with a "
        "path is downloaded as given), download it through profiles A and B, classify the "
        "traces, print the verdict with its explanation and write a PNG of the traces. Progress "
        "goes to stderr. Needs root (the emulated bottleneck).",
    )
    p.add_argument("target", metavar="DOMAIN|URL")
    p.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="tcp",
        help="tcp (default) or quic (HTTP/3 where the site offers it: Alt-Svc, else one QUIC probe)",
    )
    p.add_argument("--out", help="directory for traces, pcaps and the plot (default runs/<time>/<id>)")
    p.add_argument("--lab", action="store_true", help="lab mode: allow lab (private) targets")
    p.add_argument("--timeout", type=float, default=90.0, help="seconds per download (default 90)")
    p.add_argument("--model", help="model artifact (default: the shipped one)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--json", action="store_true", help="one JSON document: object, runs, verdict, plot")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("export", help="open data: the census as CSV/Parquet, traces as pcap/Parquet")
    esub = p.add_subparsers(dest="export_cmd", required=True)
    q = esub.add_parser(
        "census",
        help="the census of the store (one campaign, dates...) as CSV or Parquet",
        description="One row per verdict (--level verdicts: domain, vantage, transport, date, "
        "label, kind, nearest family, confidence, classifier version) or per census cell "
        "(--level shares, as /v1/census). The same bytes as the API's /v1/census.csv and "
        "/v1/census.parquet with the same filters.",
    )
    q.add_argument("--campaign", type=int, metavar="N", help="one campaign (default: all)")
    q.add_argument("--format", choices=["csv", "parquet"], default="csv")
    q.add_argument("--level", choices=["verdicts", "shares"], default="verdicts")
    q.add_argument("--date-from", type=_date, metavar="YYYY-MM-DD")
    q.add_argument("--date-to", type=_date, metavar="YYYY-MM-DD")
    q.add_argument("--vantage")
    q.add_argument("--transport", choices=TRANSPORTS)
    q.add_argument("--out", help="file (default: stdout)")
    q.add_argument("--json", action="store_true", help="report the file written as JSON")
    q.add_argument("--db", help="SQLAlchemy URL (default: CCSCOPE_DB_URL or the embedded SQLite file)")
    q.add_argument("--traces", help="trace directory (default: CCSCOPE_TRACE_DIR or the data dir)")
    q = esub.add_parser(
        "trace",
        help="a stored measurement's traces (pcap, Parquet, JSON) or trace files as Parquet",
        description="--measurement N exports what the store kept for it: the traces (json, "
        "parquet) or the captures (pcap; kept only when the workers ran with "
        "CCSCOPE_WORKER_KEEP_PCAP=1). Otherwise FILES (traces or captures) are converted.",
    )
    q.add_argument("files", nargs="*")
    q.add_argument("--measurement", type=int, metavar="N")
    q.add_argument("--format", choices=["json", "parquet", "pcap"], default="parquet")
    q.add_argument("--align", choices=["capture", "sender"], default="sender", help="for captures")
    q.add_argument("--out", help="directory (default: .)")
    q.add_argument("--json", action="store_true")
    q.add_argument("--db", help="SQLAlchemy URL (default: CCSCOPE_DB_URL or the embedded SQLite file)")
    q.add_argument("--traces", help="trace directory (default: CCSCOPE_TRACE_DIR or the data dir)")
    p.set_defaults(func=_cmd_export)

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
    p.add_argument("--json", action="store_true", help="the census report as JSON (progress on stderr)")
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
    _add_exit_codes(sub)
    return ap


def _date(s: str) -> Any:
    import datetime as dt

    try:
        return dt.date.fromisoformat(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {s!r}") from None


def _add_exit_codes(sub: Any, codes: tuple[int, ...] = (), prefix: str = "") -> None:
    """Every command's --help ends with the exit codes it can return."""
    for name, p in sub.choices.items():
        mine = EXIT_CODES.get(prefix + name, codes)
        if not p.epilog:
            p.epilog = exit_codes_help(*mine, EXIT_INTERRUPTED)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_exit_codes(action, mine, f"{prefix}{name} ")


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
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
