"""Adaptive stopping's watcher under load: checks slower than their interval must neither pile up
nor outlive the downloads (a watcher behind its ticks would classify finished downloads until
its verdict settled: never, for an unsettled one)."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import pytest

from ccscope.capture.measure import CheckGate, _Watcher
from ccscope.capture.shell import StopSignal
from ccscope.classifier.stopping import StoppingRule
from ccscope.verdict import Verdict


class _Growing(_Watcher):
    """The captures replaced by traces that hold the seconds since the start."""

    t0 = time.monotonic()

    def _live(self, profile):  # type: ignore[no-untyped-def]
        held = time.monotonic() - self.t0
        return SimpleNamespace(duration=held, head=lambda s: SimpleNamespace(duration=min(s, held)))


def _watcher(tmp_path: Path, classify, rule: StoppingRule) -> tuple[_Growing, StopSignal]:  # type: ignore[no-untyped-def]
    stop = StopSignal()
    w = _Growing("http://s.lab.test/x", ("A", "B"), tmp_path, "tcp", rule, classify, stop)
    w.t0 = time.monotonic()
    return w, stop


def _run_with_every_slot_held(w: _Growing, seconds: float) -> None:
    """Run the watcher (downloads that never end) while other checks hold every slot of the
    process's gate for `seconds`; it must return within 10 s."""
    from ccscope.capture import measure

    held = [measure.CHECKS.acquire(lambda: False) for _ in range(measure.CHECKS.slots)]
    threading.Timer(seconds, lambda: [measure.CHECKS.release() for _ in held]).start()
    never: list[Future[None]] = [Future()]
    t = threading.Thread(target=w.run, args=(never,))
    t.start()
    t.join(timeout=10)
    assert not t.is_alive()


def _unsettled(calls: list[float], cost: float):  # type: ignore[no-untyped-def]
    def classify(traces):  # type: ignore[no-untyped-def]
        calls.append(time.monotonic())
        time.sleep(cost)  # slower than the interval, as on an overloaded host
        # Never settles: a different verdict each time.
        return Verdict("cubic" if len(calls) % 2 else "reno", "cca", 0.9, "", "test")

    return classify


def test_slow_checks_do_not_outlive_the_downloads(tmp_path: Path) -> None:
    calls: list[float] = []
    rule = StoppingRule(every_s=0.05, min_s=0.0, stable=3, min_p=0.0)
    w, stop = _watcher(tmp_path, _unsettled(calls, 0.2), rule)
    downloads: list[Future[None]] = [Future(), Future()]
    threading.Timer(1.0, lambda: [f.set_result(None) for f in downloads]).start()
    t = time.monotonic()
    w.run(downloads)
    took = time.monotonic() - t
    # Returns once the downloads end (plus at most the check in progress), not never.
    assert took < 1.0 + 0.2 + 1.0, took
    assert not stop.is_set() and not w.record["settled"]
    # A late turn classifies the grid points it missed, at most `stable` of them, and after
    # each overrunning turn the watcher rests a full interval: turns are not caught up.
    turns = [c["turn"] for c in w.record["checks"]]
    per_turn = [len(list(g)) for _, g in itertools.groupby(turns)]
    assert per_turn and max(per_turn) <= rule.stable, per_turn
    starts = [calls[sum(per_turn[:i])] for i in range(len(per_turn))]
    for i, (a, b) in enumerate(itertools.pairwise(starts)):
        assert b - a >= 0.2 * per_turn[i] + 0.05 * 0.9, (starts, per_turn)


def test_checks_share_the_cores(tmp_path: Path) -> None:
    """More watchers than cores: at most one check per core classifies at once; the rest wait
    their turn, and each still stops when its verdict settles."""
    import os

    busy, peak, lock = [0], [0], threading.Lock()

    def classify(traces):  # type: ignore[no-untyped-def]
        with lock:
            busy[0] += 1
            peak[0] = max(peak[0], busy[0])
        time.sleep(0.02)
        with lock:
            busy[0] -= 1
        return Verdict("cubic", "cca", 0.9, "", "test")

    rule = StoppingRule(every_s=0.02, min_s=0.1, stable=2, min_p=0.5)
    ws = [_watcher(tmp_path, classify, rule) for _ in range(4 * (os.cpu_count() or 1))]
    never: list[Future[None]] = [Future()]
    threads = [threading.Thread(target=w.run, args=(never,)) for w, _ in ws]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert all(not t.is_alive() for t in threads)
    assert all(stop.is_set() and w.record["settled"] for w, stop in ws)
    assert peak[0] <= (os.cpu_count() or 1)


