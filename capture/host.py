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
