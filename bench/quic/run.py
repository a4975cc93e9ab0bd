"""bench/quic: QUIC bytes in flight from the encrypted capture vs the server's own qlog.

Every lab QUIC stack x CCA (lab/quic) is downloaded through A-quic and B-quic `--runs` times
behind a 10 ms one-way Internet path, and each capture is scored against the server's qlog
(`recovery:metrics_updated` bytes_in_flight), sender-aligned, as the mean |error| over time on a
1 ms grid in % of the path's BDP. Three estimators on the same captures:

  bif_mae_pct_bdp            ccscope's: the replayed bottleneck + our client's own ACK record;
  bif_mae_pct_bdp_link       the same without the client's record (capture + profile only);
  bif_mae_pct_bdp_published  the published heuristic (thesis §6.2.2), as it was run: capture
                             aligned, a constant share of the server's bytes per client datagram.

Also: `measure_s`, one profile's QUIC download next to TCP's from the same lab site (the QUIC
server's address also serves HTTPS over TCP); the cost of keeping the rate instead of the
packets per RTT (A-quic-rate: MTU 1280 at 200 kbit/s).

`recall_per_stack`: the classifier's QUIC classes (`stack:cca`) on the QUIC reference collection
(`ccscope collect --plan reference-quic`, `--classifier-root`): one row per stack x CCA with its
recall on held-out runs (a trained path, a new run) and on unseen random path draws, their mean
and minimum over the rows, and the stack family: the stack the label names, and the stack the
captures' fingerprint names (capture/quic_fingerprint.py). The QUIC estimator is `--model`'s when
it has one, else fitted here on the collection's training draws with `ccscope train`'s code.
`recall_tcp_model_baseline` keeps how the TCP-trained classifier named each stack's CCA family.

    .venv/bin/python bench/quic/run.py --out bench/results/quic.json [--runs 2] [--work DIR]
    .venv/bin/python bench/quic/run.py --from-runs DIR --out ...   # rescore saved runs
    .venv/bin/python bench/quic/run.py --recall-only --out ...     # only recall_per_stack
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccscope.capture.measure import measure
from ccscope.capture.quic_bif import quic_flows_from_pcap, read_quic
from ccscope.capture.quic_fingerprint import fingerprint, guess
from ccscope.lab.quic.groundtruth import EXACT, compare_over_time
from ccscope.lab.quic.qlog import qlog_trace
from ccscope.profile import Profile
from ccscope.trace import Trace

INSTANCE = 53
DELAY_MS = 10.0
OBJECT = 3_000_000
TARGET_PCT = 3.0


def log(msg: str) -> None:
    print(f"[bench quic] {msg}", file=sys.stderr, flush=True)


def score_dir(mdir: Path) -> list[dict[str, Any]]:
    """Per profile of one saved measurement: the three estimators against the server's qlog."""
    from ccscope.lab.groundtruth import compare_bif

    m = json.loads((mdir / "measurement.json").read_text())
    rows = []
    for r in m["runs"]:
        g = r.get("groundtruth") or {}
        row: dict[str, Any] = {
            "profile": r["profile"],
            "ok": r["ok"],
            "error": r["error"],
            "stack": g.get("cca"),
        }
        if not r["ok"] or not g.get("qlog") or not r.get("trace_file"):
            rows.append(row)
            continue
        stem = r["profile"]
        cap0 = Trace.load(r["trace_file"])
        prof = Profile.from_dict(cap0.profile or {})
        stats = json.loads((mdir / f"{stem}.stats.json").read_text())
        truth = qlog_trace(g["qlog"])
        bdp = prof.bdp_bytes(cap0.internet_rtt_ms or 0.0) or 1.0
        skip = 2.0 * (prof.base_rtt_ms + (cap0.internet_rtt_ms or 0.0)) / 1000.0
        port = int(r["fetch"].get("local_port") or 0)
        common = {"object_url": m["url"], "profile": prof, "link_stats": stats, "client_port": port}

        full = quic_flows_from_pcap(
            mdir / f"{stem}.pcap",
            ("capture", "sender"),
            estimator="client",
            client_log=mdir / f"{stem}.client.sqlog",
            **common,
        )
        link = quic_flows_from_pcap(mdir / f"{stem}.pcap", ("sender",), estimator="link", **common)
        snd, cap, lnk = _pick(full["sender"], port), _pick(full["capture"], port), _pick(link["sender"], port)
        pub = cap.with_bif(cap.columns["bif_published"])

        def over_time(t: Trace) -> float | None:
            return compare_over_time(t, truth, bdp_bytes=bdp, skip_s=skip)["mae_pct_bdp"]  # noqa: B023

        row.update({
            "estimator": snd.extra["quic"]["estimator"],
            "bdp_bytes": round(bdp),
            "bif_mae_pct_bdp": over_time(snd),
            "bif_mae_pct_bdp_link": over_time(lnk),
            "bif_mae_pct_bdp_published": over_time(pub),
            "bif_mae_pct_bdp_per_event": compare_bif(snd, truth, bdp_bytes=bdp, max_truth_gap_ms=EXACT)[
                "mae_pct_bdp"
            ],
            "capture_aligned_mae_pct_bdp": over_time(cap),
            "drops": snd.extra["quic"].get("modelled_drops"),
            "link_drops": stats.get("down", {}).get("drops_queue"),
            "seconds": r["duration_s"],
            "bytes": r["bytes"],
        })  # fmt: skip
        fp = fingerprint(read_quic(mdir / f"{stem}.pcap").flows[0].d)
        row["fingerprint"] = {**fp.to_dict(), "guess": guess(fp)[0]}
        rows.append(row)
    return rows


