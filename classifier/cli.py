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
DEFAULT_EVAL_DIR = Path(__file__).resolve().parent.parent / "bench" / "classifier" / "eval"


def register(subparsers: Any) -> None:
    from ccscope.classifier.dataset import DEFAULT_INSTANCE, DEFAULT_ROOT, DEFAULT_STATE_DIR

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
        help="measure the lab's CCAs and train the classifier model",
        description="Measure every lab CCA (kernel + BPF zoo) through both profiles over a "
        "spread of Internet-path conditions (resumable), train the model, write it to "
        "classifier/models/ and the held-out evaluation to bench/classifier/eval/. Needs root.",
    )
    p.add_argument(
        "--root", type=Path, default=DEFAULT_ROOT, help=f"reference traces (default {DEFAULT_ROOT})"
    )
    p.add_argument("--no-measure", action="store_true", help="train on the traces already under --root")
    p.add_argument(
        "--retrace",
        action="store_true",
        help="first rebuild every reference trace from its pcap (after a change to the capture code)",
    )
    p.add_argument(
        "--measure-only",
        action="store_true",
        help="only measure the reference traces (then `ccscope eval` checks the shipped model on them)",
    )
    p.add_argument("--concurrency", type=int, default=12, help="downloads at once (default 12)")
    p.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    p.add_argument("--instance", type=int, default=DEFAULT_INSTANCE, help="lab instance (default 4)")
    p.add_argument("--out", type=Path, help="model file (default classifier/models/ccscope-<version>.json)")
    p.add_argument("--eval-out", type=Path, default=DEFAULT_EVAL_DIR)
    p.add_argument("--workers", type=int, default=1, help="processes for feature extraction")
    p.add_argument(
        "--from-features",
        type=Path,
        metavar="FILE",
        help="refit on a reference-features file instead of traces (no measuring; e.g. the "
        "shipped classifier/models/reference-<version>.json.gz, which reproduces the shipped model)",
    )
    p.set_defaults(func=cmd_train)

    p = subparsers.add_parser(
        "eval",
        help="evaluate the shipped model on held-out reference traces",
        description="Confusion matrices (JSON, Markdown, PNG), per-class recall and Unknown "
        "rates of a model on the held-out runs, held-out network conditions and untrained "
        "variants under --root (measured by `ccscope train`).",
    )
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    p.add_argument(
        "--features",
        type=Path,
        metavar="FILE",
        help="evaluate on a reference-features file instead of the traces under --root (default "
        "when --root holds none: the shipped classifier/models/reference-<version>.json.gz)",
    )
    p.add_argument("--model", type=Path, help="model artifact (default: the shipped one)")
    p.add_argument("--out", type=Path, default=DEFAULT_EVAL_DIR)
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


def _headline(res: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": res.get("model_version"),
        "recall_heldout_runs": res.get("heldout_runs", {}).get("mean_recall"),
        "recall_heldout_conditions": res.get("heldout_conditions", {}).get("mean_recall"),
        "unknown_rate_variants": res.get("variants", {}).get("unknown_rate"),
        "unknown_rate_known": res.get("unknown_rate_known"),
        "weakest_pairs": res.get("weakest_pairs"),
    }


def cmd_train(args: argparse.Namespace) -> int:
    from ccscope.classifier import dataset
    from ccscope.classifier.model import DEFAULT_MODEL
    from ccscope.classifier.train import ReferenceFeaturesError, train_and_eval

    if args.retrace:
        print(f"retraced {dataset.retrace(args.root)} reference traces from their pcaps", file=sys.stderr)
    if args.from_features is None and not args.no_measure:
        dataset.collect(
            args.root, concurrency=args.concurrency, state_dir=args.state_dir, instance=args.instance
        )
    if args.measure_only:
        print(f"reference traces under {args.root}")
        return 0
    out = args.out or DEFAULT_MODEL
    try:
        model, res = train_and_eval(
            args.root, out, args.eval_out, workers=args.workers, features=args.from_features
        )
    except ReferenceFeaturesError as e:
        raise CCScopeError(str(e)) from e
    print(f"model {model.version} -> {out}")
    print(json.dumps(_headline(res), indent=2))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from ccscope.classifier.model import Model, ModelError
    from ccscope.classifier.train import ReferenceFeaturesError, evaluate, reference_data, write_eval

    try:
        model = Model.load(args.model)
    except ModelError as e:
        raise CCScopeError(str(e)) from e
    runs_train = int(model.training.get("runs_train", 2))
    try:
        us, _, summ, source = reference_data(
            args.root, runs_train, features=args.features, shipped_fallback=True, workers=args.workers
        )
    except ReferenceFeaturesError as e:
        raise CCScopeError(str(e)) from e
    if not us:
        raise CCScopeError(f"no reference traces under {args.root}; `ccscope train` measures them")
    if source is not None and args.features is None:
        print(
            f"no reference traces under {args.root}: evaluating on their shipped summaries ({source.name})",
            file=sys.stderr,
        )
    res = evaluate(model, us, summ)
    res["model_version"] = model.version
    write_eval(res, args.out)
    head = _headline(res)
    if args.json:
        print(json.dumps(head, indent=2))
    else:
        print((args.out / "eval.md").read_text())
        print(f"written: {args.out}/eval.json, eval.md, confusion.png", file=sys.stderr)
    return 0
