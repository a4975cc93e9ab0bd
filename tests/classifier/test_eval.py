"""`ccscope eval`'s scoring on the committed lab traces: confusion, recall, Unknown trade-off."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ccscope.classifier import classify
from ccscope.classifier.core import summarise
from ccscope.classifier.dataset import Sample
from ccscope.classifier.model import DEFAULT_MODEL, Model
from ccscope.classifier.train import (
    DEFAULT_FEATURES,
    UNKNOWN_LIMIT_SCALES,
    ReferenceFeaturesError,
    Unit,
    evaluate,
    load_reference_features,
    save_reference_features,
    unknown_tradeoff,
)
from ccscope.trace import Trace
from tests.classifier.conftest import CCAS, CLASS_OF, cli, fixture_path, load

# The committed evaluation (`ccscope eval --out bench/classifier/eval` rewrites it).
EVAL_DIR = Path(__file__).resolve().parents[2] / "bench" / "classifier" / "eval"
BENCH_JSON = EVAL_DIR.parent.parent / "results" / "classifier.json"


def _recovery_to_the_end() -> Trace:
    """A SACK-less download as the published profiles make it: slow start overshoots, then one
    hole is repaired per round trip until the transfer ends (BiF creeps up on duplicate ACKs)."""
    like = load("reno", "A")
    t = np.arange(0.0, 30.0, 0.004)
    bif = np.where(t < 1.5, 100 * np.exp(t * 2.5), 4000 + 10 * (t - 1.5)).astype(np.int64)
    retx = np.arange(1.5, 29.9, 0.14)
    dup = np.arange(1.5, 29.9, 0.02)
    return Trace(flow=like.flow, t=t, bif=bif, start_time=0.0, profile=like.profile,
                 base_rtt_ms=like.base_rtt_ms, internet_rtt_ms=like.internet_rtt_ms,
                 events={"retransmit": retx.tolist(), "dupack": dup.tolist()})  # fmt: skip


def test_congestion_avoidance_is_told_apart_from_a_recovery_to_the_end() -> None:
    # with SACK (the standard profiles) both of Reno's traces recover and grow again; a
    # SACK-less recovery that lasts to the end of the download shows no growth at all
    for prof in "AB":
        assert summarise(load("reno", prof)).has_congestion_avoidance
        assert "congestion avoidance" not in classify([load("reno", prof)]).explanation
    rec = summarise(_recovery_to_the_end())
    assert rec.insufficient is None and not rec.has_congestion_avoidance
    v = classify([_recovery_to_the_end()])
    assert "No trace holds a clean stretch of congestion avoidance" in v.explanation


def test_evaluate_scores_held_out_pairs_and_variants() -> None:
    model = Model.load()
    summ, us = {}, []
    for cca in CCAS:
        paths = [str(fixture_path(cca, p)) for p in "AB"]
        for path, p in zip(paths, "AB", strict=True):
            summ[path] = summarise(load(cca, p))
        us.append(Unit(("d5", cca, 2), CLASS_OF.get(cca, cca), cca, "d5", "heldout_runs", paths))
    # a trained CCA's pair standing in for an untrained variant: scored apart from the known ones
    us.append(Unit(("d5", "vegas-a6", 2), "vegas-a6", "vegas-a6", "d5", "variants", us[5].paths))
    # training units are never scored
    us.append(Unit(("d5", "lp", 0), "lp", "lp", "d5", "train", us[6].paths))

    res = evaluate(model, us, summ)

    hr = res["heldout_runs"]
    assert hr["units"] == len(CCAS) and res["variants"]["units"] == 1
    assert hr["mean_recall"] == 1.0 and hr["unknown_rate"] == 0.0  # every pair is named (test_classify)
    m = hr["confusion"]["matrix"]
    assert sum(map(sum, m)) == len(CCAS)
    assert all(m[i][i] == 1 for i, c in enumerate(hr["confusion"]["rows"]) if hr["per_class"][c]["n"])
    assert res["variants"]["per_variant"]["vegas-a6"]["predicted"] == {"vegas": 1}
    by_ca = hr["by_congestion_avoidance"]
    assert by_ca["with"]["units"] == len(CCAS) and by_ca["without"]["units"] == 0
    for r in hr["predictions"]:
        assert r["unknown_excess"] is not None and r["unknown_excess"] <= 1.0 and not r["low_confidence"]

    trade = unknown_tradeoff(res)
    assert [t["limit_scale"] for t in trade] == list(UNKNOWN_LIMIT_SCALES)
    at1 = next(t for t in trade if t["limit_scale"] == 1.0)
    # the calibrated limits reproduce evaluate's own verdicts (no detector veto fired here)
    assert at1["unknown_rate_known"] == hr["unknown_rate"] and at1["known_named_correctly"] == 1.0
    rates = [t["unknown_rate_known"] for t in trade]
    assert rates == sorted(rates, reverse=True)  # looser limits never flag more


def test_shipped_features_reproduce_the_committed_figures(tmp_path: Path) -> None:
    """The reference traces stay on the lab machine; their summaries ship beside the model, and
    `ccscope eval` on them rewrites the committed evaluation byte for byte, whose figures are
    the benchmark's."""
    r = cli("eval", "--root", str(tmp_path / "no-traces"), "--out", str(tmp_path / "eval"))
    assert r.returncode == 0, r.stderr
    assert "evaluating on their shipped summaries" in r.stderr
    for name in ("eval.json", "eval.md"):
        assert (tmp_path / "eval" / name).read_bytes() == (EVAL_DIR / name).read_bytes(), name
    # the heat map's bytes depend on the matplotlib release as well: drawn, not compared
    assert (tmp_path / "eval" / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = json.loads((EVAL_DIR / "eval.json").read_text())
    bench = json.loads(BENCH_JSON.read_text())
    assert bench["model"] == res["model_version"] == Model.load().version
    assert bench["recall_heldout_runs"] == res["heldout_runs"]["mean_recall"]
    assert bench["recall_heldout_conditions"] == res["heldout_conditions"]["mean_recall"]
    assert bench["unknown_rate_variants"] == res["variants"]["unknown_rate"]
    assert bench["unknown_rate_known"] == res["unknown_rate_known"]


def test_reference_features_round_trip(tmp_path: Path) -> None:
    def sample(c: str, p: str) -> Sample:
        path = tmp_path / "d5" / c / "run0" / f"{p}.sender.trace.json"
        return Sample(str(path), c, CLASS_OF.get(c, c), "d5", "train", 0, p, False)

    samples = [sample(c, p) for c in CCAS[:3] for p in "AB"]
    summ = {s.path: summarise(load(s.cca, s.profile)) for s in samples}
    a = save_reference_features(samples, summ, tmp_path, tmp_path / "a.json.gz")
    back, bsumm = load_reference_features(a)
    # paths relative to the root, values exact (NaN included: compared as JSON text)
    assert [s.path for s in back] == sorted(str(Path(s.path).relative_to(tmp_path)) for s in samples)
    for s in samples:
        rel = str(Path(s.path).relative_to(tmp_path))
        assert json.dumps(bsumm[rel].to_dict()) == json.dumps(summ[s.path].to_dict())
    b = save_reference_features(samples, summ, tmp_path, tmp_path / "b.json.gz")
    assert a.read_bytes() == b.read_bytes()  # no time stamp in the gzip header


def _gz(tmp_path: Path, doc: object) -> Path:
    p = tmp_path / "ref.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
    return p


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d.update({"format": "other/1"}), "not a ccscope-reference-features/1"),
        (lambda d: d.update({"features": d["features"][:-1]}), "other features"),
        (lambda d: next(iter(d["summaries"].values())).update({"features": [1.0]}), "one value per"),
        (lambda d: d["summaries"].pop(next(iter(d["summaries"]))), "have no summary"),
        (lambda d: d["samples"][0].pop("cca"), "damaged sample"),
        (lambda d: d["samples"][0].update({"run": "x"}), "damaged sample"),
    ],
)
def test_damaged_reference_features_are_refused(tmp_path: Path, damage: Any, message: str) -> None:
    doc = json.loads(gzip.decompress(DEFAULT_FEATURES.read_bytes()))
    doc["samples"] = doc["samples"][:4]
    doc["summaries"] = {s["path"]: doc["summaries"][s["path"]] for s in doc["samples"]}
    damage(doc)
    with pytest.raises(ReferenceFeaturesError, match=message):
        load_reference_features(_gz(tmp_path, doc))


