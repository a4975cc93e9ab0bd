"""`ccscope train | classify | eval`.

`register(subparsers)` adds the three commands to the main parser; handlers return exit codes.

classify exit codes: 0 a CCA was named, 5 unknown, 6 insufficient data (errors: 1).

Inputs are checked before they are classified: the traces must be of one server, each profile
once, and in the alignment the model was trained on (pcaps and CSVs are converted to it; a trace
file in another alignment is refused). `--force` classifies anyway; the verdict records the
alignment it read (`evidence.alignment`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ccscope.errors import EXIT_INSUFFICIENT, EXIT_UNKNOWN, CCScopeError, exit_codes_help

PCAP_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz", ".pcapng.gz", ".cap.gz")
CSV_SUFFIXES = (".csv", ".tsv", ".txt")
ROOT_HELP = (
    "a reference collection (`ccscope collect`); repeatable: one model from several, e.g. the TCP "
    "and the QUIC one, each transport's classes from its own measurements (default /var/tmp/ccscope-draws)"
)


def roots(args: argparse.Namespace) -> list[Path]:
    from ccscope.classifier.train import DEFAULT_ROOT

    return list(args.root or [DEFAULT_ROOT])


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "classify",
        help="name the congestion control behind traces (profiles A and B of one server)",
        description="Classify one server from its traces: ccscope trace files (.json/.json.gz), "
        "pcap/pcapng captures or Nebby-style tshark CSVs. All files are taken as views of one "
        "server (e.g. its profile A and B traces) unless --each is given. Traces of different "
        "servers, one profile given twice, or a trace file in another alignment than the model's "
        "are refused (exit 1) unless --force is given.",
        epilog=exit_codes_help(EXIT_UNKNOWN, EXIT_INSUFFICIENT),
    )
    p.add_argument("files", nargs="+")
    p.add_argument("--each", action="store_true", help="one verdict per file")
    p.add_argument("--model", help="model artifact (default: the one shipped with ccscope)")
    p.add_argument("--json", action="store_true", help="the verdict as one JSON document")
    p.add_argument("--force", action="store_true", help="classify even traces that fail the input checks")
    p.add_argument("--plot", metavar="PNG", help="also write a picture of the traces and what was read")
    p.set_defaults(func=cmd_classify)

    p = subparsers.add_parser(
        "train",
        help="train the classifier on the lab's reference measurements",
        description="Fit the model on the reference set under --root (measured by `ccscope "
        "collect --plan reference`, and `--plan reference-quic` for QUIC's classes: lab CCAs "
        "under seeded random draws of network, server and profile conditions), write it and its "
        "reference summaries to --out (default: the current directory) and the evaluation to "
        "--eval-out. --from-features refits on a "
        "reference-features file instead (the shipped one reproduces the shipped model).",
        epilog=exit_codes_help(),
    )
    p.add_argument("--root", type=Path, action="append", help=ROOT_HELP)
    p.add_argument("--out", type=Path, default=Path("."), help="where the model and its summaries go")
    p.add_argument("--eval-out", type=Path, default=Path("eval"), help="where the evaluation goes")
    p.add_argument("--workers", type=int, default=1, help="processes for feature extraction")
    p.add_argument(
        "--from-features",
        type=Path,
        metavar="FILE",
        help="refit on a reference-features file instead of traces (e.g. the shipped "
        "classifier/models/reference-<version>.json.gz, which rewrites the shipped model)",
    )
    p.add_argument(
        "--extend",
        type=Path,
        metavar="FILE",
        help="fit on this reference-features file's measurements and those under --root together "
        "(a collection grown after its traces were gone; measure with `ccscope collect --skip-in FILE`)",
    )
    p.add_argument(
        "--remeasured",
        action="store_true",
        help="with --extend: a measurement under --root replaces the file's one of the same key "
        "(a set measured again, e.g. with a new client)",
    )
    p.add_argument("--json", action="store_true", help="print the headline figures as JSON")
    p.set_defaults(func=cmd_train)

    p = subparsers.add_parser(
        "eval",
        help="evaluate a model on the reference set's evaluation draws",
        description="Confusion matrices (JSON, Markdown, PNG), per-class recall with 95 % intervals "
        "and the Unknown, insufficient and wrong rates of a model on the unseen draws, other "
        "profiles, held-out runs and untrained variants under --root, or (default when --root "
        "holds none) on the summaries shipped beside the model.",
        epilog=exit_codes_help(),
    )
    p.add_argument("--root", type=Path, action="append", help=ROOT_HELP)
    p.add_argument("--features", type=Path, metavar="FILE", help="a reference-features file")
    p.add_argument("--model", type=Path, help="model artifact (default: the shipped one)")
    p.add_argument("--out", type=Path, default=Path("eval"), help="where the evaluation goes")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print the headline figures as JSON")
    p.set_defaults(func=cmd_eval)


def model_alignment(model: Any) -> str:
    """The alignment the model's reference traces were in (what classify must be given)."""
    return str((getattr(model, "training", None) or {}).get("alignment") or "sender")


