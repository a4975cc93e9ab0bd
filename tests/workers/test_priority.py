"""A worker's threads run ahead of the downloads they check; the downloads do not inherit it.
Each case runs in a child process, so the test process keeps its own priority."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from ccscope.capture.shell import link_binary


def _child(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=60, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="a negative nice needs CAP_SYS_NICE")
def test_every_thread_and_later_ones_take_the_worker_nice() -> None:
    out = _child(
        """
        import os, threading
        from ccscope.workers.priority import raise_priority
        stop = threading.Event()
        t = threading.Thread(target=stop.wait); t.start()
        n = raise_priority(-7)
        later = []
        u = threading.Thread(target=lambda: later.append(os.getpriority(os.PRIO_PROCESS, 0)))
        u.start(); u.join()
        print(n, os.getpriority(os.PRIO_PROCESS, t.native_id), os.getpriority(os.PRIO_PROCESS, 0), later[0])
        stop.set(); t.join()
        """
    )
    n, started, main, later = map(int, out.split())
    assert n >= 2 and (started, main, later) == (-7, -7, -7)


@pytest.mark.skipif(os.geteuid() != 0, reason="the shell needs root")
def test_a_download_in_the_shell_runs_at_nice_0() -> None:
    # The shell takes SCHED_FIFO with SCHED_RESET_ON_FORK: what it starts is back at nice 0.
    out = _child(
        f"""
        import subprocess
        from ccscope.workers.priority import raise_priority
        raise_priority(-10)
        cmd = ["{link_binary()}", "--quiet", "--keep-root", "--no-nat", "--", "sh", "-c",
               "cut -d' ' -f19 /proc/self/stat"]
        print(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip())
        """
    )
    assert out == "0"


def test_zero_leaves_the_priority_alone() -> None:
    out = _child(
        """
        import os
        from ccscope.workers.priority import raise_priority
        before = os.getpriority(os.PRIO_PROCESS, 0)
        print(raise_priority(0), os.getpriority(os.PRIO_PROCESS, 0) - before)
        """
    )
    assert out == "0 0"
