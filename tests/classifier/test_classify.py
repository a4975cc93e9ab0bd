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
from tests.classifier.conftest import CCAS, CLASS_OF, VARIANT, cli, fixture_path

FLOW = FlowKey("198.18.4.12", 443, "10.0.0.2", 40000)


def test_model_is_shipped_and_loads() -> None:
    m = Model.load()
    assert DEFAULT_MODEL.exists() and {CLASS_OF.get(c, c) for c in CCAS} <= set(m.classes)
    assert m.training["traces_per_class"] and m.version.startswith("ccscope-")


@pytest.mark.parametrize("cca", CCAS)
def test_fixture_pairs_are_recognised(cca: str, traces: dict[tuple[str, str], Trace]) -> None:
    v = classify([traces[(cca, "A")], traces[(cca, "B")]])
    assert v.kind == "cca" and v.label == CLASS_OF.get(cca, cca), v.explanation
    assert 0.0 < v.confidence <= 1.0 and v.explanation and v.evidence["traces"]


def test_reno_and_veno_are_told_apart(traces: dict[tuple[str, str], Trace]) -> None:
    """Veno halves like Reno after a congestive loss; with SACK the traces hold congestion
    avoidance again, where Veno grows half as fast once its queue estimate passes beta."""
    reno = classify([traces[("reno", "A")], traces[("reno", "B")]])
    veno = classify([traces[("veno", "A")], traces[("veno", "B")]])
    assert (reno.label, veno.label) == ("reno/dctcp", "veno")
    assert "congestion avoidance" not in reno.explanation + veno.explanation


@pytest.mark.parametrize("profile", ["A", "B"])
@pytest.mark.parametrize("cca", CCAS)
def test_single_profile_is_enough(cca: str, profile: str, traces: dict[tuple[str, str], Trace]) -> None:
    """One trace (an imported Nebby CSV, a measurement whose other profile failed) still names
    the CCA: the forest also learnt from each profile alone."""
    v = classify([traces[(cca, profile)]])
    assert v.kind == "cca" and v.label == CLASS_OF.get(cca, cca), v.explanation


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["param_limit"].update({"A|vegas": "x"}), "could not convert"),
        (lambda m: m["param_stats"].update({"A|vegas@d5": {"center": [1.0], "scale": [0.0]}}), "param_stats"),
        (lambda m: m.update({"rival_ratio": -1.0}), "rival_ratio"),
        (lambda m: m["pair_limit"].update({"bic": -2.0}), "pair_limit"),
        (lambda m: m["pair_limit"].update({"bic": "x"}), "could not convert"),
        (lambda m: m["class_stats"].update({"A|vegas": {"center": [1.0], "scale": [1.0]}}), "class_stats"),
        (lambda m: m["z_limit"].update({"A": [1.0]}), "z_limit"),
    ],
)
def test_damaged_model_file_is_refused(tmp_path: Path, change: Any, message: str) -> None:
    """The Unknown checks' references come from the model file: a damaged one is refused on
    load with the reason, not met mid-verdict."""
    doc = json.loads(DEFAULT_MODEL.read_text())
    change(doc)
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ModelError, match=message):
        Model.load(path)


def test_untrained_variant_is_unknown_and_names_its_family() -> None:
    """CUBIC with beta 0.5 (dataset.VARIANTS, never trained on) is no trained CCA: Unknown, with
    CUBIC as the nearest family and the deviating feature in the explanation."""
    v = classify([Trace.load(fixture_path(VARIANT, p)) for p in "AB"])
    assert v.kind == "unknown" and v.label == "unknown" and v.nearest == "CUBIC", v.explanation
    assert v.display == "unknown, CUBIC-like" and "further from cubic" in v.explanation


@pytest.mark.parametrize(
    ("variant", "family", "cls", "features"),
    [
        ("vegas-a6", "Vegas", "vegas", ("queue_eq", "queue_crest")),
        ("bbr3-g15", "BBR", "bbr3", ("pulse_top", "probe_slope")),
    ],
)
def test_parameter_variant_is_unknown_by_its_parameter(
    variant: str, family: str, cls: str, features: tuple[str, ...]
) -> None:
    """Vegas with alpha 6 and BBRv3 with a 1.5 probe gain look like their family in every other
    feature; the parameter checks name them Unknown by the features that carry the parameter
    (the settled queue and the most queue held; the time a probe holds its top and the rate it
    climbs at), each failing check in the explanation."""
    v = classify([Trace.load(fixture_path(variant, p)) for p in "AB"])
    assert v.kind == "unknown" and v.nearest == family, v.explanation
    for f in features:
        assert f"{f} in profile" in v.explanation, v.explanation
    assert f"outside what {cls} holds" in v.explanation


def test_parameter_limits_are_at_least_the_resolution() -> None:
    """Every shipped parameter check's limit is at least PARAM_MIN_LIMIT spreads (a one-sided
    check's LOCO maximum can be ~0); the BBR probe-rate checks are there for every BBR version
    in profile B, the early-growth checks for Illinois, Reno and Veno, Vegas's held queue."""
    from ccscope.classifier.model import PARAM_MIN_LIMIT

    m = Model.load()
    assert m.param_limit and min(m.param_limit.values()) >= PARAM_MIN_LIMIT
    for cls in ("bbr", "bbr2", "bbr3"):
        assert f"B|{cls}|probe_slope" in m.param_limit
    for cls in ("illinois", "reno/dctcp", "veno"):
        assert f"B|{cls}|early_growth" in m.param_limit
    assert "A|vegas|queue_crest" in m.param_limit and "B|vegas|queue_crest" in m.param_limit


def test_pair_test_names_the_pair(traces: dict[tuple[str, str], Trace]) -> None:
    """The pair test's limit comes from the model: a known BIC passes the shipped one, and with
    the limit cut below its own pair atypicality the same traces are Unknown, naming the two
    features and BIC as the nearest family."""
    pair = [traces[("bic", "A")], traces[("bic", "B")]]
    m = Model.load()
    v = classify(pair, m)
    assert v.kind == "cca" and v.label == "bic" and v.evidence["pair_excess"] <= 1.0
    m.pair_limit["bic"] = m.pair_limit["bic"] * v.evidence["pair_excess"] / 2
    u = classify(pair, m)
    assert u.kind == "unknown" and u.nearest == "BIC", u.explanation
    assert "fit no trained path of bic together" in u.explanation and "profile" in u.explanation


def test_confidence_floor_is_the_calibrated_one(traces: dict[tuple[str, str], Trace]) -> None:
    """The floor comes from LOCO folds (their 1st percentile, no longer capped at 0.3), and a
    measurement whose best class stays under it is Unknown with the probability named."""
    m = Model.load()
    assert 0.3 < m.min_confidence < 1.0
    pair = [traces[("veno", "A")], traces[("veno", "B")]]
    v = classify(pair, m)
    assert v.kind == "cca" and v.label == "veno" and v.confidence >= m.min_confidence
    m.min_confidence = min(1.0, v.confidence + 0.01)
    u = classify(pair, m)
    assert u.kind == "unknown" and u.nearest == "Reno", u.explanation
    assert "no class is likely enough (best: veno at" in u.explanation


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
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [v["verdict"]["label"] for v in doc["verdicts"]] == ["cubic"]
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
