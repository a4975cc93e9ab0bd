"""What the host took from this machine's CPUs while something ran.

On a virtual machine the hypervisor can stop a vCPU outright (the guest's "steal" time). On
the 2-core VM the lab runs on, ftrace shows whole-CPU freezes of ~100 ms, no interrupt or
event in between and every expired timer firing at once after, whatever the guest's own load
(a SCHED_FIFO sleeper idle beside it sees them too). No emulator in the guest can keep its
timing through one: a packet due in a freeze leaves up to 100 ms late. Measurements record
the steal over their run so a distorted one can be told from an emulator that fell behind.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class CpuTimes:
    """The aggregate `cpu` line of /proc/stat, in clock ticks, summed over every CPU."""

    total: int
    steal: int


def cpu_times(path: Path = PROC_STAT) -> CpuTimes | None:
    """The counters now; None where the file is missing or not in the expected shape."""
    try:
        first = path.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu" or len(first) < 9:
        return None
    try:
        v = [int(x) for x in first[1:9]]  # user nice system idle iowait irq softirq steal
    except ValueError:
        return None
    return CpuTimes(total=sum(v), steal=v[7])


def steal_between(a: CpuTimes | None, b: CpuTimes | None) -> dict[str, Any] | None:
    """CPU time the hypervisor took between two readings (seconds, summed over CPUs) and its
    share of all CPU time in that span."""
    if a is None or b is None or b.total < a.total or b.steal < a.steal:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    span = b.total - a.total
    return {
        "steal_s": round((b.steal - a.steal) / tick, 3),
        "steal_share": round((b.steal - a.steal) / span, 4) if span else 0.0,
    }


@dataclass(frozen=True)
class CpuBusy:
    """One CPU's `cpuN` line of /proc/stat, in clock ticks, and when it was read.

    The busy fields (user, nice, system, irq, softirq) are sampled at the timer tick, and a CPU
    that sleeps between short bursts of work stops its tick while idle: a loopback transfer of
    small writes on one CPU shows half its processes' CPU time there. The idle and iowait fields
    are kept exactly (the idle loop's own clock), so busy time is read as the wall-clock span
    less them and the steal."""

    ticked_busy: int  # user + nice + system + irq + softirq
    idle: int  # idle + iowait
    steal: int
    at: float  # time.monotonic() of the reading


def cpu_busy_by_cpu(path: Path = PROC_STAT) -> dict[int, CpuBusy]:
    """Each CPU's counters now ({} where the file is missing or not in the expected shape)."""
    at = time.monotonic()
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    out: dict[int, CpuBusy] = {}
    for line in lines:
        f = line.split()
        if len(f) < 9 or not f[0].startswith("cpu") or not f[0][3:].isdigit():
            continue
        try:
            user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f[1:9])
        except ValueError:
            return {}
        out[int(f[0][3:])] = CpuBusy(user + nice + system + irq + softirq, idle + iowait, steal, at)
    return out


def busy_between(a: dict[int, CpuBusy], b: dict[int, CpuBusy]) -> dict[int, dict[str, float]]:
    """Per CPU between two readings, in seconds: busy (the span less idle, iowait and steal),
    the tick-sampled busy fields beside it, steal, and the span (CPUs missing from either
    reading, or whose counters went back, are left out)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, dict[str, float]] = {}
    for cpu, x in a.items():
        y = b.get(cpu)
        if y is None or y.ticked_busy < x.ticked_busy or y.idle < x.idle or y.steal < x.steal or y.at < x.at:
            continue
        span = y.at - x.at
        idle, steal = (y.idle - x.idle) / tick, (y.steal - x.steal) / tick
        out[cpu] = {
            "busy_s": max(0.0, span - idle - steal),
            "ticked_busy_s": (y.ticked_busy - x.ticked_busy) / tick,
            "steal_s": steal,
            "span_s": span,
        }
    return out
