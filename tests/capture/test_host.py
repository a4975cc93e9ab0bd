"""The hypervisor's steal time from /proc/stat: read right, and nothing invented from a file
that is missing, cut short or not in the kernel's shape."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

from ccscope.capture.host import CpuTimes, cpu_times, steal_between

LINE = "cpu  1580766 270 1095605 2129206 6833 0 18722 52990 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"


def test_reads_the_aggregate_line(tmp_path: Path) -> None:
    f = tmp_path / "stat"
    f.write_text(LINE)
    got = cpu_times(f)
    assert got == CpuTimes(total=1580766 + 270 + 1095605 + 2129206 + 6833 + 0 + 18722 + 52990, steal=52990)


def test_this_machine_has_the_counters() -> None:
    a = cpu_times()
    assert a is not None and a.total > 0 and a.steal >= 0


def test_bad_files_give_none(tmp_path: Path) -> None:
    for text in ("", "intr 1 2 3\n", "cpu 1 2 3\n", "cpu a b c d e f g h\n"):
        f = tmp_path / "stat"
        f.write_text(text)
        assert cpu_times(f) is None, text
    assert cpu_times(tmp_path / "missing") is None


def test_steal_between() -> None:
    import os

    tick = os.sysconf("SC_CLK_TCK")
    got = steal_between(CpuTimes(1000, 10), CpuTimes(1000 + 4 * tick, 10 + tick))
    assert got == {"steal_s": 1.0, "steal_share": 0.25}
    # A counter that went backwards (a different boot, a bad read) says nothing.
    assert steal_between(CpuTimes(1000, 10), CpuTimes(900, 10)) is None
    assert steal_between(None, CpuTimes(1, 1)) is None


def test_per_cpu_busy(tmp_path: Path) -> None:
    from ccscope.capture.host import busy_between, cpu_busy_by_cpu

    f = tmp_path / "stat"
    f.write_text(LINE + "cpu1 10 0 20 100 5 1 4 2 0 0\nintr 1 2\n")
    got = cpu_busy_by_cpu(f)
    assert set(got) == {0, 1}
    # ticked busy = user + nice + system + irq + softirq; idle with iowait; steal apart
    assert (got[0].ticked_busy, got[0].idle, got[0].steal) == (1 + 2 + 3 + 6 + 7, 4 + 5, 8)
    assert (got[1].ticked_busy, got[1].idle, got[1].steal) == (35, 105, 2)
    tick = os.sysconf("SC_CLK_TCK")
    a0 = replace(got[0], at=100.0)
    later = {0: replace(a0, ticked_busy=a0.ticked_busy + tick, idle=a0.idle + tick, at=104.0),
             1: replace(got[1], ticked_busy=30, at=104.0)}  # fmt: skip
    # 4 s of wall clock, 1 s idle: 3 s busy, though the tick saw only 1 of them. CPU 1's busy
    # counter went back: left out, not a negative figure.
    assert busy_between({0: a0, 1: got[1]}, later) == {
        0: {"busy_s": 3.0, "ticked_busy_s": 1.0, "steal_s": 0.0, "span_s": 4.0}
    }


def test_per_cpu_busy_sees_a_pinned_spin() -> None:
    """Half a second of spinning on CPU 0 is there in CPU 0's busy time."""
    from ccscope.capture.host import busy_between, cpu_busy_by_cpu

    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        a = cpu_busy_by_cpu()
        t = time.process_time()
        while time.process_time() - t < 0.5:
            pass
        got = busy_between(a, cpu_busy_by_cpu())[0]
    finally:
        os.sched_setaffinity(0, mine)
    assert 0.45 <= got["busy_s"] <= got["span_s"] + 1e-6


def test_per_cpu_bad_files(tmp_path: Path) -> None:
    from ccscope.capture.host import cpu_busy_by_cpu

    assert cpu_busy_by_cpu(tmp_path / "missing") == {}
    f = tmp_path / "stat"
    f.write_text("cpu0 a b c d e f g h\n")
    assert cpu_busy_by_cpu(f) == {}
    f.write_text("cpu0 1 2 3\ncpux 1 2 3 4 5 6 7 8\n")  # too short, not a CPU number
    assert cpu_busy_by_cpu(f) == {}