def _pick(res: Any, port: int) -> Trace:
    return next((t for t in res.traces if t.flow.client_port == port), res.traces[0])


def _mean(rows: list[dict[str, Any]], key: str, nd: int) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.mean(vals), nd) if vals else None


def _classifier_version() -> str | None:
    try:
        from ccscope.classifier import model

        return str(getattr(model, "CLASSIFIER_VERSION", None))
    except Exception:
        return None


def classify_dir(mdir: Path) -> str:
    from ccscope.classifier import classify

    m = json.loads((mdir / "measurement.json").read_text())
    paths = [r["sender_trace_file"] for r in m["runs"] if r.get("sender_trace_file")]
    try:
        return classify([Trace.load(p) for p in paths]).label
    except Exception as e:
        return f"error: {type(e).__name__}"


def summarise(rows: list[dict[str, Any]], verdicts: dict[str, list[str]]) -> dict[str, Any]:
    from ccscope.classifier.quic_dataset import family

    per: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("bif_mae_pct_bdp") is None:
            continue
        p = per.setdefault(r["stack"], {"n": 0, "ours": [], "link": [], "published": [], "per_event": []})
        p["n"] += 1
        p["ours"].append(r["bif_mae_pct_bdp"])
        p["link"].append(r["bif_mae_pct_bdp_link"])
        p["published"].append(r["bif_mae_pct_bdp_published"])
        p["per_event"].append(r["bif_mae_pct_bdp_per_event"])
    table = {
        k: {
            "traces": v["n"],
            "bif_mae_pct_bdp": round(statistics.mean(v["ours"]), 2),
            "bif_mae_pct_bdp_max": round(max(v["ours"]), 2),
            "bif_mae_pct_bdp_link": round(statistics.mean(v["link"]), 2),
            "bif_mae_pct_bdp_published": round(statistics.mean(v["published"]), 1),
            "bif_mae_pct_bdp_per_event": round(statistics.mean(v["per_event"]), 2),
        }
        for k, v in sorted(per.items())
    }
    allv = [x for r in rows for x in [r.get("bif_mae_pct_bdp")] if x is not None]
    recall = {}
    for stack, vs in sorted(verdicts.items()):
        fam = family(stack)
        recall[stack] = {
            "family": fam,
            "runs": len(vs),
            "recall": round(sum(v == fam for v in vs) / len(vs), 3),
            "verdicts": {v: vs.count(v) for v in sorted(set(vs))},
        }
    return {"per_stack": table, "all": allv, "recall": recall}


# --- the classifier's QUIC classes -----------------------------------------------------------

