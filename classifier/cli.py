"""`ccscope train | classify | eval`.

`register(subparsers)` adds the three commands to the main parser; handlers return exit codes.

classify exit codes: 0 a CCA was named, 5 unknown, 6 insufficient data (errors: 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ccscope.errors import CCScopeError

EXIT_UNKNOWN = 5
EXIT_INSUFFICIENT = 6


def register(subparsers: Any) -> None:
    from ccscope.classifier.train import DEFAULT_ROOT

    p = subparsers.add_parser(
        "classify",
        help="name the congestion control behind traces (profiles A and B of one server)",
        description="Classify one server from its traces: ccscope trace files (.json/.json.gz), "
        "pcap/pcapng captures or Nebby-style tshark CSVs. All files are taken as views of one "
        "server (e.g. its profile A and B traces) unless --each is given.",
    )
    p.add_argument("files", nargs="+")
    p.add_argument("--each", action="store_true", help="one verdict per file")
    p.add_argument("--model", help="model artifact (default: the one shipped with ccscope)")
    p.add_argument("--json", action="store_true", help="the verdict as JSON")
    p.set_defaults(func=cmd_classify)

    p = subparsers.add_parser(
        "train",
        help="train the classifier on the lab's reference measurements",
        description="Fit the model on the reference set under --root (measured by `ccscope "
        "collect --plan reference`: lab CCAs under seeded random draws of network, server and "
        "profile conditions), write it and its reference summaries to --out (default: the "
        "current directory) and the evaluation to --eval-out. --from-features refits on a "
        "reference-features file instead (the shipped one reproduces the shipped model).",
    )
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help=f"reference set (default {DEFAULT_ROOT})")
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
    p.add_argument("--json", action="store_true", help="print the headline figures as JSON")
    p.set_defaults(func=cmd_train)

    p = subparsers.add_parser(
        "eval",
        help="evaluate a model on the reference set's evaluation draws",
        description="Confusion matrices (JSON, Markdown, PNG), per-class recall with 95 % intervals "
        "and the Unknown, insufficient and wrong rates of a model on the unseen draws, other "
        "profiles, held-out runs and untrained variants under --root, or (default when --root "
        "holds none) on the summaries shipped beside the model.",
    )
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    p.add_argument("--features", type=Path, metavar="FILE", help="a reference-features file")
    p.add_argument("--model", type=Path, help="model artifact (default: the shipped one)")
    p.add_argument("--out", type=Path, default=Path("eval"), help="where the evaluation goes")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print the headline figures as JSON")
    p.set_defaults(func=cmd_eval)


def load_traces(path: str) -> list[Any]:
    """Traces from any supported file; a malformed file is a clear CCScopeError."""
    from ccscope.trace import Trace

    p = Path(path)
    if not p.exists():
        raise CCScopeError(f"{path}: no such file")
    name = p.name.lower()
    if name.endswith((".csv", ".tsv", ".txt")):
        from ccscope.capture.nebby_csv import traces_from_csv

        res = traces_from_csv(p, align="sender")
        return res.traces[:1]
    if name.endswith((".pcap", ".pcapng", ".cap")):
        from ccscope.capture.tcp_bif import flows_from_pcap

        res = flows_from_pcap(p, align="sender")
        if not res.traces:
            raise CCScopeError(f"{path}: the capture holds no TCP flow")
        return res.traces[:1]  # the largest flow: the download
    return [Trace.load(p)]


def cmd_classify(args: argparse.Namespace) -> int:
    from ccscope.classifier.core import classify
    from ccscope.classifier.model import Model, ModelError

    try:
        model = Model.load(Path(args.model) if args.model else None)
    except ModelError as e:
        raise CCScopeError(str(e)) from e
    groups = [[f] for f in args.files] if args.each else [list(args.files)]
    verdicts = []
    for g in groups:
        traces = [t for f in g for t in load_traces(f)]
        verdicts.append((g, classify(traces, model)))
    for g, v in verdicts:
        if args.json:
            print(v.to_json() if len(verdicts) == 1 else json.dumps({"files": g, "verdict": v.to_dict()}))
        else:
            print(f"{', '.join(g)}: {v.display}  (confidence {v.confidence:.2f}, {v.classifier_version})")
            print(f"  {v.explanation}")
    last = verdicts[-1][1]
    return {"cca": 0, "unknown": EXIT_UNKNOWN, "insufficient": EXIT_INSUFFICIENT}[last.kind]


def cmd_train(args: argparse.Namespace) -> int:
    from ccscope.classifier.train import ReferenceFeaturesError, headline, train_and_eval

    try:
        model, res, path = train_and_eval(
            args.root, args.out, args.eval_out, workers=args.workers, features=args.from_features
        )
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
            args.root, features=args.features, shipped_fallback=True, workers=args.workers
        )
    except ReferenceFeaturesError as e:
        raise CCScopeError(str(e)) from e
    if not samples:
        raise CCScopeError(f"no reference measurements under {args.root}; `ccscope collect` measures them")
    if source is not None and args.features is None:
        print(f"no reference traces under {args.root}: evaluating on their shipped summaries ({source.name})",
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
