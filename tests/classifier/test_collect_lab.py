"""A small real collection: draws with cross traffic and an access shell, and with nginx, SACK
off, MTU 1500, initcwnd 32 and MSS 1000; traces, ground truth and the index come out."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ccscope.classifier import conditions as c
from ccscope.classifier.collect import collect, job_dir
from ccscope.classifier.collected import load_index
from ccscope.trace import Trace
from tests.classifier.conftest import lab_draw, space_draw
from tests.lab.lab_testkit import link_binary_or_skip, needs_root

pytestmark = [needs_root, pytest.mark.netns, pytest.mark.slow]
INSTANCE = 37
STATE_PREFIX = "/run/ccscope/lab-test-draws-"


def _draws() -> tuple[c.Draw, c.Draw]:
    nginx = space_draw(
        c.InternetPath(rtt_ms=10.0),
        c.Placement(),
        c.Server(program="nginx", initcwnd=32, gso=False, mss=1000, object_bytes=400_000),
        rate_kbit=1500.0,
        buffer_bdp=2.0,
        mtu=1500,
    )
    return lab_draw(5.0, 150_000), nginx


def _first_flight(pcap: Path, server_port: int) -> tuple[int, int]:
    """Server data segments captured before the client's first ACK of response data, and the
    largest segment's payload."""
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-T", "fields", "-e", "tcp.srcport", "-e", "tcp.len", "-e", "tcp.ack"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    n, biggest = 0, 0
    for line in out.splitlines():
        sport, ln, ack = (int(x or 0) for x in line.split("\t"))
        if sport == server_port and ln > 0:
            n += 1
            biggest = max(biggest, ln)
        elif sport != server_port and ack > 1:
            break
    return n, biggest


def test_smoke_collection(tmp_path: Path) -> None:
    link_binary_or_skip()
    if not shutil.which("nginx") or not shutil.which("tshark"):
        pytest.skip("nginx or tshark missing: run `make setup`")
    shared, ngx = _draws()
    jobs = c.plan_jobs([shared, ngx], ("reno", "bbr"))
    summ = collect(jobs, tmp_path, concurrency=4, instances=[INSTANCE], state_prefix=STATE_PREFIX,
                   keep_pcap=True, progress=False)  # fmt: skip
    assert (summ.ok, summ.failed, summ.partial) == (4, 0, 0), summ
    idx = load_index(tmp_path)
    assert sorted(idx) == sorted(j.key for j in jobs)
    for j in jobs:
        rec = idx[j.key]
        assert rec["status"] == "ok" and rec["split"] == "test" and rec["label"] in ("reno/dctcp", "bbr")
        assert c.Draw.from_dict(rec["draw"]) == j.draw
        assert rec["lateness_p99_us"] is not None and rec["slots"]["A"]["lateness_p99_us"] is not None
        assert rec["slots"]["A"]["host_steal_s"] >= 0  # the hypervisor's steal over the shell's run
        for slot in ("A", "B"):
            s = rec["slots"][slot]
            assert not s["capped"] and s["bytes"] >= j.draw.server.object_bytes
            snd, truth = Trace.load(s["sender_trace"]), Trace.load(s["truth_trace"])
            assert snd.alignment == "sender" and Trace.load(s["trace"]).alignment == "capture"
            assert truth.source == "lab-groundtruth" and len(truth.t) > 100
            assert truth.profile == snd.profile and "bif_truth" in truth.columns
            assert s["truth_cca"] == j.cca  # the server socket's own CCA (TCP_INFO / sock_diag)
        if j.draw is shared:
            xt = rec["cross_traffic"]
            assert xt["tcp_bytes"] > 100_000 and xt["udp_bytes"] > 10_000
            assert snd.profile["name"] == "B" and snd.profile["sack"]
        else:
            assert snd.profile["mtu"] == 1500 and not snd.profile["sack"]
            assert rec["url"].startswith("http://") and ":8080/" in rec["url"]
    # initcwnd 32 and MSS 1000 took effect on nginx's connections: the first flight in the pcap
    n, biggest = _first_flight(job_dir(tmp_path, c.DrawJob(ngx, "reno")) / "A.pcap", 8080)
    assert biggest == 1000 - 12  # MSS 1000 less the timestamp option
    assert 30 <= n <= 33, n
    # resumable: nothing is measured again
    lines = (tmp_path / "index.jsonl").read_text().count("\n")
    again = collect(jobs, tmp_path, concurrency=4, instances=[INSTANCE], state_prefix=STATE_PREFIX)
    assert again.skipped == 4 and (tmp_path / "index.jsonl").read_text().count("\n") == lines
    assert json.loads((job_dir(tmp_path, jobs[0]) / "job.json").read_text())["key"] == jobs[0].key


def test_interrupt_stops_new_jobs_and_resumes(tmp_path: Path) -> None:
    """Ctrl-C mid-collection: the running job finishes and is recorded, no other job starts,
    and the next run measures exactly the jobs that never ran."""
    import os
    import signal
    import threading
    import time
    from dataclasses import replace

    link_binary_or_skip()
    base = c.sample("full", "test", 0)
    draws = [
        replace(
            base,
            path=c.InternetPath(rtt_ms=20.0),
            sharing=c.Sharing(),
            placement=c.Placement(),
            server=c.Server(object_bytes=50_000 + 1000 * i),  # three distinct jobs, one server group
            profile=c.ProfilePair(),
        )
        for i in range(3)
    ]
    jobs = c.plan_jobs(draws, ("reno",))
    index = tmp_path / "index.jsonl"

    def interrupt_after_first_record() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if index.exists() and index.read_text().count("\n") >= 1:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    # A run started in the background inherits SIGINT ignored (as `make test &` or a CI runner
    # may): take Ctrl-C's own handler for this test.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_after_first_record, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            collect(
                jobs, tmp_path, concurrency=1, instances=[INSTANCE], state_prefix=STATE_PREFIX, progress=False
            )
    finally:
        signal.signal(signal.SIGINT, before)
    idx = load_index(tmp_path)
    # The first job, and at most the one that had started when the signal came: never all.
    assert 1 <= len(idx) <= 2 and all(r["status"] == "ok" for r in idx.values()), idx
    again = collect(
        jobs, tmp_path, concurrency=1, instances=[INSTANCE], state_prefix=STATE_PREFIX, progress=False
    )
    assert again.skipped == len(idx) and again.ok == 3 - len(idx), again
    assert sorted(load_index(tmp_path)) == sorted(j.key for j in jobs)
