"""When the hypervisor took the CPUs, beside when the emulators released packets late.

A run's steal total says that the VM was frozen at some point, not whether a late packet fell
in a freeze. `StealWatch` reads each CPU's steal counter every 10 ms in a thread of the bench's
own process (not the measuring side's) and keeps the spans where it rose; `attribute` sets each
late packet the emulators remembered (ccscope-link's `late_1ms_marks`: when it was written and
how late, on CLOCK_MONOTONIC, the clock `time.monotonic` reads) against them. /proc/stat counts
steal in clock ticks (10 ms), so a span is widened by one tick each side before it is matched.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from ccscope.capture.host import cpu_busy_by_cpu

PERIOD_S = 0.01
MAX_SPANS = 20  # kept in the JSON, the largest (then by time)
BUCKETS_MS: tuple[tuple[int, int | None], ...] = ((1, 2), (2, 5), (5, 20), (20, None))


class StealWatch:
    def __init__(self, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        self.spans: list[tuple[float, float, int, float]] = []  # (from, to, cpu, steal s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stealwatch", daemon=True)
        self.tick = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> StealWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last = cpu_busy_by_cpu()
        while not self._stop.wait(self.period_s):
            now = cpu_busy_by_cpu()
            for cpu, b in now.items():
                a = last.get(cpu)
                if a is not None and b.steal > a.steal:
                    self.spans.append((a.at, b.at, cpu, (b.steal - a.steal) / self.tick))
            last = now or last


def attribute(
    marks: Sequence[Sequence[Any]], spans: Sequence[tuple[float, float, int, float]], t0: float, tick_s: float
) -> dict[str, Any]:
    """How many late packets (`marks`: [written at, late ms, ...]) were delayed across a span in
    which the hypervisor took a CPU, and the spans themselves (seconds from `t0`)."""
    hit = 0
    by_size = {f"{lo}-{hi}ms" if hi else f"{lo}ms+": [0, 0] for lo, hi in BUCKETS_MS}
    for m in marks:
        at, late_ms = float(m[0]), float(m[1])
        start = at - late_ms / 1000
        frozen = any(a - tick_s <= at and start <= b + tick_s for a, b, _, _ in spans)
        hit += frozen
        for (lo, hi), key in zip(BUCKETS_MS, by_size, strict=True):
            if late_ms >= lo and (hi is None or late_ms < hi):
                by_size[key][0] += 1
                by_size[key][1] += frozen
    big = sorted(spans, key=lambda s: -s[3])[:MAX_SPANS]
    return {
        "late_marks": len(marks),
        "late_marks_in_steal": hit,
        # by how late: [late packets, of which in a freeze]
        "late_marks_by_size": by_size,
        "steal_spans": len(spans),
        "steal_spans_s": round(sum(s[3] for s in spans), 3),
        "steal_spans_largest": [
            {"at_s": round(a - t0, 3), "to_s": round(b - t0, 3), "cpu": c, "steal_ms": round(s * 1000)}
            for a, b, c, s in sorted(big, key=lambda s: s[0])
        ],
    }
