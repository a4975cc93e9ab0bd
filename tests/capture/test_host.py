"""The hypervisor's steal time from /proc/stat: read right, and nothing invented from a file
that is missing, cut short or not in the kernel's shape."""

from __future__ import annotations

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
