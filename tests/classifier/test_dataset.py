"""The reference set's bookkeeping: the plan, the fixture run, rebuilding traces from pcaps."""

from __future__ import annotations

import json
from pathlib import Path

from ccscope.capture.tcp_bif import flows_from_pcap
from ccscope.classifier import dataset
from ccscope.trace import Trace
from tests.capture.synth import sack_loss_flow, write_pcap


def test_plan_holds_every_trained_cca_variants_and_the_fixture_run() -> None:
    ccas = ("reno", "cubic", "bbr")
    p = dataset.plan(ccas=ccas)
    d5 = p[dataset.FIXTURE_CONDITION]
    runs = next(c.runs for c in dataset.CONDITIONS if c.name == dataset.FIXTURE_CONDITION)
    assert {(j.cca, j.run) for j in d5 if j.run == runs} == {(c, runs) for c in ccas}
    heldout = next(c for c in dataset.CONDITIONS if c.split == "heldout")
    jobs = p[heldout.name]
    assert {j.run for j in jobs if j.cca == "reno"} == set(range(dataset.RUNS_HELDOUT))
    assert {j.cca for j in jobs} >= set(dataset.VARIANTS)


def test_retrace_rebuilds_traces_from_their_pcaps(tmp_path: Path) -> None:
    """After a change to the capture code (here: a trace written before SACK was tracked),
    `ccscope train --retrace` rewrites each trace from its pcap and keeps the run's provenance."""
    out = tmp_path / "d5" / "reno" / "run0"
    out.mkdir(parents=True)
    pcap = write_pcap(out / "A.pcap", sack_loss_flow().packets())
    old = flows_from_pcap(pcap).main
    old.columns = {}  # as the capture code wrote it before
    old.extra.update({"run_id": "abc123", "fetch": {"ok": True}})
    old.partial = True
    cap_f, snd_f = old.save(out / "A.trace.json"), old.save(out / "A.sender.trace.json")
    run = {"profile": "A", "pcap_file": str(pcap), "trace_file": str(cap_f), "sender_trace_file": str(snd_f)}
    job = {"condition": "d5", "cca": "reno", "run": 0}
    rec = {"job": job, "runs": [run], "condition": {"split": "train"}}
    (tmp_path / "index.jsonl").write_text(json.dumps(rec) + "\n")

    assert dataset.retrace(tmp_path) == 2
    for f, align in ((cap_f, "capture"), (snd_f, "sender")):
        t = Trace.load(f)
        assert "sacked" in t.columns and t.alignment == align
        assert t.extra["run_id"] == "abc123" and t.extra["fetch"] == {"ok": True} and t.partial
    assert dataset.retrace(tmp_path / "nothing-here") == 0
