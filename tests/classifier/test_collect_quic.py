"""QUIC jobs of the draw runner and the QUIC reference plan, without a lab: how a draw is adapted
(in packets), which lab serves it, what its index record says, and that TCP jobs are untouched."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from ccscope.classifier import conditions as c
from ccscope.classifier.collect import (
    _record,
    estimate_s,
    group_key,
    job_cost,
    job_dir,
    measured_internet_link,
    measured_layers,
    object_url,
    quic_adaptation,
    run_cli,
)
from ccscope.classifier.reference import N_RUNS_QUIC, N_TRAIN_QUIC, N_UNSEEN_QUIC, QUIC_OFFSET, quic_plan
from ccscope.classifier.train import sample_set
from ccscope.lab.quic.registry import QUIC_SERVERS
from ccscope.profile import first_rate_bps

LABELS = tuple(s.label for s in QUIC_SERVERS)


def _upstream_draw() -> c.Draw:
    d = next(x for x in c.draws(400) if x.profile.kind == "space" and x.profile.mtu < 400
             and x.placement.upstream_ratio and x.placement.access and x.sharing.rate_mbit)  # fmt: skip
    return c.quic_draw(d)


def test_a_quic_draw_keeps_only_what_the_quic_servers_take() -> None:
    d = next(x for x in c.draws(200) if x.server.program == "nginx" and x.server.app_limit is None)
    q = c.quic_draw(replace(d, server=replace(d.server, app_limit=0.5, initcwnd=64, mss=536)))
    assert q.server == c.Server(object_bytes=d.server.object_bytes)
    assert (q.path, q.sharing, q.placement, q.seed) == (d.path, d.sharing, d.placement, d.seed)
    assert q.profile.sack or q.profile.kind != "space"
    job = c.DrawJob(q, "quiche:cubic")
    assert job.transport == "quic" and c.DrawJob(d, "cubic").transport == "tcp"


def test_standard_profiles_become_a_quic_and_b_quic() -> None:
    d = c.quic_draw(c.sample("full", "train", 0, fixed=["profile"]))
    ad = quic_adaptation(d)
    assert [p.name for p in ad.profiles] == ["A-quic", "B-quic"]
    assert all(p.mtu == 1280 for p in ad.profiles)
    assert ad.scale == pytest.approx(12.28, abs=0.01)
    # the object spans as many packets (and round trips) as the TCP one
    assert ad.object_bytes == pytest.approx(d.server.object_bytes * ad.scale, rel=0.01)
    job = c.DrawJob(d, "aioquic:reno")
    assert object_url(job) == f"https://reno.aioquic.lab.test/obj/{ad.object_bytes}"
    assert job_dir(Path("/x"), job) == Path(f"/x/{d.id}/aioquic-reno/run0")


def test_every_rate_the_quic_packets_meet_scales_with_them() -> None:
    d = _upstream_draw()
    job = c.DrawJob(d, "quiche:bbr2")
    ad = quic_adaptation(d)
    assert ad.scale > 3 and ad.profiles[0].mtu == 1280
    tcp_l, q_l = d.layers(), measured_layers(job)
    assert [p.name for p in q_l] == [p.name for p in tcp_l]
    for t, q in zip(tcp_l, q_l, strict=True):
        bps = first_rate_bps(t.down.rate)
        if bps is not None:
            assert first_rate_bps(q.down.rate) == pytest.approx(bps * ad.scale, rel=1e-4)
        assert (q.down.delay_ms, q.down.jitter_ms) == (t.down.delay_ms, t.down.jitter_ms)
    up_t, up_q = tcp_l[0], q_l[0]
    assert int(up_q.down.buffer[:-1]) == pytest.approx(int(up_t.down.buffer[:-1]) * ad.scale, rel=0.01)
    # the upstream bottleneck stays the same multiple of the (QUIC) profile's rate
    ratio = first_rate_bps(up_q.down.rate) / first_rate_bps(ad.profiles[0].down.rate)
    assert ratio == pytest.approx(d.placement.upstream_ratio, rel=0.01)
    # the shared bottleneck scales too, up to the space's top rate
    inet = measured_internet_link(job)
    r = d.sharing.rate_mbit or 0.0
    assert first_rate_bps(inet.down.rate) == pytest.approx(min(100.0, r * ad.scale) * 1e6, rel=1e-3)
    assert inet.down.delay_ms == d.internet_link().down.delay_ms


def test_a_drawn_mtu_that_fits_quic_is_kept() -> None:
    d = next(x for x in c.draws(400) if x.profile.kind == "space" and x.profile.mtu >= 1280)
    ad = quic_adaptation(c.quic_draw(d))
    assert ad.scale == 1.0 and ad.object_bytes == round(d.server.object_bytes, -3)
    assert [p.name for p in ad.profiles] == ["space-A", "space-B"]


def test_tcp_jobs_are_measured_as_before() -> None:
    for d in c.draws(60, split="calib"):
        job = c.DrawJob(d, "cubic")
        assert measured_internet_link(job) == d.internet_link() and measured_layers(job) == d.layers()
        assert group_key(job) == d.server.key()
        assert job_cost(d, 8) == job_cost(d, 8, quic=False)
        assert job_dir(Path("/x"), job) == Path(f"/x/{d.id}/cubic/run0")
        rec = _record(job, {"status": "ok"})
        assert "transport" not in rec and rec["label"] == "cubic"


def test_quic_jobs_share_one_lab_and_cost_their_scaled_cross_traffic() -> None:
    ds = [c.quic_draw(d) for d in c.draws(40)]
    jobs = c.plan_quic_jobs(ds, ["quiche:cubic", "quicgo:reno"])
    assert {group_key(j) for j in jobs} == {("quic",)}
    cross = next(d for d in ds if d.sharing.has_cross_traffic and (d.sharing.rate_mbit or 0) < 5)
    k = quic_adaptation(cross).scale
    assert job_cost(cross, 8, quic=True) >= job_cost(cross, 8) if k >= 1 else True
    assert estimate_s(jobs, 4) > 0


def test_a_quic_record_names_the_stack_class() -> None:
    d = c.quic_draw(c.sample("full", "eval", 3))
    rec = _record(c.DrawJob(d, "aioquic:cubic", 0), {"status": "ok", "slots": {}})
    assert (rec["label"], rec["cca"], rec["transport"], rec["is_variant"]) == (
        "aioquic:cubic", "aioquic:cubic", "quic", False)  # fmt: skip
    assert (rec["split"], rec["space"], rec["run"]) == ("eval", "full", 0)
    assert rec["quic"] == quic_adaptation(d).to_dict()
    assert sample_set(rec) == "quic_unseen"  # QUIC classes are scored apart
    assert sample_set({**rec, "split": "train", "run": 1}) == "quic_heldout_runs"
    json.dumps(rec)


def test_quic_plan_sets() -> None:
    p = quic_plan()
    assert set(p) == {"train", "heldout_runs", "unseen"}
    for name, n in (("train", N_TRAIN_QUIC), ("heldout_runs", N_RUNS_QUIC), ("unseen", N_UNSEEN_QUIC)):
        assert Counter(j.cca for j in p[name]) == dict.fromkeys(LABELS, n), name
    ids = {k: {j.draw.id for j in v} for k, v in p.items()}
    assert not ids["unseen"] & ids["train"] and ids["heldout_runs"] <= ids["train"]
    assert all(j.run == 1 for j in p["heldout_runs"]) and all(j.run == 0 for j in p["train"])
    assert {c.split_of_seed(j.draw.seed) for j in p["train"]} == {"train"}
    assert {c.split_of_seed(j.draw.seed) for j in p["unseen"]} == {"eval"}
    assert all(j.transport == "quic" and j.draw.server == c.Server(object_bytes=j.draw.server.object_bytes)
               for v in p.values() for j in v)  # fmt: skip
    assert min(j.draw.index for v in p.values() for j in v) >= QUIC_OFFSET
    # the MILD_P mechanism: some training draws hold groups at their mildest
    assert 0 < sum(bool(j.draw.fixed) for j in p["train"]) < len(p["train"])
    assert set(Counter(j.draw.id for j in p["train"]).values()) == {1}


def test_cli_plans_quic(capsys: pytest.CaptureFixture[str]) -> None:
    from ccscope.cli import build_parser

    args = build_parser().parse_args(["collect", "--plan", "reference-quic", "--dry-run", "--json"])
    assert run_cli(args) == 0
    doc = json.loads(capsys.readouterr().out)
    n = len(LABELS) * (N_TRAIN_QUIC + N_UNSEEN_QUIC)
    assert doc["jobs"] == n + len(LABELS) * N_RUNS_QUIC and doc["draws"] == n and doc["server_groups"] == 1
    # a smaller campaign: each set's count per class scaled, never below one
    args = build_parser().parse_args(["collect", "--plan", "reference-quic", "--scale", "0.2", "--dry-run",
                                      "--json"])  # fmt: skip
    assert run_cli(args) == 0
    n = sum(max(1, round(x * 0.2)) for x in (N_TRAIN_QUIC, N_RUNS_QUIC, N_UNSEEN_QUIC))
    assert json.loads(capsys.readouterr().out)["jobs"] == len(LABELS) * n
    args = build_parser().parse_args(["collect", "--plan", "reference-quic", "--scale", "0", "--dry-run"])
    assert run_cli(args) == 2
    assert "--scale" in capsys.readouterr().err
    args = build_parser().parse_args(["collect", "--draws", "2", "--ccas", "cubic,quiche:bbr2_gcongestion",
                                      "--dry-run", "--json"])  # fmt: skip
    assert run_cli(args) == 0
    assert json.loads(capsys.readouterr().out)["server_groups"] == 2
    args = build_parser().parse_args(["collect", "--draws", "2", "--ccas", "msquic:cubic", "--dry-run"])
    assert run_cli(args) == 2
    assert "no lab QUIC server" in capsys.readouterr().err


def test_every_quic_link_is_accepted_by_the_emulator() -> None:
    from ccscope.capture.shell import link_binary

    try:
        link = link_binary()
    except Exception as e:
        pytest.skip(str(e))
    for d in c.draws(40, split="calib"):
        job = c.DrawJob(c.quic_draw(d), "quiche:cubic")
        for p in (measured_internet_link(job), *measured_layers(job), *quic_adaptation(job.draw).profiles):
            r = subprocess.run([str(link), *p.link_args(), "--check"], capture_output=True, text=True)
            assert r.returncode == 0, (p, r.stderr)


def test_every_planned_quic_draw_has_readable_rates() -> None:
    """A QUIC draw scales its shells' rates by up to 12.8 (MTU 100 -> 1280); a 1.1 Gbit/s
    upstream once came out as '1.11195e+06kbit', which no rate parser reads, and the job failed."""
    for jobs in quic_plan().values():
        for job in jobs:
            for p in (*measured_layers(job), *quic_adaptation(job.draw).profiles):
                for d in (p.down, p.up):
                    first_rate_bps(d.rate)  # raises ProfileError on an unreadable spec
                    assert "e" not in d.rate.removesuffix("kbit").removesuffix("mbit"), d.rate
