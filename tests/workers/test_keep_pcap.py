"""What a worker keeps: the sender-aligned trace of each profile (the classifier's alignment),
and the capture itself only when asked (CCSCOPE_WORKER_KEEP_PCAP), exported as pcap. A fake
download stands in for the capture (no lab needed): it leaves the files measure() leaves."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ccscope.store.core import Store
from ccscope.trace import Trace
from ccscope.workers.tasks import PCAP_MEDIA_TYPE, TRACE_MEDIA_TYPE, WorkerConfig, run_measurement

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def fake_measure(url: str, profiles: tuple[str, ...], out: Path, **_kw: object) -> object:
    from tests.capture.synth import bulk_flow, write_pcap

    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for p in profiles:
        sender = Trace.load(FIXTURES / f"cubic-d5-{p}.trace.json.gz")
        capture = Trace.from_dict(
            {**sender.to_dict(), "meta": {**sender.to_dict()["meta"], "alignment": "capture"}}
        )
        runs.append(
            SimpleNamespace(
                profile=p,
                fetch={"status": 200},
                error=None,
                trace_file=str(capture.save(out / f"{p}.trace.json")),
                sender_trace_file=str(sender.save(out / f"{p}.sender.trace.json")),
                pcap_file=str(write_pcap(out / f"{p}.pcap", bulk_flow(n_data=200 + len(runs)).packets())),
            )
        )
    return SimpleNamespace(runs=runs)


@pytest.mark.parametrize("keep", [False, True])
def test_worker_stores_sender_traces_and_pcaps_when_asked(tmp_path: Path, keep: bool) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "traces"))
    store.migrate()
    store.add_vantage("paris")
    m, _ = store.enqueue_measurement("shop.example", "paris", "tcp", "s", url="https://shop.example/big")
    cfg = WorkerConfig(vantage="paris", out_root=tmp_path / "work", min_gap_seconds=0, keep_pcap=keep)
    out = run_measurement(store, m.id, cfg, measure_fn=fake_measure)
    assert out.state == "classified", out
    m = store.get_measurement(m.id)
    kinds = sorted((t.profile, t.media_type) for t in m.traces)
    expected = [("A", TRACE_MEDIA_TYPE), ("B", TRACE_MEDIA_TYPE)]
    if keep:
        expected += [("A", PCAP_MEDIA_TYPE), ("B", PCAP_MEDIA_TYPE)]
    assert kinds == sorted(expected)
    for t in m.traces:
        if t.media_type == TRACE_MEDIA_TYPE:
            assert Trace.from_dict(json.loads(store.read_trace(t.sha256))).alignment == "sender"
    v = store.get_verdict(m.id)
    assert v is not None and v.evidence["evidence"]["alignment"] == "sender"
    cmd = [sys.executable, "-m", "ccscope.cli", "export", "trace", "--measurement", str(m.id),
           "--db", store.url, "--traces", str(tmp_path / "traces"), "--out", str(tmp_path / "x"),
           "--json"]  # fmt: skip
    r = subprocess.run([*cmd, "--format", "pcap"], capture_output=True, text=True, timeout=120)
    if keep:
        assert r.returncode == 0, r.stderr
        files = [Path(w["file"]) for w in json.loads(r.stdout)]
        assert sorted(f.name for f in files) == [f"m{m.id}-A.pcap", f"m{m.id}-B.pcap"]
        assert files[0].read_bytes()[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1", b"\x0a\x0d\x0d\x0a")
    else:
        assert r.returncode == 1 and "CCSCOPE_WORKER_KEEP_PCAP" in r.stderr
    r = subprocess.run([*cmd, "--format", "parquet"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and len(json.loads(r.stdout)) == 2
    shutil.rmtree(tmp_path / "x", ignore_errors=True)
