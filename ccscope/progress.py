"""Progress on stderr for commands that run longer than a few seconds.

Bars (tqdm) only when stderr is a terminal: logs and pipes stay quiet. `Steps` also prints one
line per step when asked, for commands whose steps are worth a line in a log (`ccscope check`).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def interactive() -> bool:
    return sys.stderr.isatty()


def bar(total: int | None, desc: str, unit: str = "it") -> Any:
    """A tqdm bar on stderr, disabled (a no-op object) when stderr is not a terminal."""
    from tqdm import tqdm

    # A terminal that reports no size (some ptys, `script`) would get zero-width bars, or none
    # at all (tqdm hides bars below the screen's height).
    size = shutil.get_terminal_size((80, 24))
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        disable=not interactive(),
        leave=False,
        ncols=size.columns or 80,
        nrows=size.lines or 24,
    )


@contextmanager
def ticking(desc: str, expected_s: float | None = None) -> Iterator[None]:
    """An elapsed-seconds bar while a block runs (against `expected_s` when known)."""
    b = bar(round(expected_s) if expected_s else None, desc, unit="s")
    if b.disable:
        yield
        return
    stop = threading.Event()
    t0 = time.monotonic()

    def tick() -> None:
        while not stop.wait(0.5):
            el = int(time.monotonic() - t0)
            b.update(max(0, min(el, b.total or el) - b.n))

    th = threading.Thread(target=tick, daemon=True)
    th.start()
    try:
        yield
    finally:
        stop.set()
        th.join()
        b.close()


class Steps:
    """Numbered steps of one command: `step("crawling")` prints `[1/4] crawling` on stderr
    (always when `lines`, else only on a terminal)."""

    def __init__(self, total: int, *, lines: bool = True, prog: str = "ccscope") -> None:
        self.total, self.n, self.lines, self.prog = total, 0, lines, prog

    def step(self, msg: str) -> None:
        self.n += 1
        if self.lines or interactive():
            print(f"{self.prog}: [{self.n}/{self.total}] {msg}", file=sys.stderr, flush=True)
