"""The committed JSON Schemas describe the documents ccscope really writes: every fixture trace,
a trace converted from a capture, and verdicts of each kind (also as the store keeps them)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from ccscope.classifier.core import classify
from ccscope.trace import Trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def schema(name: str) -> dict:
    doc = json.loads(resources.files("ccscope").joinpath("schemas", name).read_text())
    jsonschema.Draft202012Validator.check_schema(doc)
    return doc


TRACE = schema("ccscope-trace-1.json")
VERDICT = schema("ccscope-verdict-1.json")


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.trace.json.gz")), ids=lambda p: p.name)
def test_fixture_traces_match_the_schema(path: Path) -> None:
    jsonschema.validate(Trace.load(path).to_dict(), TRACE)


def test_a_converted_capture_matches_the_schema(tmp_path: Path) -> None:
    from ccscope.capture.tcp_bif import flows_from_pcap
    from tests.capture.synth import bulk_flow, write_pcap

    pcap = write_pcap(tmp_path / "f.pcap", bulk_flow(n_data=500, loss=0.01).packets())
    for align in ("capture", "sender"):
        (t, *_rest) = flows_from_pcap(pcap, align=align).traces
        jsonschema.validate(json.loads(json.dumps(t.to_dict())), TRACE)


def test_verdicts_of_every_kind_match_the_schema() -> None:
    def load(name: str) -> list[Trace]:
        return [Trace.load(FIXTURES / f"{name}-d5-{p}.trace.json.gz") for p in "AB"]

    named = classify(load("cubic"))
    unknown = classify(load("vegas-a6"))
    short = load("cubic")[0]
    keep = short.t < short.t[0] + 0.5
    insufficient = classify(
        [Trace(short.flow, short.t[keep], short.bif[keep], short.start_time, profile=short.profile)]
    )
    assert (named.kind, unknown.kind, insufficient.kind) == ("cca", "unknown", "insufficient")
    for v in (named, unknown, insufficient):
        jsonschema.validate(json.loads(v.to_json()), VERDICT)
    bad = json.loads(named.to_json())
    bad["kind"] = "unknown"  # an unknown verdict must be labelled unknown
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, VERDICT)
    assert np.isfinite(named.confidence)