def test_gate_grants_in_turn_and_drops_none() -> None:
    """Checks that fall due while the slots are busy are granted in the order they fell due,
    each exactly once; a waiter whose downloads ended leaves the queue without a slot."""
    gate = CheckGate(1)
    order: list[int] = []
    assert gate.acquire(lambda: False)  # the slot is busy from here
    ended = threading.Event()
    threads = []
    for i in range(5):

        def wait(i: int = i) -> None:
            if gate.acquire(lambda: False):
                order.append(i)
                time.sleep(0.01)
                gate.release()

        threads.append(threading.Thread(target=wait))
        threads[-1].start()
        time.sleep(0.05)  # each falls due after the one before
    gone = threading.Thread(target=lambda: order.append(-1) if gate.acquire(ended.is_set) else None)
    gone.start()
    time.sleep(0.05)
    ended.set()  # its downloads end while it waits: it leaves without a check
    gate.wake()
    gone.join(timeout=5)
    gate.release()
    for t in threads:
        t.join(timeout=5)
    assert order == [0, 1, 2, 3, 4]
    st = gate.stats()
    assert st["granted"] == 6 and st["abandoned"] == 1


def test_busy_checks_are_late_not_lost(tmp_path: Path) -> None:
    """With every slot held by others for longer than the interval, a watcher's check waits
    and is then made (before, it was dropped), so its verdict still settles."""

    rule = StoppingRule(every_s=0.02, min_s=0.0, stable=2, min_p=0.5)
    w, stop = _watcher(tmp_path, lambda traces: Verdict("cubic", "cca", 0.9, "", "test"), rule)
    _run_with_every_slot_held(w, 0.5)
    assert stop.is_set() and w.record["settled"]
    assert w.record["waited_s"] >= 0.4


def test_downloads_ending_wake_a_waiting_watcher(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A watcher queued behind busy slots leaves as soon as its downloads end: the end wakes it,
    nothing has to poll (a gate that re-reads only every 60 s would otherwise hold it)."""
    from ccscope.capture import measure

    class NoPoll(CheckGate):
        def acquire(self, abandon, poll_s: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
            return super().acquire(abandon, poll_s)

    gate = NoPoll(1)
    monkeypatch.setattr(measure, "CHECKS", gate)
    assert gate.acquire(lambda: False)  # every slot busy for the whole test
    rule = StoppingRule(every_s=0.02, min_s=0.0, stable=2, min_p=0.5)
    w, stop = _watcher(tmp_path, lambda traces: Verdict("cubic", "cca", 0.9, "", "test"), rule)
    downloads: list[Future[None]] = [Future(), Future()]
    t = threading.Thread(target=w.run, args=(downloads,))
    t.start()
    deadline = time.monotonic() + 20
    while gate.stats()["waiting"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gate.stats()["waiting"] == 1  # queued behind the busy slot
    for f in downloads:
        f.set_result(None)
    t.join(timeout=20)
    assert not t.is_alive() and not stop.is_set()
    assert gate.stats()["abandoned"] == 1
    gate.release()


def test_stop_signal_calls_back_once_and_forgets_unsubscribed() -> None:
    """A shell subscribed to the stop signal is ended when it is set (once), one subscribing
    after it was set is ended at once, and an unsubscribed one (its command already over) is
    left alone."""
    sig = StopSignal()
    calls: list[str] = []
    sig.subscribe(lambda: calls.append("a"))
    gone = sig.subscribe(lambda: calls.append("gone"))
    sig.unsubscribe(gone)
    sig.set()
    sig.set()  # a second set calls nobody again
    assert sig.subscribe(lambda: calls.append("late")) is None
    assert calls == ["a", "late"] and sig.is_set()


def test_a_late_turn_decides_as_the_on_time_checks_would_have(tmp_path: Path) -> None:
    """Every slot held past the rule's whole window: the watcher's one late turn classifies the
    last `stable` grid points (trace time), as the replay that measured the rule does, and stops
    there, instead of needing `stable` more turns while the downloads run on."""

    rule = StoppingRule(every_s=0.1, min_s=0.3, stable=3, min_p=0.5)
    seen: list[float] = []

    def classify(traces):  # type: ignore[no-untyped-def]
        seen.append(round(min(t.duration for t in traces), 3))
        return Verdict("cubic", "cca", 0.9, "", "test")

    w, stop = _watcher(tmp_path, classify, rule)
    _run_with_every_slot_held(w, 0.8)
    assert stop.is_set() and w.record["settled"]
    # One turn, three grid points in a row, the traces cut at each.
    assert w.record["turns"] == 1 and len(seen) == 3, (seen, w.record)
    assert [b - a for a, b in itertools.pairwise(seen)] == pytest.approx([0.1, 0.1])
    assert w.record["stopped_at_s"] == pytest.approx(seen[-1]) and seen[-1] >= 0.7
