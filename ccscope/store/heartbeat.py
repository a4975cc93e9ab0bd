"""One heartbeat thread per store for every running measurement of the process.

A worker running K measurements once kept K beating threads, each taking a pooled connection
for its own transaction every few seconds; at K = 128 they held the pool (20 + 40) long enough
that beats queued past their leases and live runs lost their sites (bench/scale, 2026-11-27).
Here one thread beats every claim that is due (or nearly: beats due within half an interval
ride along) in one transaction, so the beats of a whole worker cost one connection at a time.

Each claim keeps the guarantees it had with a thread of its own: its `lost` Event is set when a
beat finds the claim gone or the run outlives `max_seconds`; a failed batch (database away) is
logged and retried at the claim's next interval; and leaving `keep_alive` waits for a batch in
flight that holds the claim, so no beat of a run lands after its block ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("ccscope.store")

# Beats due within this share of their interval are sent with the batch now: one transaction
# instead of several a few milliseconds apart, and no beat later than its interval.
COALESCE = 0.5


@dataclass(eq=False)
class Claim:
    measurement_id: int
    holder: str
    lease_seconds: float
    every: float
    until: float | None  # monotonic time after which the run counts as stuck
    due: float
    lost: threading.Event = field(default_factory=threading.Event)


# (claims) -> {measurement_id: still ours}; raises if the database cannot be reached.
BeatMany = Callable[[Sequence[Claim]], dict[int, bool]]


class Heartbeats:
    """The registry and its thread; the thread runs while any claim is registered."""

    def __init__(self, beat_many: BeatMany) -> None:
        self._beat_many = beat_many
        self._claims: set[Claim] = set()  # by identity (eq=False): one run may re-register
        self._inflight: set[Claim] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, measurement_id: int, holder: str, lease_seconds: float, every: float,
            max_seconds: float | None) -> Claim:  # fmt: skip
        now = time.monotonic()
        claim = Claim(measurement_id, holder, lease_seconds, every,
                      now + max_seconds if max_seconds is not None else None, now + every)  # fmt: skip
        with self._cond:
            self._claims.add(claim)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return claim

    def remove(self, claim: Claim) -> None:
        """Unregister, after any batch in flight that holds the claim has finished."""
        with self._cond:
            self._claims.discard(claim)
            while claim in self._inflight:
                self._cond.wait()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._claims:
                        self._thread = None
                        return
                    now = time.monotonic()
                    soonest = min(c.due for c in self._claims)
                    if soonest <= now:
                        break
                    self._cond.wait(None if soonest == float("inf") else soonest - now)
                batch = self._due(now)
                self._inflight = set(batch)
            try:
                self._send(batch)
            finally:
                with self._cond:
                    self._inflight = set()
                    self._cond.notify_all()

    def _due(self, now: float) -> list[Claim]:
        batch = []
        for c in self._claims:
            if c.due > now + COALESCE * c.every:
                continue
            c.due = now + c.every
            if c.until is not None and now > c.until:
                if not c.lost.is_set():
                    log.warning("measurement %s: still running past its longest; no more beats",
                                c.measurement_id)  # fmt: skip
                    c.lost.set()
                c.due = float("inf")  # a stuck run beats no more: its row goes stale
                continue
            batch.append(c)
        return batch

    def _send(self, batch: list[Claim]) -> None:
        if not batch:
            return
        try:
            alive = self._beat_many(batch)
        except Exception as e:  # each claim tries again at its next interval
            log.warning("heartbeat of %d measurement(s) failed: %s", len(batch), e)
            return
        for c in batch:
            if not alive.get(c.measurement_id, False) and not c.lost.is_set():
                log.warning("measurement %s: lost its lease or was requeued", c.measurement_id)
                c.lost.set()