def load_traces(path: str, align: str = "sender") -> list[Any]:
    """Traces from any supported file; a malformed file is a clear CCScopeError. Captures and
    CSVs are converted in `align`; trace files are taken as they are (see check_inputs)."""
    from ccscope.trace import Trace

    p = Path(path)
    if not p.exists():
        raise CCScopeError(f"{path}: no such file")
    name = p.name.lower()
    if name.endswith(CSV_SUFFIXES):
        from ccscope.capture.nebby_csv import traces_from_csv

        res = traces_from_csv(p, align=align)
        return [_as_saved(t) for t in res.traces[:1]]
    if name.endswith(PCAP_SUFFIXES):
        from ccscope.capture.tcp_bif import flows_from_pcap

        res = flows_from_pcap(p, align=align)
        if not res.traces:
            raise CCScopeError(f"{path}: the capture holds no TCP flow")
        return [_as_saved(t) for t in res.traces[:1]]  # the largest flow: the download
    return [Trace.load(p)]


def _as_saved(t: Any) -> Any:
    """The trace exactly as its file would hold it (timestamps rounded to the microsecond), so a
    capture classified directly and the same capture imported first read the same numbers."""
    return type(t).from_dict(t.to_dict())


def check_inputs(named: list[tuple[str, Any]], align: str) -> list[str]:
    """Why these traces cannot honestly be read as one server's (empty: they can). `named` is
    [(file, trace)]. One server; each profile at most once (the same file twice is one profile
    twice); every trace in the model's alignment."""
    problems: list[str] = []
    servers = {t.flow.server for _, t in named}
    if len(servers) > 1:
        where = ", ".join(f"{f}: {t.flow.server}" for f, t in named)
        problems.append(f"the traces are of different servers ({where}); classify them one by one (--each)")
    seen: dict[str, str] = {}
    for f, t in named:
        prof = str((t.profile or {}).get("name") or "")
        key = prof or f"{t.flow}@{t.start_time}"
        if key in seen:
            what = f"profile {prof}" if prof else "the same flow"
            problems.append(f"{seen[key]} and {f} are both {what}: one server's traces are one per profile")
        else:
            seen[key] = f
    for f, t in named:
        if t.alignment != align:
            problems.append(
                f"{f} is {t.alignment}-aligned but the model reads {align}-aligned traces: classify "
                f"the capture itself, the *.{align}.trace.json that `measure` wrote, or "
                f"`ccscope trace import --align {align}`"
            )
    return problems


def verdict_json(files: list[str], v: Any) -> dict[str, Any]:
    """One verdict as `classify --json` and `check --json` print it."""
    return {"files": files, "verdict": json.loads(v.to_json())}


