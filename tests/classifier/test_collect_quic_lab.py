"""A small real QUIC collection: two draws (cross traffic behind an access shell with the
standard profiles; a drawn 100-byte-MTU profile behind an upstream bottleneck) × two QUIC
stacks, through one QUIC lab; traces, the qlog ground truth and the index come out, and a second
run measures nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccscope.classifier import conditions as c
from ccscope.classifier.collect import collect, job_dir, quic_adaptation
from ccscope.classifier.collected import load_index
from ccscope.classifier.train import load_samples
from ccscope.trace import Trace
from tests.classifier.conftest import lab_draw, space_draw
from tests.lab.lab_testkit import link_binary_or_skip, needs_root

pytestmark = [needs_root, pytest.mark.netns, pytest.mark.slow]
INSTANCE = 54  # bench/quic uses 53; the QUIC campaign command in classifier/README.md, 55
STATE_PREFIX = "/run/ccscope/lab-test-quic-draws-"
STACKS = ("quiche:cubic", "quicgo:reno")


def _draws() -> tuple[c.Draw, c.Draw]:
    drawn = space_draw(
        c.InternetPath(rtt_ms=10.0, loss=0.001),
        c.Placement(upstream_ratio=2.0, upstream_buffer_bdp=2.0),
        c.Server(object_bytes=60_000),
        rate_kbit=300.0,
        buffer_bdp=1.5,
        mtu=200,
    )
    return c.quic_draw(lab_draw(2.0, 40_000)), c.quic_draw(drawn)


def test_quic_draw_collection(tmp_path: Path) -> None:
    link_binary_or_skip()
    from ccscope.capture.quic_get import client_binary
    from ccscope.lab.quic.registry import available_servers

    try:
        client_binary()
    except Exception as e:
        pytest.skip(str(e))
    ok, why = available_servers()
    if not {"quiche:cubic", "quicgo:reno"} <= {s.label for s in ok}:
        pytest.skip(f"QUIC lab servers not built: {why}")
    shared, drawn = _draws()
    jobs = c.plan_quic_jobs([shared, drawn], STACKS)
    summ = collect(jobs, tmp_path, concurrency=4, instances=[INSTANCE], state_prefix=STATE_PREFIX,
                   progress=False)  # fmt: skip
    assert (summ.ok, summ.failed, summ.partial) == (4, 0, 0), summ
    idx = load_index(tmp_path)
    assert sorted(idx) == sorted(j.key for j in jobs)
    for j in jobs:
        rec = idx[j.key]
        ad = quic_adaptation(j.draw)
        assert rec["status"] == "ok" and rec["transport"] == "quic", rec.get("reason")
        assert (rec["label"], rec["is_variant"], rec["split"], rec["space"]) == (j.cca, False, "test", "full")
        assert c.Draw.from_dict(rec["draw"]) == j.draw
        assert rec["lateness_p99_us"] is not None
        job = json.loads((job_dir(tmp_path, j) / "job.json").read_text())
        assert job["quic"]["object_bytes"] == ad.object_bytes
        for slot, prof in zip(("A", "B"), ad.profiles, strict=True):
            s = rec["slots"][slot]
            assert s["profile"] == prof.name and not s["capped"] and s["bytes"] >= ad.object_bytes
            snd, truth = Trace.load(s["sender_trace"]), Trace.load(s["truth_trace"])
            assert snd.transport == "quic" and snd.alignment == "sender" and snd.profile["mtu"] == 1280
            # the truth in TCP's shape: the server's pipe on a 1 ms grid, the measured trace's profile
            assert truth.source == "lab-groundtruth" and truth.alignment == "sender" and len(truth.t) > 100
            assert truth.profile == snd.profile and truth.transport == "quic"
            assert {"bif_truth", "cwnd_bytes", "srtt_ms"} <= set(truth.columns)
            assert abs(float(truth.t[1] - truth.t[0]) - 0.001) < 1e-9 and truth.bif.max() > 0
            assert s["truth_cca"] == j.cca
            g = s["bif_error"]  # the encrypted estimate against the same qlog
            assert g is not None and g["cca"] == j.cca
            assert not list(job_dir(tmp_path, j).glob("*.sqlog"))  # raw qlogs are not kept
        if j.draw == shared:
            assert rec["cross_traffic"]["tcp_bytes"] > 10_000
            assert [p.name for p in ad.profiles] == ["A-quic", "B-quic"]
        else:
            assert snd.profile["down"]["rate"] == f"{round(300 * 1228 / 200)}kbit"
    # the lead's loader reads the records as they are
    samples, skipped = load_samples(tmp_path)
    assert not skipped and {s.label for s in samples} == set(STACKS)
    assert all(len(s.truth) == 2 and s.set == "quic_test" for s in samples)  # QUIC sets carry quic_
    # resumable: nothing is measured again
    lines = (tmp_path / "index.jsonl").read_text().count("\n")
    again = collect(jobs, tmp_path, concurrency=4, instances=[INSTANCE], state_prefix=STATE_PREFIX)
    assert again.skipped == 4 and (tmp_path / "index.jsonl").read_text().count("\n") == lines
