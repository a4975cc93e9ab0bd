"""`lab up` / `status` / `down` for real: ccscope-link shells, namespaces, routes, nftables."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ccscope.errors import LabError
from ccscope.lab import cli
from ccscope.lab.content import object_bytes
from ccscope.lab.groundtruth import find_record
from ccscope.lab.lab import Lab, LabParams, _check_ccas, _nft_tables
from ccscope.lab.registry import lab_prefix
from tests.lab.lab_testkit import link_binary_or_skip, needs_root, wait_for

pytestmark = [needs_root, pytest.mark.netns, pytest.mark.slow]
# Its own lab instance: a developer's `ccscope lab up` (instance 0) may stay up meanwhile.
INSTANCE = 6
PREFIX = lab_prefix(INSTANCE)


def _prefix_routed() -> bool:
    out = subprocess.run(["ip", "-j", "route", "show", PREFIX], capture_output=True,
                         text=True, check=False).stdout  # fmt: skip
    return bool(json.loads(out or "[]"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    link_binary_or_skip()
    if _prefix_routed():
        pytest.fail(f"{PREFIX} is routed already: another lab is up on instance {INSTANCE}")
    lab = Lab(tmp_path_factory.mktemp("labstate"))
    lab.up(LabParams(delay_ms=10, instance=INSTANCE))
    try:
        yield lab
    finally:
        if lab.state() is not None:
            lab.down()


def _client_shell(lab: Lab, url: str, run_id: str, out: Path) -> subprocess.CompletedProcess[str]:
    """Download `url` from inside a second shell (the measuring side), as a client would."""
    st = lab.state()
    assert st is not None
    if shutil.which("curl"):
        fetch = (f"curl -sS --max-time 30 --cacert {st['ca_file']} -H 'X-CCScope-Run: {run_id}' "
                 f"-o {out} -w '%{{http_code}}' {url}")  # fmt: skip
    else:
        py = (
            "import ssl,sys,urllib.request as u;"
            f"c=ssl.create_default_context(cafile={st['ca_file']!r});"
            f"r=u.urlopen(u.Request({url!r},headers={{'X-CCScope-Run':{run_id!r}}}),context=c);"
            f"open({str(out)!r},'wb').write(r.read());print(r.status,end='')"
        )
        fetch = f'{sys.executable} -c "{py}"'
    # The pause lets the last ACKs and the FIN cross the client's link before it is torn down.
    # --keep-root: the client writes into this test's private temporary directory.
    cmd = [str(link_binary_or_skip()), "--quiet", "--hosts", st["hosts_file"], "--rate", "1mbit",
           "--delay", "20", "--keep-root",
           "--", "sh", "-c", f"{fetch}; rc=$?; sleep 0.5; exit $rc"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def test_up_records_state_and_is_healthy(lab: Lab) -> None:
    st = lab.state()
    assert st is not None
    assert [s["cca"] for s in st["servers"]] == ["reno", "cubic", "bbr"]
    assert st["link"]["device"] and os.path.exists(f"/sys/class/net/{st['link']['device']}")
    # The shells' shared NAT table is in place, and nothing of the lab's own to remove later.
    assert ["ip", "ccscope_shells"] in _nft_tables() and st["nft_tables"] == []
    assert Path(st["hosts_file"]).read_text().count(".lab.test") >= 3
    s = lab.status()
    assert s.up and s.healthy, s.problems
    assert {x["cca"] for x in s.servers} == {"reno", "cubic", "bbr"}
    assert cli.main(["lab", "status", "--state-dir", str(lab.dir)]) == 0


def test_fetch_from_client_shell_leaves_groundtruth(lab: Lab, tmp_path: Path) -> None:
    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "obj"
    r = _client_shell(lab, "https://cubic.lab.test/obj/200000", run_id, out)
    assert r.returncode == 0 and r.stdout.strip().endswith("200"), r.stderr
    assert out.read_bytes() == object_bytes(200000)
    rec = find_record(run_id, gt_dir=lab.gt_dir, wait_s=10)
    assert rec is not None, "no ground truth with the run id"
    assert rec.meta["cca"] == "cubic" and rec.meta["scheme"] == "https"
    assert rec.meta["server"] == {"addr": f"198.18.{INSTANCE}.12", "port": 443}
    assert rec.meta["requests"][0]["acked"]
    tr = rec.to_trace()
    assert tr.extra["run_id"] == run_id
    assert 1.0 < tr.duration < 10.0  # 200 KB at 1 Mbit/s
    assert 0.9 < float(np.median(np.diff(tr.t))) * 1000 < 1.2
    assert tr.bif.max() > 10_000 and tr.bif[-1] == 0
    assert tr.base_rtt_ms is not None and tr.base_rtt_ms >= 60  # 2 x 10 ms + 2 x 20 ms


def test_up_again_is_a_noop(lab: Lab) -> None:
    st = lab.state()
    assert st is not None
    again = lab.up(LabParams(delay_ms=10, instance=INSTANCE))
    assert again["changed"] is False
    assert again["pids"]["link"] == st["pids"]["link"]


def test_up_with_new_params_restarts_with_cross_traffic(lab: Lab) -> None:
    old = lab.state()
    assert old is not None
    st = lab.up(LabParams(delay_ms=5, rate="20000", cross_traffic_kbit=800, instance=INSTANCE))
    assert st["changed"] is True and st["pids"]["link"] != old["pids"]["link"]
    assert not os.path.exists(f"/proc/{old['pids']['link']['pid']}/stat") or not _same_proc(
        old["pids"]["link"]
    )

    def rate() -> float:
        ct = lab.status().cross_traffic or {}
        return float(ct.get("rate_kbit", 0.0))

    assert wait_for(lambda: rate() > 400, timeout=6.0, every=0.5)


def _same_proc(p: dict[str, int]) -> bool:
    try:
        raw = Path(f"/proc/{p['pid']}/stat").read_text()
    except OSError:
        return False
    f = raw[raw.rindex(")") + 2 :].split()
    return f[0] not in ("Z", "X") and int(f[19]) == p["start"]


def test_crashed_server_is_reported(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    st = lab.state()
    assert st is not None
    os.kill(st["pids"]["server"]["pid"], signal.SIGKILL)
    assert wait_for(lambda: not lab.status(timeout=0.5).healthy, timeout=10)
    s = lab.status(timeout=0.5)
    assert s.up and any("server process" in p for p in s.problems), s.problems
    assert cli.main(["lab", "status", "--state-dir", str(lab.dir)]) == 1
    assert "UNHEALTHY" in capsys.readouterr().out


def test_down_leaves_nothing(lab: Lab) -> None:
    st = lab.state()
    assert st is not None
    rep = lab.down()
    assert rep["was_up"] and rep["leftovers"] == []
    dev = st["link"]["device"]
    assert not os.path.exists(f"/sys/class/net/{dev}")
    assert not _prefix_routed()
    now = _nft_tables()
    assert not [t for t in st["nft_tables"] if t in now]
    for p in st["pids"].values():
        assert not _same_proc(p)
    assert lab.state() is None and not Path(st["hosts_file"]).exists()
    assert lab.gt_dir.is_dir() and any(lab.gt_dir.rglob("*.json"))  # ground truth is kept
    assert lab.down()["was_up"] is False
    assert cli.main(["lab", "status", "--state-dir", str(lab.dir)]) == cli.EXIT_NOT_UP


def test_unavailable_cca_is_refused_before_starting() -> None:
    with pytest.raises(LabError, match="nosuchcca"):
        _check_ccas(("nosuchcca",))
