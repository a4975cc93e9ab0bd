"""The committed JSON Schemas describe the documents ccscope really writes: every fixture trace,
a trace converted from a capture, and verdicts of each kind (also as the store keeps them)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from ccscope.trace import Trace
from ccscope.verdict import Verdict

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
    # The classifier's own verdicts on the fixture traces (tests/fixtures/verdicts.json.gz, its
    # output as it was made: `python -m tests.dashboard.seed` rewrites it), one of each kind.
    from tests.dashboard.seed import CCAS, traces_of

    made = [traces_of(c)[1] for c in CCAS]
    made.append(
        Verdict.insufficient("the trace lasts 0.50 s, under 10 round trips", made[0].classifier_version)
    )
    assert {v.kind for v in made} == {"cca", "unknown", "insufficient"}
    for v in made:
        jsonschema.validate(json.loads(v.to_json()), VERDICT)
    bad = json.loads(made[0].to_json())
    bad["kind"] = "unknown"  # an unknown verdict must be labelled unknown
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, VERDICT)