def test_eval_on_a_garbage_features_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.json.gz"
    bad.write_bytes(b"\x1f\x8b not really gzip")
    r = cli("eval", "--features", str(bad), "--out", str(tmp_path / "eval"))
    assert r.returncode == 1 and "not a readable gzip'd JSON document" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "eval").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)  # ~5 CPU minutes: on a shared 2-core box that is past the 300 s default
def test_refit_on_shipped_features_reproduces_the_shipped_model(tmp_path: Path) -> None:
    """The artifact is what the code fits on the reference set: refitting on the shipped
    summaries (no traces, no lab) rewrites the shipped model file byte for byte (~3 min)."""
    out = tmp_path / "model.json"
    r = cli(
        "train",
        "--from-features",
        str(DEFAULT_FEATURES),
        "--out",
        str(out),
        "--eval-out",
        str(tmp_path / "e"),
    )
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == DEFAULT_MODEL.read_bytes()
    assert (tmp_path / "e" / "eval.json").read_bytes() == (EVAL_DIR / "eval.json").read_bytes()


def test_fresh_bench_peer_and_empty_root(tmp_path: Path) -> None:
    """bench/classifier_fresh reads its peer figures (the shipped model on the reference set's
    measurements of the same plan) from the shipped summaries: the committed JSON carries the
    same numbers and the same model; its headline pools the batches no rule was chosen by, with
    Wilson intervals. Without fresh measurements it says so and fails, as it does when asked
    for a root without naming the batch it holds."""
    bench = EVAL_DIR.parent.parent / "classifier_fresh" / "run.py"
    spec = importlib.util.spec_from_file_location("classifier_fresh_bench", bench)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    committed = json.loads((EVAL_DIR.parent.parent / "results" / "classifier_fresh.json").read_text())
    assert committed["model"] == Model.load().version
    assert mod.reference_peer(Model.load()) == committed["reference_set"]
    out = tmp_path / "o.json"
    argv = [
        sys.executable,
        str(bench),
        "--no-measure",
        "--batch",
        "2",
        "--root",
        str(tmp_path),
        "--out",
        str(out),
    ]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "no fresh measurements" in r.stderr and not out.exists()
    r = subprocess.run(argv[:3] + argv[5:], capture_output=True, text=True, timeout=300)  # --root, no --batch
    assert r.returncode == 2 and "give --batch too" in r.stderr and not out.exists()
    # the headline's interval: 74 of 80 is 0.846-0.965 (Wilson), nothing measured is no interval
    assert mod.wilson(74, 80) == [0.8459, 0.9652] and mod.wilson(0, 0) is None
    heads = committed["headline_batches"]
    assert heads == [b for b in sorted(mod.BATCHES) if b in mod.UNSEEN_BATCHES]
    n = sum(committed["batches"][str(b)]["variants_fresh"] for b in heads)
    assert committed["variants_fresh"] == n
