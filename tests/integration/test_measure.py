"""`ccscope measure` end to end: real namespaces, real kernel TCP, the real lab."""

import json
import subprocess

import numpy as np
import pytest

from ccscope.capture.measure import measure
from ccscope.capture.shell import run_in_shell
from ccscope.profile import get_profile
from ccscope.trace import Trace
from tests.netutil import CCSCOPE, leftovers_of, vm_froze

pytestmark = pytest.mark.netns


def test_measure_lab_cubic_profile_a(lab_up, tmp_path):
    m = measure("https://cubic.lab.test/obj/60000", ["A"], tmp_path, lab=True, timeout=60)
    run = m.runs[0]
    assert run.ok, run.error
    t = Trace.load(run.trace_file)
    assert (t.flow.server, t.flow.server_port) == ("198.18.7.12", 443)
    assert t.bytes_acked >= 60000 and not t.partial
    # MTU 100 end to end: the server's segments are 100-byte packets, so many points.
    assert len(t.t) > 1500
    # Internet path = 2 x the lab's one-way delay; base RTT adds profile A's 2 x 50 ms and the
    # serialisation of one 100-byte segment (4 ms) and one 52-byte ACK (~2 ms) at 200 kbit/s.
    assert t.internet_rtt_ms is not None and t.internet_rtt_ms >= 2 * lab_up.delay_ms - 3
    if not vm_froze(run):  # one handshake sample: a VM freeze lands in it whole
        assert t.internet_rtt_ms == pytest.approx(2 * lab_up.delay_ms, abs=3)
    assert t.base_rtt_ms == pytest.approx(100 + 2 * lab_up.delay_ms + 6.1, abs=3)
    assert t.bif.max() > 0 and np.all(t.bif >= 0)
    # The emulator's timing and the hypervisor's steal, read from the shell's stats.
    assert run.timing["lateness_p99_ms"] is not None and run.timing["host_steal_s"] >= 0
    g = run.groundtruth
    assert g and g["cca"] == "cubic"
    assert g["sender"]["mae_pct_bdp"] < 10.0, g["sender"]
    sender = Trace.load(run.sender_trace_file)
    assert sender.alignment == "sender"
    # The profiles negotiate SACK: slow start overflows the 2xBDP queue, the client SACKs what
    # follows each hole, and BiF less the SACKed bytes follows the server's own packets in
    # flight (TCP_INFO unacked - sacked - lost + retrans) through the recoveries.
    assert sender.extra["sack"] and sender.columns["sacked"].max() > 0
    assert np.all(sender.pipe <= sender.bif)
    assert g["sender_pipe"]["mae_pct_bdp"] < 10.0, g["sender_pipe"]


def test_measure_cli_json_and_refusal(lab_up, tmp_path):
    r = subprocess.run(
        [
            *CCSCOPE,
            "measure",
            "--lab",
            "--profile",
            "B",
            "--json",
            "--out",
            str(tmp_path),
            "http://bbr.lab.test/obj/20000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["runs"][0]["profile"] == "B"
    assert doc["runs"][0]["groundtruth"]["cca"] == "bbr"
    refused = subprocess.run(
        [*CCSCOPE, "measure", "http://127.0.0.1/"], capture_output=True, text=True, timeout=30
    )
    assert refused.returncode == 3
    assert "loopback" in refused.stderr and "Traceback" not in refused.stderr


def test_unreachable_target_is_a_clear_failure(lab_up, tmp_path):
    m = measure("http://198.18.7.250/obj/1000", ["A"], tmp_path, lab=True, timeout=5)
    run = m.runs[0]
    assert not run.ok and run.error
    assert not leftovers_of(json.loads((tmp_path / "A.stats.json").read_text()))


def test_cut_short_download_keeps_a_partial_trace(lab_up, tmp_path):
    m = measure("https://reno.lab.test/obj/2000000", ["A"], tmp_path, lab=True, timeout=6)
    run = m.runs[0]
    assert run.trace_file, run.error
    t = Trace.load(run.trace_file)
    assert t.partial and run.partial and 0 < t.bytes_acked < 2_000_000


def test_command_killed_inside_shell_tears_down(lab_up, tmp_path):
    pcap = tmp_path / "x.pcap"
    r = run_in_shell(["sh", "-c", "kill -9 $$"], get_profile("A"), pcap=pcap, stats=tmp_path / "s.json")
    assert r.returncode == 137
    assert r.stats is not None and pcap.exists()
    assert not leftovers_of(r.stats)
    # What the hypervisor took meanwhile sits beside the emulator's figures, in the file too.
    host = r.stats["host"]
    assert host["steal_s"] >= 0 and 0 <= host["steal_share"] <= 1
    assert json.loads((tmp_path / "s.json").read_text())["host"] == host
