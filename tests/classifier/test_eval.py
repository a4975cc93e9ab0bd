"""`ccscope eval`'s scoring, the reference-features file and the committed evaluation."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ccscope.classifier import classify
from ccscope.classifier.core import summarise
from ccscope.classifier.model import DEFAULT_MODEL, Model
from ccscope.classifier.train import (
    DEFAULT_FEATURES,
    ReferenceFeaturesError,
    Sample,
    evaluate,
    headline,
    load_reference_features,
    save_reference_features,
)
from ccscope.trace import Trace
from tests.classifier.conftest import CCAS, CLASS_OF, cli, fixture_path, load

# The committed evaluation (`make bench NAME=classifier` rewrites it).
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


def _sample(cca: str, set_: str, variant: bool = False, label: str | None = None) -> Sample:
    paths = tuple(str(fixture_path(cca, p)) for p in "AB")
    return Sample(f"d5/{cca}/{set_}", cca, label or CLASS_OF.get(cca, cca), f"g-{cca}", set_, variant, paths)


def test_evaluate_scores_every_set_and_never_training() -> None:
    """Each evaluation set is scored apart; a variant is scored as a variant (Unknown is right
    for it); training measurements are never scored. The rates of known measurements add up."""
    model = Model.load()
    samples = [_sample(c, "unseen") for c in CCAS]
    samples.append(_sample("vegas", "variants", variant=True, label="vegas-a6"))
    samples.append(_sample("lp", "train"))
    summ = {p: summarise(Trace.load(p)) for s in samples for p in s.paths}
    res = evaluate(model, samples, summ)
    assert set(res) >= {"unseen", "variants"} and "train" not in res
    u = res["unseen"]
    assert u["measurements"] == len(CCAS) and len(u["predictions"]) == len(CCAS)
    rates = sum(u[f"{k}_rate"] for k in ("right", "unknown", "insufficient", "wrong"))
    assert rates == pytest.approx(1.0, abs=1e-3)
    m = u["confusion"]["matrix"]
    assert sum(map(sum, m)) == len(CCAS)
    assert res["variants"]["variants"]["measurements"] == 1
    h = headline(res)
    assert h["recall_unseen"] == u["mean_recall"] and h["wrong_known_unseen"] == u["wrong_rate"]
    for r in u["predictions"]:
        assert r["pred"] in (*model.classes, "unknown", "insufficient") and r["top1"] in model.classes


def test_shipped_features_reproduce_the_committed_figures(tmp_path: Path) -> None:
    """The reference traces stay on the lab machine; their summaries ship beside the model, and
    `ccscope eval` on them rewrites the committed evaluation byte for byte, whose figures are
    the benchmark's."""
    r = cli("eval", "--root", str(tmp_path / "no-traces"), "--out", str(tmp_path / "eval"))
    assert r.returncode == 0, r.stderr
    for name in ("eval.json", "eval.md"):
        assert (tmp_path / "eval" / name).read_bytes() == (EVAL_DIR / name).read_bytes(), name
    # the heat map's bytes depend on the matplotlib release as well: drawn, not compared
    assert (tmp_path / "eval" / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = json.loads((EVAL_DIR / "eval.json").read_text())
    bench = json.loads(BENCH_JSON.read_text())
    assert bench["model"] == res["model_version"] == Model.load().version
    assert bench["recall_unseen"] == res["unseen"]["mean_recall"]
    assert bench["wrong_known_unseen"] == res["unseen"]["wrong_rate"]


def test_reference_features_round_trip(tmp_path: Path) -> None:
    def sample(c: str, p: str) -> Sample:
        path = tmp_path / "d5" / c / "run0" / f"{p}.sender.trace.json"
        return Sample(f"d5/{c}/{p}", c, CLASS_OF.get(c, c), "d5", "train", False, (str(path),))

    samples = [sample(c, p) for c in CCAS[:3] for p in "AB"]
    summ = {s.paths[0]: summarise(load(s.cca, s.key[-1])) for s in samples}
    a = save_reference_features(samples, summ, tmp_path, tmp_path / "a.json.gz")
    back, bsumm = load_reference_features(a)
    # paths relative to the root, values exact (NaN included: compared as JSON text)
    assert [s.paths[0] for s in back] == sorted(str(Path(s.paths[0]).relative_to(tmp_path)) for s in samples)
    for s in samples:
        rel = str(Path(s.paths[0]).relative_to(tmp_path))
        assert json.dumps(bsumm[rel].to_dict()) == json.dumps(summ[s.paths[0]].to_dict())
    b = save_reference_features(samples, summ, tmp_path, tmp_path / "b.json.gz")
    assert a.read_bytes() == b.read_bytes()  # no time stamp in the gzip header


def _gz(tmp_path: Path, doc: object) -> Path:
    p = tmp_path / "ref.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
    return p


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d.update({"format": "other/1"}), "not a ccscope-reference-features/2"),
        (lambda d: d.update({"features": d["features"][:-1]}), "other features"),
        (lambda d: next(iter(d["summaries"].values())).update({"features": [1.0]}), "features mapping"),
        (
            lambda d: next(v for v in d["summaries"].values() if v["features"])["features"].popitem(),
            "one value",
        ),
        (lambda d: d["summaries"].pop(next(iter(d["summaries"]))), "have no summary"),
        (lambda d: d["samples"][0].pop("cca"), "damaged sample"),
        (lambda d: d["samples"][0].update({"paths": 5}), "damaged sample"),
    ],
)
def test_damaged_reference_features_are_refused(tmp_path: Path, damage: Any, message: str) -> None:
    doc = json.loads(gzip.decompress(DEFAULT_FEATURES.read_bytes()))
    doc["samples"] = doc["samples"][:4]
    keep = {p for s in doc["samples"] for p in (*s["paths"], *s["truth"])}
    doc["summaries"] = {p: doc["summaries"][p] for p in keep}
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
    out = tmp_path / "m"
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
    assert (out / DEFAULT_MODEL.name).read_bytes() == DEFAULT_MODEL.read_bytes()
    assert (tmp_path / "e" / "eval.json").read_bytes() == (EVAL_DIR / "eval.json").read_bytes()


def test_score_counts_unknowns_that_name_the_right_family() -> None:
    """An "unknown, CUBIC-like" verdict for a CUBIC server is a right family, one for BBR is not;
    a plain Unknown names none; named verdicts are not counted as family answers."""
    from ccscope.classifier.train import score

    def row(label: str, pred: str, nearest: str | None = None) -> dict[str, Any]:
        return {"label": label, "pred": pred, "top1": pred, "top1_naive_bayes": pred, "nearest": nearest,
                "variant": False}  # fmt: skip

    rows = [row("cubic", "unknown", "CUBIC"), row("bbr", "unknown", "CUBIC"), row("cubic", "unknown"),
            row("cubic", "cubic"), row("quiche:cubic", "unknown", "CUBIC")]  # fmt: skip
    s = score(rows, ["bbr", "cubic", "quiche:cubic"])
    assert s["family_named_rate"] == round(3 / 5, 4)
    assert s["family_right_rate"] == round(2 / 3, 4) and s["family_right_ci"] is not None
    assert score([row("cubic", "cubic")], ["cubic"])["family_right_rate"] is None
