"""The measuring process ahead of the load it measures.

A worker's own threads (adaptive stopping's checks, reading captures, classifying, the
store) share the CPUs with everything its measurements start: two download clients and two
emulators per measurement, and on a lab host the lab's servers. At K = 32 on 2 cores the
process got ~0.2 of a core as one SCHED_OTHER task among ~70: most checks waited until their
downloads had ended (bench/scale, `checks`), so downloads ran to their cap (~37 s against
~19 s to a settled verdict), and those extra seconds of emulation and download were the load
that starved the checks. A check that ends a download early saves far more CPU than it takes,
so `CCSCOPE_WORKER_NICE` can run the process at a lower nice value than its children (CFS
weight ~9x at -10): still fair scheduling, nothing starved outright, unlike a real-time policy.

It is off (0) by default, measured: at -10 a sweep batch of 64 (bench/scale, 2026-11-28) did
1,159 sites per hour against 932 at 0, but named 28 right, 27 Unknown, 8 insufficient and 1
wrong against 49 / 15 / 0 / 0 (at K = 128: 63 / 42 / 22 / 1 against 76 / 36 / 16 / 0). The CPU
the worker gains is the download clients' and the lab servers': the flows it measures get
slower receivers and senders, and their traces stop looking like their CCAs. A measurement
tool that distorts what it measures to go faster is not one; the checks need CPU that is not
taken from the downloads (their own process off the worker's interpreter, cheaper checks).

The download clients do not inherit it: ccscope-link forks its command before it takes
SCHED_FIFO, so the command would, and the child resets a negative nice to 0 before exec
(capture/link/src/shell.rs, child_exec); the lab's servers run inside ccscope-link shells too.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger("ccscope.workers")


def raise_priority(nice: int) -> int:
    """Set every thread of this process to `nice` (Linux nice is per thread; threads started
    later inherit their creator's). Returns how many threads took it; 0 without the privilege
    (CAP_SYS_NICE), where the process keeps its priority and a debug line says why."""
    if nice == 0:
        return 0
    done = 0
    tasks = Path("/proc/self/task")
    tids = [int(p.name) for p in tasks.iterdir()] if tasks.is_dir() else [0]
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            done += 1
        except ProcessLookupError:
            continue  # the thread ended meanwhile
        except (PermissionError, OSError) as e:
            log.debug("worker priority left as it is: %s", e)
            break
    return done


def apply_from_settings() -> int:
    """`raise_priority` at CCSCOPE_WORKER_NICE (0, the default, leaves it)."""
    from ccscope.settings import settings

    with contextlib.suppress(Exception):  # a priority is an optimisation, never a failure
        return raise_priority(int(settings().worker_nice))
    return 0