QUIC_ROOT = Path("/var/tmp/ccscope-draws-quic")
RECALL_TARGET = {"mean": 0.95, "min": 0.90}
RECALL_SETS = ("quic_heldout_runs", "quic_unseen")
PRED_KEYS = ("key", "set", "label", "pred", "top1", "confidence", "fingerprint", "reason")


def _share(k: int, n: int) -> float | None:
    return round(k / n, 3) if n else None


def quic_model(samples: list[Any], summ: dict[str, Any], model_path: Path | None) -> Any:
    """The model whose QUIC estimator is scored: `model_path`'s, or one fitted on the
    collection's QUIC training draws (exactly as `ccscope train` fits it, through the model
    file's rounding)."""
    from ccscope.classifier.estimator import CCAClassifier
    from ccscope.classifier.model import CLASSIFIER_VERSION, Model, data_hash
    from ccscope.classifier.train import fit_estimators

    if model_path is not None:
        m = Model.load(model_path)
        if "quic" in m.estimators:
            return m
        log(f"{model_path} has no QUIC estimator: fitting one on the collection")
    train = [s for s in samples if s.set == "quic_train"]
    ests, counts = fit_estimators(train, summ, transports=("quic",))
    if "quic" not in ests:
        raise SystemExit("no usable QUIC training measurement in the collection")
    est = CCAClassifier.from_dict(json.loads(json.dumps(ests["quic"].to_dict())))
    tag = data_hash([(s.key, s.label, s.group) for s in train])[:8]
    return Model(f"ccscope-{CLASSIFIER_VERSION}+{tag}-quic", {"quic": est}, {"fitted": counts})


def _stack_print(paths: tuple[str, ...], trace_roots: Sequence[Path] = ()) -> str | None:
    """The stack the measurement's captures' fingerprints agree on (None: none or no print, or
    traces no longer on disk: the shipped summaries keep the shape, not the print). A path
    relative to its collection is looked up under `trace_roots`."""
    from ccscope.classifier.core import quic_stack

    traces = []
    for p in paths:
        file = next((f for f in (Path(p), *(r / p for r in trace_roots)) if f.is_file()), None)
        if file is None:
            return None
        traces.append(Trace.load(file))
    st = quic_stack(traces)
    return None if st is None else st["family"] or "?"


def recall_rows(preds: list[dict[str, Any]], labels: list[str]) -> dict[str, Any]:
    """Per stack x CCA: recall on each set and on both; mean and min over the rows."""
    from ccscope.classifier.train import wilson

    rows = []
    for label in labels:
        row: dict[str, Any] = {"class": label, "stack": label.split(":")[0], "cca": label.split(":")[-1]}
        for name in (*RECALL_SETS, "both"):
            rr = [r for r in preds if r["label"] == label and (name == "both" or r["set"] == name)]
            k = sum(r["pred"] == label for r in rr)
            row[name.removeprefix("quic_")] = {
                "n": len(rr),
                "recall": round(k / len(rr), 3) if rr else None,
                "ci": wilson(k, len(rr)),
                # the CCA right whatever stack was named (the window's shape alone could say this)
                "cca_recall": _share(sum(r["pred"].split(":")[-1] == row["cca"] for r in rr), len(rr)),
                # the forest's most likely class before the Unknown rules and the gate
                "top1_recall": _share(sum(r["top1"] == label for r in rr), len(rr)),
                "predicted": {p: sum(r["pred"] == p for r in rr) for p in sorted({r["pred"] for r in rr})},
            }
        rows.append(row)

    def agg(key: str) -> dict[str, float | None]:
        v = [r[key]["recall"] for r in rows if r[key]["recall"] is not None]
        return {"mean": round(statistics.mean(v), 3) if v else None, "min": min(v) if v else None}

    keys = [k.removeprefix("quic_") for k in (*RECALL_SETS, "both")]
    return {"rows": rows, **{k: agg(k) for k in keys}}


