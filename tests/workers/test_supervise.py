"""The worker's supervisor: its child goes when it goes, and a child that dies is restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SUPERVISOR = """
import sys
from ccscope.workers.supervise import Child
Child().run([sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(120)"])
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_child_dies_with_a_killed_supervisor() -> None:
    # A SIGKILLed supervisor cannot pass anything on; the kernel must end its child
    # (PR_SET_PDEATHSIG), or a worker would run on, orphaned, in a namespace nobody owns.
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISOR], stdout=subprocess.PIPE, text=True)
    assert sup.stdout is not None
    child = int(sup.stdout.readline())
    assert _alive(child)
    sup.send_signal(signal.SIGKILL)
    sup.wait(10)
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive


def test_supervise_restarts_a_child_that_dies(tmp_path: Path) -> None:
    from ccscope.workers.supervise import supervise

    runs = tmp_path / "runs"
    # Fails twice, then exits cleanly: supervise returns 0 after two restarts (2 s apart).
    script = (
        f"import pathlib, sys; p = pathlib.Path({str(runs)!r}); n = len(p.read_text()) if p.exists() else 0; "
    )
    script += "p.write_text('x' * (n + 1)); sys.exit(0 if n >= 2 else 3)"
    t0 = time.monotonic()
    assert supervise([sys.executable, "-c", script], "the test child", max_delay=2.0) == 0
    assert runs.read_text() == "xxx"
    assert 3.5 < time.monotonic() - t0 < 20


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (ccscope-link)")
def test_the_worker_in_its_namespace_gets_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # The vantage shell hands its command an allow-listed environment; the worker inside still
    # needs the store, broker and trace-store settings and their credentials.
    from ccscope.workers.vantage import run_in_vantage_netns

    monkeypatch.setenv("CCSCOPE_BROKER_URL", "redis://198.18.72.9:1/0")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    monkeypatch.setenv("CCSCOPE_WORKER_ACCESS", "--delay 5")
    check = (
        "import os, sys; e = os.environ; "
        "sys.exit(0 if e.get('CCSCOPE_BROKER_URL') == 'redis://198.18.72.9:1/0' and "
        "e.get('AWS_SECRET_ACCESS_KEY') == 's3cret' and e.get('CCSCOPE_WORKER_IN_NETNS') == '1' and "
        "'CCSCOPE_WORKER_ACCESS' not in e else 9)"
    )
    assert run_in_vantage_netns("far", ["--delay", "1"], [sys.executable, "-c", check]) == 0
