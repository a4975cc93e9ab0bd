"""The public entry and the CLI: verdicts, determinism, bad input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ccscope.classifier import classify
from ccscope.classifier.cli import load_traces
from ccscope.classifier.model import DEFAULT_MODEL, Model, ModelError
from ccscope.errors import CCScopeError
from ccscope.trace import FlowKey, Trace
from tests.classifier.conftest import CCAS, CLASS_OF, cli, fixture_path

FLOW = FlowKey("198.18.4.12", 443, "10.0.0.2", 40000)


def test_model_is_shipped_and_loads() -> None:
    m = Model.load()
    assert DEFAULT_MODEL.exists() and {CLASS_OF.get(c, c) for c in CCAS} <= set(m.classes)
    assert m.training["sets"]["train"] > 0 and m.version.startswith("ccscope-")
    est = m.estimator
    assert est.get_params()["max_wrong"] == est.max_wrong and set(est.rules_) >= {"uncertain", "ambiguous"}


def test_fixture_pairs_are_named_right_or_unknown(traces: dict[tuple[str, str], Trace]) -> None:
    """The lab fixtures (nine CCAs on a 5 ms path, never trained on): what the model names is
    right within its error budget (3 % of named verdicts: at most one of nine here); what it
    cannot name is Unknown with a reason, never a bare guess."""
    wrong = []
    for cca in CCAS:
        v = classify([traces[(cca, "A")], traces[(cca, "B")]])
        assert v.kind in ("cca", "unknown"), v.display
        assert v.explanation and v.evidence["traces"] and v.evidence["top_classes"]
        if v.kind == "cca":
            assert 0.0 < v.confidence <= 1.0
            if v.label != CLASS_OF.get(cca, cca):
                wrong.append((cca, v.label))
        else:
            assert v.evidence["unknown_because"], v.explanation
    assert len(wrong) <= 1, wrong


def test_uncertain_gate_makes_unknown_and_says_why(traces: dict[tuple[str, str], Trace]) -> None:
    """The selective gate comes from the model file: with it shut (no estimated chance of being
    right passes) the same traces are Unknown, naming the best class, its probability, that
    chance and the error budget."""
    pair = [traces[("cubic", "A")], traces[("cubic", "B")]]
    m = Model.load()
    shut = {"tau": 1.01, "tau_family": 1.01}
    m.estimator.rules_["uncertain"] = {**m.estimator.rules_["uncertain"], **shut}
    u = classify(pair, m)
    assert u.kind == "unknown" and u.nearest is None and u.display == "unknown"
    assert "not sure enough" in u.explanation and "97%" in u.explanation
    m.estimator.rules_["uncertain"] = {**m.estimator.rules_["uncertain"], "tau_family": 0.0}
    f = classify(pair, m)
    assert f.kind == "unknown" and f.nearest and f.display == f"unknown, {f.nearest}-like"


def test_selective_threshold_keeps_the_error_budget() -> None:
    """The gate is the lowest probability whose accepted set is wrong at most the budget,
    counted with one extra error."""
    from ccscope.classifier.rules.uncertain import NEVER, selective_threshold

    p = [0.99] * 60 + [0.9] * 20 + [0.6] * 80
    right = [True] * 60 + [True] * 19 + [False] + [True] * 55 + [False] * 25
    tau, cover = selective_threshold(p, right, 0.03)
    assert tau == 0.9 and cover == 0.5  # (1 + 1) / 81 <= 0.03 < (26 + 1) / 161
    assert selective_threshold([0.5, 0.4], [False, True], 0.03)[0] == NEVER


def test_rightness_is_learnt_per_named_class() -> None:
    """A class the forest names at modest probabilities but always rightly passes the gate
    where a class named confidently but often wrongly (the sink for shapeless traces) does not:
    the gate reads the chance of being right per named class, not the raw probability."""
    from ccscope.classifier.rules.uncertain import RightnessModel, draw_folds, selective_threshold

    rng = np.random.default_rng(7)
    n = 400
    sharp = rng.uniform(0.35, 0.6, n)  # class 0: named at 35-60 %, right every time
    sink = rng.uniform(0.6, 0.95, n)  # class 1: named at 60-95 %, right only above 90 %
    proba = np.zeros((2 * n, 3))  # the rest of each row's mass on the two other classes
    proba[:n, 0], proba[:n, 1], proba[:n, 2] = sharp, (1 - sharp) / 2, (1 - sharp) / 2
    proba[n:, 1], proba[n:, 0], proba[n:, 2] = sink, (1 - sink) / 2, (1 - sink) / 2
    right = np.r_[np.ones(n, bool), sink > 0.9]
    strata = ["sack-large"] * (2 * n)
    m = RightnessModel(["a", "b", "c"], ridge=1.0).fit(proba, strata, right)
    est = m.predict(proba, strata)
    tau, _ = selective_threshold(est.tolist(), right.tolist(), 0.03)
    assert (est[:n] >= tau).mean() > 0.9  # the sharp class is named
    assert (est[n:][sink < 0.85] >= tau).sum() == 0  # the sink is not, at 60-85 %
    # the probability alone would have to shut out nearly all of the sharp class
    tau_p, _ = selective_threshold(proba.max(axis=1).tolist(), right.tolist(), 0.03)
    assert (sharp >= tau_p).mean() < 0.1
    # the model round-trips through the model file's JSON
    back = RightnessModel.from_dict(["a", "b", "c"], m.to_dict()).predict(proba, strata)
    assert np.allclose(back, est, atol=1e-4)
    # cross-fitting folds keep a network draw's measurements together
    f = draw_folds(["d1", "d1", "d2", "d3", "d2"], 2, seed=1)
    assert f[0] == f[1] and f[2] == f[4]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["estimators"]["tcp"]["temperature"].update({"1": -1.0}), "temperature"),
        (lambda m: m["estimators"]["tcp"]["params"].update({"zz": 1}), "unknown estimator parameters"),
        (lambda m: m["estimators"]["tcp"]["train_y"].append(99), "match"),
        (lambda m: m["estimators"].pop("tcp"), "no TCP estimator"),
        (lambda m: m.update({"format": "x"}), "not a ccscope-model/2"),
        (lambda m: m.update({"classifier_version": "0.1"}), "retrain"),
        (lambda m: m["estimators"]["tcp"]["rules"].pop("atypical"), "atypical"),
        (lambda m: m["estimators"]["tcp"]["rules"]["uncertain"].pop("rightness"), "uncertain"),
        (
            lambda m: m["estimators"]["tcp"]["rules"]["uncertain"]["rightness"]["class"].update(
                {"cubic": [1]}
            ),
            "uncertain",
        ),
    ],
)
def test_damaged_model_file_is_refused(tmp_path: Path, change: Any, message: str) -> None:
    """A damaged model file is refused on load with the reason, not met mid-verdict."""
    doc = json.loads(DEFAULT_MODEL.read_text())
    change(doc)
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ModelError, match=message):
        Model.load(path)


def test_same_input_same_bytes(traces: dict[tuple[str, str], Trace]) -> None:
    a = classify([traces[("bbr3", "A")], traces[("bbr3", "B")]]).to_json()
    b = classify([Trace.load(fixture_path("bbr3", "A")), Trace.load(fixture_path("bbr3", "B"))]).to_json()
    assert a == b


def test_same_bytes_across_processes() -> None:
    code = (
        "import sys; from ccscope.classifier import classify; from ccscope.trace import Trace;"
        "print(classify([Trace.load(p) for p in sys.argv[1:]]).to_json())"
    )
    files = [str(fixture_path("cubic", p)) for p in "AB"]
    outs = {subprocess.run([sys.executable, "-c", code, *files], capture_output=True, text=True,
                           check=True).stdout for _ in range(2)}  # fmt: skip
    assert len(outs) == 1


def _synthetic(t: np.ndarray, bif: np.ndarray, like: Trace) -> Trace:
    return Trace(flow=FLOW, t=t, bif=bif, start_time=0.0, profile=like.profile,
                 base_rtt_ms=like.base_rtt_ms, internet_rtt_ms=like.internet_rtt_ms)  # fmt: skip


def test_empty_trace_is_insufficient(traces: dict[tuple[str, str], Trace]) -> None:
    v = classify([_synthetic(np.zeros(0), np.zeros(0), traces[("cubic", "A")])])
    assert v.kind == "insufficient" and "empty" in (v.reason or "")
    assert classify([]).kind == "insufficient"


def test_short_trace_is_insufficient(traces: dict[tuple[str, str], Trace]) -> None:
    t = traces[("cubic", "A")]
    keep = t.t < 0.8
    v = classify([_synthetic(t.t[keep], t.bif[keep], t)])
    assert v.kind == "insufficient" and v.label == "insufficient data"


def test_slow_start_only_is_insufficient(traces: dict[tuple[str, str], Trace]) -> None:
    t = traces[("cubic", "A")]
    first_loss = min(t.events["retransmit"])
    keep = t.t < first_loss - 0.05
    v = classify([_synthetic(t.t[keep], t.bif[keep], t)])
    assert v.kind == "insufficient", v.display


def test_application_limited_is_insufficient(traces: dict[tuple[str, str], Trace]) -> None:
    like = traces[("cubic", "A")]
    t = np.arange(0, 20, 0.004)
    bif = np.where((t * 4) % 1 < 0.1, 96, 0)  # two segments in flight a tenth of the time
    v = classify([_synthetic(t, bif, like)])
    assert v.kind == "insufficient" and v.reason and "application-limited" in v.reason


def test_malformed_files_raise_clear_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.trace.json"
    bad.write_text("{not json")
    with pytest.raises(CCScopeError, match="cannot read trace"):
        load_traces(str(bad))
    gz = tmp_path / "bad.trace.json.gz"
    gz.write_bytes(gzip.compress(json.dumps({"format": "something else"}).encode()))
    with pytest.raises(CCScopeError, match="not a ccscope-trace"):
        load_traces(str(gz))
    with pytest.raises(CCScopeError, match="no such file"):
        load_traces(str(tmp_path / "missing.json"))


def test_cli_classify_json_and_errors(tmp_path: Path) -> None:
    r = cli("classify", "--json", str(fixture_path("cubic", "A")), str(fixture_path("cubic", "B")))
    doc = json.loads(r.stdout)
    (label,) = [v["verdict"]["label"] for v in doc["verdicts"]]
    assert (r.returncode, label) in ((0, "cubic"), (5, "unknown")), r.stderr
    bad = tmp_path / "x.trace.json"
    bad.write_text("[]")
    r = cli("classify", str(bad))
    assert r.returncode == 1 and "error" in r.stderr and "Traceback" not in r.stderr


def test_pcap_and_nebby_csv_inputs(tmp_path: Path) -> None:
    """Both capture formats reach a verdict through the same path as trace files."""
    from tests.capture.synth import bulk_flow, flow_csv, write_pcap

    f = bulk_flow(n_data=3000, loss=0.01)
    pcap = write_pcap(tmp_path / "f.pcap", f.packets())
    csv = tmp_path / "f.csv"
    csv.write_text(flow_csv(f))
    for path in (pcap, csv):
        (tr,) = load_traces(str(path))
        v = classify([tr])
        assert v.kind in ("cca", "unknown", "insufficient") and v.explanation
        r = cli("classify", "--json", str(path))
        assert r.returncode in (0, 5, 6)
        assert json.loads(r.stdout)["verdicts"][0]["verdict"]["format"] == "ccscope-verdict/1"