def stack_family(preds: list[dict[str, Any]]) -> dict[str, Any]:
    """How often the stack is named right: by the label's stack part (the forest) and by the
    captures' fingerprint (None where the traces carry no print: measured before it was kept)."""
    out: dict[str, Any] = {}
    for stack in sorted({r["label"].split(":")[0] for r in preds}):
        rr = [r for r in preds if r["label"].startswith(stack + ":")]
        named = [r for r in rr if ":" in r["pred"]]
        fp = [r for r in rr if r.get("fingerprint") is not None]
        out[stack] = {
            "n": len(rr),
            "label_stack_right": _share(sum(r["pred"].split(":")[0] == stack for r in named), len(named)),
            "label_named": len(named),
            "top1_stack_right": _share(sum(r["top1"].split(":")[0] == stack for r in rr), len(rr)),
            "fingerprint_right": _share(sum(r["fingerprint"] == stack for r in fp), len(fp)),
            "fingerprinted": len(fp),
        }
    return out


def cv_recall(samples: list[Any], summ: dict[str, Any], folds: int = 5) -> dict[str, Any]:
    """Leave-draws-out recall on the training draws themselves (folds by draw): more
    measurements per class than the held-out sets, each on a path its model never saw."""
    from ccscope.classifier.estimator import CCAClassifier
    from ccscope.classifier.model import Model
    from ccscope.classifier.train import HEAD_MARK, fit_estimators, predict_rows

    train = sorted((s for s in samples if s.set == "quic_train"), key=lambda s: s.key)
    groups = sorted({s.group for s in train})
    preds: list[dict[str, Any]] = []
    for f in range(folds):
        test_groups = set(groups[f::folds])
        fit = [s for s in train if s.group not in test_groups]
        ests, _ = fit_estimators(fit, summ, transports=("quic",))
        if "quic" not in ests:
            continue
        est = CCAClassifier.from_dict(json.loads(json.dumps(ests["quic"].to_dict())))
        test = [s for s in train if s.group in test_groups and HEAD_MARK not in s.key]  # whole downloads
        preds += predict_rows(Model(f"cv{f}", {"quic": est}), test, summ)
    labels = sorted({s.label for s in train})
    per, top1 = {}, {}
    for label in labels:
        rr = [r for r in preds if r["label"] == label]
        per[label] = _share(sum(r["pred"] == label for r in rr), len(rr))
        top1[label] = _share(sum(r["top1"] == label for r in rr), len(rr))
    v = [x for x in per.values() if x is not None]
    t = [x for x in top1.values() if x is not None]
    return {"folds": folds, "measurements": len(preds), "per_class": per, "per_class_top1": top1,
            "mean": round(statistics.mean(v), 3) if v else None, "min": min(v) if v else None,
            "mean_top1": round(statistics.mean(t), 3) if t else None}  # fmt: skip


def quic_recall(root: Path, model_path: Path | None, trace_roots: Sequence[Path] = ()) -> dict[str, Any]:
    from ccscope.classifier.train import HEAD_MARK, predict_rows, reference_data, score

    # the collection's traces, else the summaries shipped beside the model (what it was fitted
    # and evaluated on, e.g. after the traces' machine is gone)
    samples, summ, _src = reference_data(root, shipped_fallback=True)
    samples = [s for s in samples if s.transport == "quic"]
    if not samples:
        raise SystemExit(f"no QUIC measurements under {root} (ccscope collect --plan reference-quic)")
    model = quic_model(samples, summ, model_path)
    labels = list(model.estimators["quic"].classes_)
    preds: list[dict[str, Any]] = []
    by_set: dict[str, Any] = {}
    for name in RECALL_SETS:
        mine = [s for s in samples if s.set == name]
        rows = predict_rows(model, mine, summ)
        for r, s in zip(rows, [s for s in mine if s.paths], strict=True):
            r["fingerprint"] = _stack_print(s.paths, (root, *trace_roots))
        preds += rows
        if rows:
            sc = score(rows, labels)
            keep = ("measurements", "mean_recall", "mean_recall_ci", "mean_recall_top1", "right_rate",
                    "unknown_rate", "insufficient_rate", "wrong_rate")  # fmt: skip
            by_set[name.removeprefix("quic_")] = {k: sc[k] for k in keep}
    rec = recall_rows(preds, labels)
    whole = [s for s in samples if HEAD_MARK not in s.key]  # not the training prefixes
    sets = {k: sum(s.set == k for s in whole) for k in sorted({s.set for s in whole})}
    return {
        "what": "the classifier's QUIC classes (stack:cca) on the QUIC reference collection: held-out "
        "runs (a trained path, a new run) and unseen random path draws; right = the stack and CCA named",
        "model": model.version,
        "fitted": model.training.get("fitted"),
        "collection": {"root": str(root), "measurements": sets},
        "target": RECALL_TARGET,
        "mean": rec["both"]["mean"],
        "min": rec["both"]["min"],
        "heldout_runs": rec["heldout_runs"],
        "unseen": rec["unseen"],
        "sets": by_set,
        "rows": rec["rows"],
        "stack_family": stack_family(preds),
        "cv_training_draws": cv_recall(samples, summ),
        "predictions": [{k: r[k] for k in PRED_KEYS} for r in preds],
    }


