"""A worker starting up removes the scratch of runs whose process is gone, and nothing else:
not a live process's run, not a kept one, not files it did not name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ccscope.workers.tasks import WorkerConfig, run_dir, sweep_scratch


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_sweep_takes_dead_runs_only(tmp_path: Path) -> None:
    cfg = WorkerConfig(vantage="paris", out_root=tmp_path)
    live = run_dir(cfg, 1)
    live.mkdir(parents=True)
    pid, start, boot = live.name.rsplit(".", 1)[1].split("-")
    dead = live.with_name(live.name.replace(f".{pid}-", f".{_dead_pid()}-"))
    reused = live.with_name(live.name.replace(f"-{start}-", f"-{int(start) - 1}-"))  # same pid, older
    rebooted = live.with_name(live.name.replace(f"-{boot}", "-00000000"))
    kept = tmp_path / "paris" / "m4-20261101T000000000000"  # keep_files: owner dropped from the name
    stray = tmp_path / "tokyo" / "notes"
    for d in (dead, reused, rebooted, kept, stray):
        d.mkdir(parents=True)
        (d / "A.pcap").write_bytes(b"\xd4\xc3\xb2\xa1")
    swept = sweep_scratch(tmp_path)
    assert sorted(swept) == sorted([dead, reused, rebooted])
    assert live.is_dir() and kept.is_dir() and stray.is_dir()
    assert not any(d.exists() for d in swept)


def test_sweep_of_a_missing_root_is_a_no_op(tmp_path: Path) -> None:
    assert sweep_scratch(tmp_path / "never-made") == []
