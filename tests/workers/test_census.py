"""`ccscope census` / run_census: a one-off campaign through the store, crawler, workers and
classifier, from two vantage points, one of them behind an emulated access path.

The end-to-end test uses its own real lab (instance 9) with site names aliased to CCA servers,
so the crawler resolves lab names itself and the verdicts can be scored against the truth."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ccscope.capture.shell import shell_command
from ccscope.errors import LabError
from ccscope.lab.lab import Lab, LabParams, lab_resolve
from ccscope.store.queries import CensusRow
from ccscope.trace import Trace
from ccscope.workers.census import CensusReport, SiteResult, format_report
from ccscope.workers.tasks import WorkerConfig
from tests.lab.lab_testkit import running_lab
from tests.netutil import FREEZE_STEAL_S

INSTANCE = 9
SITES = (("alpha.lab.test", "cubic"), ("beta.lab.test", "bbr"))


# ---- units ------------------------------------------------------------------------------------


def test_lab_sites_are_validated() -> None:
    p = LabParams(ccas=("cubic", "bbr"), sites=(("Shop.lab.test.", "cubic"),))
    assert p.sites == (("shop.lab.test", "cubic"),)
    assert LabParams.from_dict(p.to_dict()) == p
    for bad in (
        (("a.b.lab.test", "cubic"),),  # two labels: the wildcard certificate would not fit
        (("shop.example.com", "cubic"),),
        (("shop.lab.test", "reno"),),  # a CCA the lab does not run
        (("shop.lab.test", "cubic"), ("shop.lab.test", "bbr")),
        (("-x.lab.test", "cubic"),),
    ):
        with pytest.raises(LabError):
            LabParams(ccas=("cubic", "bbr"), sites=bad)


def test_lab_resolve_reads_the_lab_hosts_file(tmp_path: Path) -> None:
    hosts = "127.0.0.1\tlocalhost\n198.18.5.12\tcubic.lab.test\n198.18.5.12\tshop.lab.test\n"
    (tmp_path / "hosts").write_text(hosts)
    assert lab_resolve("SHOP.lab.test.", tmp_path) == ("198.18.5.12",)
    assert lab_resolve("nope.lab.test", tmp_path) == ()
    assert lab_resolve("localhost", tmp_path) == ()  # only lab names
    assert lab_resolve("shop.lab.test", tmp_path / "missing") == ()


def test_access_path_wraps_the_profile_shell() -> None:
    argv = shell_command(["true"], None, extra=["--delay", "50"], outer=["--delay", "5"])
    first, second = argv.index("--"), len(argv) - 1 - argv[::-1].index("--")
    # the inner link needs root
    assert sorted(argv[1:first]) == sorted(["--delay", "5", "--keep-root", "--quiet"])
    assert argv[first + 1].endswith("ccscope-link") and "50" in argv[first + 1 : second]
    assert argv[second + 1 :] == ["true"]


def test_worker_access_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CCSCOPE_WORKER_ACCESS", "--delay 60 --jitter 1")
    assert WorkerConfig.from_env("far").access == ("--delay", "60", "--jitter", "1")


def test_report_scores_and_table() -> None:
    day = dt.date(2026, 11, 22)
    unk = "unknown, CUBIC-like"
    res = [
        SiteResult(1, "a.lab.test", "near", "classified", "cubic", "cca", "cubic", 0.9, truth="cubic"),
        SiteResult(2, "a.lab.test", "far", "classified", "unknown", "unknown", unk, 0.4, truth="cubic"),
        SiteResult(3, "b.lab.test", "near", "classified", "reno", "cca", "reno", 0.8, truth="bbr"),
        SiteResult(4, "b.lab.test", "far", "failed", truth="bbr", reason="HTTP 404"),
    ]
    rep = CensusReport(
        7, "c", "s", "l", ["a.lab.test", "b.lab.test"], ["near", "far"], ["A"], res,
        [CensusRow(day, "near", "tcp", "cubic", 1, 2), CensusRow(day, "near", "tcp", "reno", 1, 2),
         CensusRow(day, "far", "tcp", "unknown", 1, 1)],
        12.0, 4,
    )  # fmt: skip
    s = rep.scores()
    assert (s["correct"], s["wrong"], s["unknown"], s["failed"]) == (1, 1, 1, 1)
    assert s["accuracy"] == pytest.approx(1 / 3) or s["accuracy"] == 0.3333
    assert rep.scores("near")["precision"] == 0.5
    text = format_report(rep)
    assert "cubic 0.90 ok" in text and "reno 0.80 WRONG" in text and "failed: HTTP 404" in text
    assert "accuracy near" in text and "accuracy overall" in text
    d = rep.to_dict()
    assert json.loads(json.dumps(d, default=str))["scores"]["far"]["unknown"] == 1


# ---- end to end -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def census_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    params = LabParams(
        ccas=("cubic", "bbr"), delay_ms=10, instance=INSTANCE, sites=SITES, large_bytes=420_000
    )
    with running_lab(tmp_path_factory.mktemp("census-lab"), params) as lab:
        yield lab


@pytest.mark.timeout(600)  # two rounds of real 420 KB downloads at 200 kbit/s
def test_census_command_on_lab_sites(census_lab: Lab, tmp_path: Path) -> None:
    """The whole path a user runs: list file -> store -> crawler (lab names resolved outside
    any shell, lab CA trusted) -> an embedded worker -> verdicts scored against the truth."""
    lst = tmp_path / "sites_2026-11-22.csv"
    lst.write_text("".join(f"{i},{h}\n" for i, (h, _) in enumerate(SITES, 1)) + "3,gamma.lab.test\n")
    db = f"sqlite:///{tmp_path / 'c.db'}"
    env = {**os.environ, "CCSCOPE_LAB_DIR": str(census_lab.dir)}
    base = [
        sys.executable, "-m", "ccscope.cli", "census", "--list", str(lst), "--lab", "--vantage", "near",
        "--profiles", "A", "--concurrency", "4", "--db", db, "--traces", str(tmp_path / "traces"),
    ]  # fmt: skip
    cmd = [*base, "--top", "2", "--json"]
    # One vantage point keeps this to one wave of downloads (a site is measured by one worker at
    # a time); two vantage points and an access path are the next test's business.
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode in (0, 4), p.stderr
    rep = json.loads(p.stdout)
    assert rep["sites"] == ["alpha.lab.test", "beta.lab.test"]  # top 2 only
    assert len(rep["results"]) == 2
    for r in rep["results"]:
        assert r["state"] == "classified", r
        assert r["truth"] == dict(SITES)[r["domain"]]
    assert sum(x["count"] for x in rep["shares"]) == 2
    # The same list again is reused, and a second census is a new campaign.
    p2 = subprocess.run([*base, "--top", "1"], capture_output=True, text=True, timeout=600, env=env)
    assert p2.returncode in (0, 4), p2.stderr
    assert "census 'census-sites_2026-11-22-" in p2.stdout and "accuracy overall" in p2.stdout


def test_vantage_access_path_is_crossed(
    census_lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ccscope.store.core import Store
    from ccscope.workers.census import VantageSpec, import_list_file, lab_truth, run_census

    monkeypatch.setenv("CCSCOPE_LAB_DIR", str(census_lab.dir))
    store = Store(f"sqlite:///{tmp_path / 'v.db'}", str(tmp_path / "traces"))
    store.migrate()
    lst = tmp_path / "one.csv"
    lst.write_text("1,alpha.lab.test\n")
    name, _ = import_list_file(store, lst)
    # A 400 KB object is not needed to see the path: a small one is cached for the site.
    store.cache_object("alpha.lab.test", "https://alpha.lab.test/obj/30000", 30_000, {}, ttl_seconds=600)
    rep = run_census(
        store, name, 1,
        [VantageSpec("near"), VantageSpec("far", ("--delay", "40"))],
        profiles=("A",), lab=True, concurrency=2, truth=lab_truth(census_lab.dir),
    )  # fmt: skip
    rtt, steal = {}, {}
    for r in rep.results:
        m = store.get_measurement(r.measurement_id)
        t = Trace.from_dict(json.loads(store.read_trace(m.traces[0].sha256)))
        rtt[r.vantage] = t.internet_rtt_ms
        steal[r.vantage] = ((t.extra.get("link_stats") or {}).get("host") or {}).get("steal_s")
    # The lab path is 2 x 10 ms; "far" adds 2 x 40 ms in front of the profile's bottleneck.
    assert all(v is not None for v in steal.values()), steal  # every shell records the steal
    # Floors always hold: an added delay is never skipped.
    assert rtt["near"] >= 18 and rtt["far"] >= 95, rtt
    # Ceilings only where the VM did not freeze during that shell: the RTT is one SYN/SYN-ACK
    # sample, and a ~100 ms freeze of the whole VM (capture/host.py) lands in it whole (a
    # fresh-clone CI read far = 189 ms once).
    for vantage, ceiling in (("near", 30), ("far", 110)):
        if steal[vantage] < FREEZE_STEAL_S:
            assert rtt[vantage] <= ceiling, (rtt, steal)


def test_lab_names_inside_a_shell_follow_the_shells_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a shell the lab's hosts file resolves lab names (the crawler); inside one the
    shell's own --hosts file rules, whichever lab instance the environment points at."""
    from ccscope.errors import TargetRefused
    from ccscope.targets import resolve_target

    (tmp_path / "hosts").write_text("198.18.5.12\tshop.lab.test\n")
    monkeypatch.setenv("CCSCOPE_LAB_DIR", str(tmp_path))
    monkeypatch.delenv("CCSCOPE_SHELL_DEPTH", raising=False)
    assert resolve_target("https://shop.lab.test/x", lab=True).addresses == ("198.18.5.12",)
    monkeypatch.setenv("CCSCOPE_SHELL_DEPTH", "1")
    with pytest.raises(TargetRefused):  # not in this machine's DNS or /etc/hosts
        resolve_target("https://shop.lab.test/x", lab=True)


def test_quic_truth_is_the_stacks_class_when_the_model_has_quic_classes(tmp_path: Path) -> None:
    from ccscope.workers.census import lab_truth

    (tmp_path / "hosts").write_text("198.18.5.40\tcubic.quiche.lab.test\n")
    state = {"servers": [], "quic_servers": [{"addr": "198.18.5.40", "label": "quiche:cubic"}]}
    (tmp_path / "state.json").write_text(json.dumps(state))
    assert lab_truth(tmp_path, quic_classes=True)("cubic.quiche.lab.test", "quic") == "quiche:cubic"
    assert lab_truth(tmp_path, quic_classes=False)("cubic.quiche.lab.test", "quic") == "cubic"
    assert lab_truth(tmp_path, quic_classes=True)("cubic.quiche.lab.test", "tcp") is None
    # the shipped model has QUIC classes: a census scores a stack's verdict against its class
    assert lab_truth(tmp_path)("cubic.quiche.lab.test", "quic") == "quiche:cubic"