def measure_timing(work: Path) -> dict[str, Any]:
    """The same site and object size over TCP and over QUIC, one profile each (the lab is up)."""
    from ccscope.lab.quic.registry import quic_server

    timing: dict[str, Any] = {}
    host = quic_server("quiche:cubic").hostname
    for transport, prof, size in (("tcp", "A", 400_000), ("quic", "A", OBJECT), ("quic", "A", 400_000)):
        out = work / f"timing-{transport}-{size}"
        t0 = time.monotonic()
        m = measure(f"https://{host}/obj/{size}", (prof,), out, lab=True, timeout=180, transport=transport)
        r = m.runs[0]
        timing[f"{transport}_{size}"] = {
            "measure_s": round(time.monotonic() - t0, 1),
            "download_s": r.duration_s,
            "ok": m.ok,
            "profile": r.profile,
            # QUIC fetches a short object again until the transfer is long enough to classify
            "requests": (r.fetch.get("quic") or {}).get("requests", 1),
            "wire_bytes": r.bytes,  # as captured, headers included
        }
    return timing


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/ccscope-bench-quic"))
    ap.add_argument("--state-dir", type=Path, default=Path("/run/ccscope/lab-bench-quic"))
    ap.add_argument("--from-runs", type=Path, help="rescore saved runs in this directory")
    ap.add_argument("--classifier-root", type=Path, default=QUIC_ROOT,
                    help=f"the QUIC reference collection scored (default {QUIC_ROOT})")  # fmt: skip
    ap.add_argument("--model", type=Path, help="a model with a QUIC estimator (default: fit one here)")
    ap.add_argument("--trace-root", type=Path, action="append", default=[],
                    help="where the shipped summaries' relative trace paths live")  # fmt: skip
    ap.add_argument("--recall-only", action="store_true",
                    help="only recompute recall_per_stack; keep --out's other figures")  # fmt: skip
    ap.add_argument("--as-key", metavar="KEY",
                    help="with --recall-only: store the figures under KEY beside the shipped "
                    "recall_per_stack (an A/B of a client or model that is not shipped)")  # fmt: skip
    ap.add_argument("--what", default="", help="with --as-key: what the A/B measured")
    ap.add_argument("--timing-only", action="store_true",
                    help="only re-measure measure_s; keep --out's other figures")  # fmt: skip
    args = ap.parse_args()
    if args.timing_only:
        from ccscope.lab.lab import Lab, LabParams
        from ccscope.lab.quic.lab import resolve_servers

        doc = json.loads(args.out.read_text()) if args.out.exists() else {"bench": "quic"}
        os.environ["CCSCOPE_LAB_DIR"] = str(args.state_dir)
        lab = Lab(args.state_dir)
        lab.up(LabParams(delay_ms=DELAY_MS, ccas=("cubic",), instance=INSTANCE,
                         quic=resolve_servers(("quiche:cubic",))), timeout=60)  # fmt: skip
        try:
            doc["measure_s"] = measure_timing(args.work / "timing-only")
        finally:
            lab.down()
        doc["measure_when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        log(f"measure_s: {doc['measure_s']}")
        return 0
    if args.recall_only:
        doc = json.loads(args.out.read_text()) if args.out.exists() else {"bench": "quic"}
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if args.as_key:
            if args.as_key in ("recall_per_stack", "recall_tcp_model_baseline"):
                ap.error(f"--as-key {args.as_key} would overwrite a shipped figure")
            r = quic_recall(args.classifier_root, args.model, args.trace_root)
            doc[args.as_key] = {"what": args.what, "when": when, **r}
            args.out.write_text(json.dumps(doc, indent=2) + "\n")
            log(f"{args.as_key}: mean {r['mean']}, min {r['min']} ({r['model']})")
            return 0
        if "recall_per_stack" in doc and "recall_tcp_model_baseline" not in doc:
            doc["recall_tcp_model_baseline"] = doc.pop("recall_per_stack")
        doc["recall_per_stack"] = quic_recall(args.classifier_root, args.model, args.trace_root)
        doc["recall_when"] = when
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        r = doc["recall_per_stack"]
        log(f"recall per stack: mean {r['mean']}, min {r['min']} ({r['model']})")
        return 0
    from ccscope.lab.lab import Lab, LabParams
    from ccscope.lab.quic.lab import resolve_servers
    from ccscope.lab.quic.registry import quic_server

    work = args.from_runs or args.work
    timing: dict[str, Any] = {}
    if args.from_runs is None:
        labels = resolve_servers(("all",))
        os.environ["CCSCOPE_LAB_DIR"] = str(args.state_dir)
        lab = Lab(args.state_dir)
        lab.up(LabParams(delay_ms=DELAY_MS, ccas=("cubic",), instance=INSTANCE, quic=labels), timeout=60)
        try:
            for label in labels:
                host = quic_server(label).hostname
                for run in range(args.runs):
                    out = work / label.replace(":", "-") / f"run{run}"
                    if (out / "measurement.json").exists():
                        continue
                    log(f"{label} run {run}")
                    measure(
                        f"https://{host}/obj/{OBJECT}",
                        ("A", "B"),
                        out,
                        lab=True,
                        timeout=120,
                        transport="quic",
                    )
            timing = measure_timing(work)
            # keeping the rate instead of the packets per RTT: MTU 1280 at 200 kbit/s
            out = work / "rate-quiche-cubic"
            if not (out / "measurement.json").exists():
                log("A-quic-rate, quiche:cubic")
                measure(
                    f"https://{host}/obj/500000",
                    ("A-quic-rate",),
                    out,
                    lab=True,
                    timeout=180,
                    transport="quic",
                )
        finally:
            lab.down()
        (work / "timing.json").write_text(json.dumps(timing))
    elif (work / "timing.json").exists():
        timing = json.loads((work / "timing.json").read_text())

    rows: list[dict[str, Any]] = []
    verdicts: dict[str, list[str]] = {}
    for mdir in sorted(work.glob("*-*/run*")):
        rs = score_dir(mdir)
        rows += rs
        stack = next((r["stack"] for r in rs if r.get("stack")), None)
        if stack:
            verdicts.setdefault(stack, []).append(classify_dir(mdir))
    rate_rows = (
        score_dir(work / "rate-quiche-cubic")
        if (work / "rate-quiche-cubic" / "measurement.json").exists()
        else []
    )
    s = summarise(rows, verdicts)
    allv = s["all"]
    doc = {
        "bench": "quic",
        "machine": platform.node(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "setup": {
            "internet_delay_ms": DELAY_MS,
            "object_bytes": OBJECT,
            "runs": args.runs,
            "profiles": ["A-quic", "B-quic"],
            "grid_ms": 1,
            "alignment": "sender",
        },
        "bif_mae_pct_bdp": round(statistics.mean(allv), 2) if allv else None,
        "bif_mae_pct_bdp_max": round(max(allv), 2) if allv else None,
        "bif_mae_pct_bdp_target": TARGET_PCT,
        "bif_mae_pct_bdp_link": _mean(rows, "bif_mae_pct_bdp_link", 2),
        "bif_mae_pct_bdp_published": _mean(rows, "bif_mae_pct_bdp_published", 1),
        "per_stack": s["per_stack"],
        "measure_s": timing,
        "rate_kept_instead_of_packets": rate_rows,
        "recall_per_stack": quic_recall(args.classifier_root, args.model),
        "recall_tcp_model_baseline": {
            "what": "BASELINE: the TCP-trained classes; right = it names the TCP family the stack's "
            "CCA implements",
            "classifier": _classifier_version(),
            **s["recall"],
        },
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"bif_mae_pct_bdp {doc['bif_mae_pct_bdp']} (published {doc['bif_mae_pct_bdp_published']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
