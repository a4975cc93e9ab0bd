"""The condition space: reproducible draws, disjoint splits, fixed groups, sub-spaces."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from ccscope.classifier import conditions as c
from ccscope.classifier.collect import estimate_s, object_url

README = Path(__file__).resolve().parents[2] / "classifier" / "README.md"


def test_a_draw_is_reproducible_from_its_seed() -> None:
    a = c.sample("full", "train", 7)
    assert a == c.sample("full", "train", 7)
    assert a.id == c.sample("full", "train", 7).id
    assert c.Draw.from_json(a.to_json()) == a
    assert c.Draw.from_dict(json.loads(json.dumps(a.to_dict()))).id == a.id
    assert a != c.sample("full", "train", 8)
    assert a.seed == c.draw_seed("train", "full", 7)


def test_train_and_eval_seeds_never_collide() -> None:
    n = 20_000
    train = {c.draw_seed("train", "full", i) for i in range(n)}
    evals = {c.draw_seed("eval", "full", i) for i in range(n)}
    assert len(train) == n and len(evals) == n
    assert not train & evals
    # by construction: the split is the seed's top bits
    assert {c.split_of_seed(s) for s in train} == {"train"}
    assert {c.split_of_seed(s) for s in evals} == {"eval"}
    assert all(s < 1 << 64 for s in train | evals)
    with pytest.raises(c.ConditionError):
        c.draw_seed("holdout", "full", 0)


def test_fixing_a_group_holds_it_mildest_and_leaves_the_rest() -> None:
    for i in range(30):
        full = c.sample("full", "train", i)
        for g in c.GROUPS:
            fixed = c.sample("full", "train", i, fixed=[g])
            assert fixed.fixed == (g,)
            assert replace(fixed, fixed=()) == c.MILDEST[g](full)
    mild = c.sample("full", "eval", 3, fixed=list(c.GROUPS))
    assert mild.path == c.InternetPath() and mild.sharing == c.Sharing() and mild.server == c.Server()
    with pytest.raises(c.ConditionError):
        c.sample("full", "train", 0, fixed=["weather"])


def test_the_space_covers_its_ranges() -> None:
    rows = list(c.iter_factor_values(c.draws(1500, split="eval")))
    rtt = [r["internet_rtt_ms"] for r in rows]
    assert min(rtt) < 3 and max(rtt) > 300
    loss = [r["loss"] for r in rows]
    assert 0.3 < sum(x == 0 for x in loss) / len(loss) < 0.4
    assert max(loss) > 0.008 and sorted(loss)[len(loss) // 2] < 0.002  # skewed low, reaches 1 %
    assert {r["access_shells"] for r in rows} == {0, 1, 2}
    assert {r["profile_kind"] for r in rows} == {"standard", "nebby", "space"}
    assert {r["program"] for r in rows} == {"lab", "nginx"}
    assert {r["initcwnd"] for r in rows} == {4, 10, 32, 64}
    assert any(r["ge"] for r in rows) and any(r["reorder"] for r in rows)
    assert any(r["cross_traffic"] for r in rows) and any(r["share_rate_mbit"] is None for r in rows)
    assert min(r["mtu"] for r in rows) == 100 and max(r["mtu"] for r in rows) == 1500
    sizes = [r["object_bytes"] for r in rows]
    assert min(sizes) < 150_000 and max(sizes) > 8_000_000


def test_sub_spaces() -> None:
    for d in c.draws(50, "other-profiles", "eval"):
        p = d.profile
        assert p.kind == "space" and not p.sack and p.buffer_bdp == 1.0 and p.mtu == 100
        assert 50 <= p.rate_kbit <= 400 and 15 <= p.delay_a_ms < p.delay_b_ms <= 95
        a = d.profiles()[0]
        assert "--no-sack" in a.link_args() and a.down.buffer == "1bdp"
    demo = c.draws(20, "demo", "eval")
    assert {d.placement.access for d in demo} == {(v,) for v in c.DEMO_VANTAGES}
    for d in demo:
        assert d.path == c.InternetPath() and d.sharing == c.Sharing()
        assert d.server.object_bytes == 420_000 and d.profile.kind == "standard"
        assert [p.name for p in d.profiles()] == ["A", "B"]


def test_readme_shows_the_factor_table() -> None:
    assert c.markdown_table() in README.read_text()


def test_profiles_layers_and_urls() -> None:
    d = next(
        x
        for x in c.draws(200)
        if x.profile.kind == "space" and x.placement.upstream_ratio and x.placement.access
    )
    a, b = d.profiles()
    assert (a.name, b.name) == ("space-A", "space-B") and a.base_rtt_ms < b.base_rtt_ms
    names = [p.name for p in d.layers()]
    assert names[0] == "upstream" and names[1:] == [f"access{i + 1}" for i in range(len(d.placement.access))]
    assert d.rtt_ms("A") < d.rtt_ms("B")
    assert 25 <= d.duration_cap_s("A") <= d.duration_cap_s("B") <= 150
    job = c.DrawJob(
        replace(d, server=replace(d.server, program="nginx", app_limit=0.5, app_limit_after=0.25)), "cubic"
    )
    url = object_url(job)
    rate = int(0.5 * d.profile.rate_kbit * 1000 / 8)
    size = d.server.object_bytes
    assert url == f"http://cubic.lab.test:8080/obj/{size}?rate={rate}&after={size // 4}"
    assert estimate_s([job], 1) > 0


def test_every_drawn_link_is_accepted_by_the_emulator() -> None:
    from ccscope.capture.shell import link_binary

    try:
        link = link_binary()
    except Exception as e:
        pytest.skip(str(e))
    for d in c.draws(40, split="calib"):
        for p in (d.internet_link(), *d.layers(), *d.profiles()):
            r = subprocess.run([str(link), *p.link_args(), "--check"], capture_output=True, text=True)
            assert r.returncode == 0, (p, r.stderr)


def test_index_and_samples(tmp_path: Path) -> None:
    from ccscope.classifier.collect import _record
    from ccscope.classifier.collected import load_index, samples

    d = c.sample("full", "eval", 2)
    f = tmp_path / "A.sender.trace.json"
    f.write_text("{}")
    ok = _record(c.DrawJob(d, "cubic"), {"status": "ok", "reason": None, "slots": {
        "A": {"profile": "space-A", "sender_trace": str(f), "capped": True},
        "B": {"profile": "space-B", "sender_trace": str(tmp_path / "missing.json")}}})  # fmt: skip
    bad = _record(c.DrawJob(d, "bbr"), {"status": "failed", "reason": "lab bring-up failed", "slots": {}})
    first = {**ok, "status": "failed"}
    with (tmp_path / "index.jsonl").open("w") as fh:
        for r in (first, bad, ok):
            fh.write(json.dumps(r) + "\n")
    idx = load_index(tmp_path)
    assert idx[ok["key"]]["status"] == "ok" and idx[bad["key"]]["reason"] == "lab bring-up failed"
    got = samples(tmp_path)
    assert len(got) == 1
    s = got[0]
    assert (s.cca, s.label, s.split, s.slot, s.capped, s.draw_id) == (
        "cubic",
        "cubic",
        "eval",
        "A",
        True,
        d.id,
    )
    assert samples(tmp_path, "truth") == []
