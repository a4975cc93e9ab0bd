"""Where a measurement's CPU goes on the measuring side, by stage (bench/scale --part cpu).

`install()` wraps the pipeline's stage functions in the running process so that each call's
thread CPU time (CLOCK_THREAD_CPUTIME_ID) is charged to its stage, exclusive of the stages
nested in it, under the path of stages it ran in ("check_classify/classify": the classifier
called by an adaptive-stopping check; "final_classify_other/classify": by the final verdict).
What runs in other processes is read from their own accounts: each shell's ccscope-link from
its stats file (getrusage of the emulator), each download client from its report (`cpu_s`,
getrusage of the client's process, its interpreter start-up and imports included); the rest of
the census process's children (ip/nft helpers the emulator runs) is what wait4's rusage holds
beyond those. Measurement only: nothing here changes what the pipeline does.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

_local = threading.local()
_lock = threading.Lock()
TOTALS: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
# The store's stage by method (exclusive CPU, calls): which round trips a measurement makes.
METHODS: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])


def _wrap(stage: str, fn: Callable[..., Any], by_method: bool = False) -> Callable[..., Any]:
    @functools.wraps(fn)
    def inner(*a: Any, **kw: Any) -> Any:
        stack: list[list[Any]] = getattr(_local, "stack", None) or []
        _local.stack = stack
        key = f"{stack[-1][2]}/{stage}" if stack else stage
        frame = [time.thread_time(), 0.0, key]  # start, CPU of nested stages, where
        stack.append(frame)
        try:
            return fn(*a, **kw)
        finally:
            stack.pop()
            spent = time.thread_time() - frame[0]
            if stack:
                stack[-1][1] += spent
            with _lock:
                TOTALS[key] += spent - frame[1]
                CALLS[key] += 1
                if by_method:
                    METHODS[fn.__name__][0] += spent - frame[1]
                    METHODS[fn.__name__][1] += 1

    inner.__wrapped_stage__ = stage  # type: ignore[attr-defined]
    return inner


def _patch(obj: Any, name: str, stage: str, by_method: bool = False) -> None:
    fn = getattr(obj, name)
    if getattr(fn, "__wrapped_stage__", None):
        return
    setattr(obj, name, _wrap(stage, fn, by_method))


def install() -> None:
    """Wrap the stages. Modules that import a name at call time (`from x import f` inside a
    function) see the wrapper, since they look it up on the module each time."""
    import ccscope.capture.measure as measure
    import ccscope.capture.tcp_bif as tcp_bif
    import ccscope.classifier as classifier_pkg
    import ccscope.classifier.core as core
    import ccscope.crawler.site as crawler
    import ccscope.lab.groundtruth as gt
    import ccscope.workers.tasks as tasks
    from ccscope.store.core import Store
    from ccscope.trace import Trace

    _patch(measure._Watcher, "_live", "check_pcap_to_trace")
    _patch(measure._Watcher, "_classify", "check_classify")
    _patch(tcp_bif, "flows_from_pcap_aligned", "pcap_to_trace")
    _patch(classifier_pkg, "classify", "classify")
    _patch(core, "classify", "classify")
    for name in ("find_groundtruth", "compare_bif", "compare_pipe"):
        _patch(gt, name, "lab_groundtruth")
    _patch(Trace, "save", "trace_json_write")
    _patch(Trace, "_read", "trace_json_read")
    _patch(tasks, "_classify_stored", "final_classify_other")
    _patch(crawler, "pick_object", "crawl")
    for name in dir(Store):
        if name.startswith("_") or not callable(getattr(Store, name, None)):
            continue
        if name in ("keep_alive",):  # a context manager: its beats are `heartbeat` calls
            continue
        _patch(Store, name, "store", by_method=True)


def snapshot() -> dict[str, dict[str, float]]:
    with _lock:
        return {k: {"cpu_s": round(v, 3), "calls": CALLS[k]} for k, v in sorted(TOTALS.items())}


def store_methods() -> dict[str, dict[str, float]]:
    """The store's CPU and calls by method, the costliest first."""
    with _lock:
        rows = sorted(METHODS.items(), key=lambda kv: -kv[1][0])
        return {k: {"cpu_s": round(v[0], 3), "calls": int(v[1])} for k, v in rows}


# Everything a check does (reading the pcap so far, classifying it) is the check's, whatever it
# calls; elsewhere a stage belongs to the group of the innermost stage.
_OUTER = {
    "check_pcap_to_trace": "checks_pcap_to_trace",
    "check_classify": "checks_classify",
    "lab_groundtruth": "lab_groundtruth",
}
_INNER = {
    "pcap_to_trace": "final_pcap_to_trace",
    "classify": "final_classify",
    "final_classify_other": "final_classify",
    "trace_json_write": "trace_json",
    "trace_json_read": "trace_json",
    "crawl": "crawl",
    "store": "store",
}
GROUPS = (*_OUTER.values(), *dict.fromkeys(_INNER.values()))


def group(stages: dict[str, dict[str, float]]) -> dict[str, float]:
    """CPU seconds per group from snapshot()'s stage paths."""
    out = dict.fromkeys(GROUPS, 0.0)
    for path, v in stages.items():
        parts = path.split("/")
        name = _OUTER.get(parts[0]) or _INNER[parts[-1]]
        out[name] += v["cpu_s"]
    return out
