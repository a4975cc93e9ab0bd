"""Run a child process with SIGTERM/SIGINT passed on, and keep a Celery worker running.

`ccscope worker` runs the Celery worker as a child it restarts: when the broker goes away,
kombu's Redis transport can end the worker with an "Unrecoverable error" while it reconnects
(an AttributeError from closing a channel whose pool is already gone), whatever the retry
settings say. Its unacknowledged measurements are safe in the broker (restored after the
visibility timeout) and in the store's state machine; the worker only has to come back.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from ccscope.errors import EXIT_INTERRUPTED

PR_SET_PDEATHSIG = 1
# Loaded before any fork: the child between fork and exec may only make the call.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:
    # A supervisor that is killed (its vantage shell torn down, a SIGKILL) must not leave the
    # worker running on, orphaned, in a namespace nobody owns any more.
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Child:
    """One run of `argv`; a SIGTERM or SIGINT this process receives goes to the child."""

    def __init__(self) -> None:
        self.stopping = threading.Event()

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        on_stderr: Callable[[str], None] | None = None,
    ) -> int:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            stderr=subprocess.PIPE if on_stderr else None,
            text=True,
            errors="replace",
            preexec_fn=_die_with_parent,
        )
        relay = None
        if on_stderr is not None:

            def pump() -> None:
                assert proc.stderr is not None
                for line in proc.stderr:
                    on_stderr(line)

            relay = threading.Thread(target=pump, daemon=True)
            relay.start()

        def forward(signum: int, _frame: object) -> None:
            self.stopping.set()
            if proc.poll() is None:
                proc.send_signal(signum)

        old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            rc = proc.wait()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        if relay is not None:
            relay.join(5)
        return rc


def supervise(argv: Sequence[str], what: str, *, max_delay: float = 30.0) -> int:
    """Run `argv` until it exits cleanly or is told to stop; restart it (backoff 2 s doubling
    to `max_delay`, reset after a minute of running) when it dies on its own."""
    child = Child()
    delay = 2.0
    while True:
        started = time.monotonic()
        rc = child.run(argv)
        if child.stopping.is_set():
            return EXIT_INTERRUPTED if rc else 0
        if rc == 0:
            return 0
        if time.monotonic() - started > 60:
            delay = 2.0
        print(
            f"ccscope worker: {what} exited with status {rc} (a broker that went away ends it); "
            f"restarting in {delay:g} s",
            file=sys.stderr,
            flush=True,
        )
        if child.stopping.wait(delay):
            return EXIT_INTERRUPTED
        delay = min(max_delay, delay * 2)