def cmd_classify(args: argparse.Namespace) -> int:
    from ccscope.classifier.core import classify
    from ccscope.classifier.model import Model, ModelError

    try:
        model = Model.load(Path(args.model) if args.model else None)
    except ModelError as e:
        raise CCScopeError(str(e)) from e
    align = model_alignment(model)
    groups = [[f] for f in args.files] if args.each else [list(args.files)]
    verdicts = []
    loaded = []
    for g in groups:
        named = [(f, t) for f in g for t in load_traces(f, align)]
        problems = check_inputs(named, align)
        if problems and not args.force:
            raise CCScopeError("; ".join(problems) + " (--force classifies them anyway)")
        for msg in problems:
            print(f"ccscope: warning: {msg}", file=sys.stderr)
        traces = [t for _, t in named]
        loaded.append(traces)
        verdicts.append((g, classify(traces, model)))
    if args.json:
        # One JSON document whatever the number of verdicts: {"verdicts": [{"files", "verdict"}]}.
        print(json.dumps({"verdicts": [verdict_json(g, v) for g, v in verdicts]}, indent=2, sort_keys=True))
    else:
        for g, v in verdicts:
            print(f"{', '.join(g)}: {v.display}  (confidence {v.confidence:.2f}, {v.classifier_version})")
            print(f"  {v.explanation}")
    if args.plot:
        from ccscope.plot import plot_traces

        for i, ((_g, v), traces) in enumerate(zip(verdicts, loaded, strict=True)):
            out = Path(args.plot)
            if len(verdicts) > 1:
                out = out.with_name(f"{out.stem}.{i}{out.suffix or '.png'}")
            print(f"plot: {plot_traces(traces, out, v)}", file=sys.stderr)
    last = verdicts[-1][1]
    return {"cca": 0, "unknown": EXIT_UNKNOWN, "insufficient": EXIT_INSUFFICIENT}[last.kind]


def cmd_train(args: argparse.Namespace) -> int:
    from ccscope.classifier.train import ReferenceFeaturesError, headline, train_and_eval
    from ccscope.progress import ticking

    if args.extend and (args.from_features or not args.root):
        raise CCScopeError("--extend takes the new measurements from --root and not --from-features")
    if args.remeasured and not args.extend:
        raise CCScopeError("--remeasured goes with --extend")
    try:
        # An elapsed-time bar while features are extracted and the model is fitted (minutes).
        with ticking("training"):
            model, res, path = train_and_eval(
                roots(args), args.out, args.eval_out, workers=args.workers,
                features=args.extend or args.from_features, extend=args.extend is not None,
                remeasured=args.remeasured,
            )  # fmt: skip
    except ReferenceFeaturesError as e:
        raise CCScopeError(str(e)) from e
    head = headline(res)
    if args.json:
        print(json.dumps(head, indent=2))
    else:
        print(f"model {model.version} -> {path}")
        print(json.dumps(head, indent=2))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from ccscope.classifier.model import Model, ModelError
    from ccscope.classifier.train import (
        ReferenceFeaturesError,
        evaluate,
        headline,
        reference_data,
        write_eval,
    )

    try:
        model = Model.load(args.model)
    except ModelError as e:
        raise CCScopeError(str(e)) from e
    try:
        samples, summ, source = reference_data(
            roots(args), features=args.features, shipped_fallback=True, workers=args.workers
        )
    except ReferenceFeaturesError as e:
        raise CCScopeError(str(e)) from e
    where = ", ".join(map(str, roots(args)))
    if not samples:
        raise CCScopeError(f"no reference measurements under {where}; `ccscope collect` measures them")
    if source is not None and args.features is None:
        print(f"no reference traces under {where}: evaluating on their shipped summaries ({source.name})",
              file=sys.stderr)  # fmt: skip
    res = evaluate(model, samples, summ)
    write_eval(res, args.out)
    head = headline(res)
    if args.json:
        print(json.dumps(head, indent=2))
    else:
        print((args.out / "eval.md").read_text())
        print(f"written: {args.out}/eval.json, eval.md, confusion.png", file=sys.stderr)
    return 0
