"""Python side of the delay shell: find `ccscope-link`, turn a Profile into its options, run.

The emulator itself is native (capture/link, Rust); this module only builds command lines and
collects what the emulator leaves behind (pcap, stats JSON, exit status).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccscope.capture.binaries import find_built
from ccscope.capture.host import cpu_times, steal_between
from ccscope.errors import EXIT_SETUP, ShellError
from ccscope.profile import Profile
from ccscope.settings import settings

_REPO_BINARY = Path(__file__).resolve().parent / "link" / "target" / "release" / "ccscope-link"


def link_binary() -> Path:
    """The emulator binary: $CCSCOPE_LINK, the repository build, or one on PATH."""
    found = find_built("ccscope-link", settings().link, _REPO_BINARY)
    if found is None:
        raise ShellError(
            "ccscope-link is not built: run `make setup` (or `cargo build --release` in capture/link)"
        )
    return found


def link_argv(options: Sequence[str], cmd: Sequence[str], *, keep_root: bool = False) -> list[str]:
    """Every ccscope-link command line is built here: `options` are link options, `cmd` runs
    inside. `keep_root`: the command needs root inside the shell (a nested shell, a lab server
    that sets CCAs or routes). Without it the emulator runs the command unprivileged (the
    `ccscope` user, no capabilities, a scrubbed environment)."""
    return [str(link_binary()), *options, *(["--keep-root"] if keep_root else []), "--", *cmd]


def shell_command(
    cmd: Sequence[str],
    profile: Profile | None = None,
    *,
    pcap: Path | None = None,
    stats: Path | None = None,
    hosts: Path | None = None,
    extra: Sequence[str] = (),
    outer: Sequence[str] = (),
    layers: Sequence[Sequence[str]] = (),
) -> list[str]:
    """The emulator command line. `outer` (link options) wraps the shell in another one, as
    mahimahi's shells nest: e.g. a vantage point's access path around a measurement profile.
    `layers` wraps it in several, outermost first (`outer`, if given, sits inside them).
    The command runs unprivileged (no capabilities, a scrubbed environment); an outer shell
    keeps root, which the inner one needs to build its namespace, and drops it itself."""
    opts: list[str] = []
    if profile is not None:
        opts += profile.link_args()
    if pcap is not None:
        opts += ["--pcap", str(pcap)]
    if stats is not None:
        opts += ["--stats", str(stats)]
    if hosts is not None:
        opts += ["--hosts", str(hosts)]
    args = link_argv([*opts, *extra, "--quiet"], cmd)
    wraps = [*layers, *([outer] if outer else [])]
    for layer in reversed(wraps):
        args = link_argv([*layer, "--quiet"], args, keep_root=True)
    return args


class StopSignal(threading.Event):
    """An Event that also calls back when set: adaptive stopping's "the verdict has settled".

    A shell subscribes to end its command the moment it is set, so no thread per shell polls
    the event (two shells per measurement at 10 Hz each were hundreds of wake-ups a second in
    a loaded worker), and the download ends the moment the verdict settles, not up to 100 ms
    later."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next = 0

    def set(self) -> None:
        super().set()
        with self._lock:
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        for cb in callbacks:
            cb()

    def subscribe(self, cb: Callable[[], None]) -> int | None:
        """Call `cb` once when set (now, if it already is); the token unsubscribes."""
        with self._lock:
            if not self.is_set():
                self._next += 1
                self._callbacks[self._next] = cb
                return self._next
        cb()
        return None

    def unsubscribe(self, token: int | None) -> None:
        if token is not None:
            with self._lock:
                self._callbacks.pop(token, None)


@dataclass
class ShellRun:
    returncode: int
    stdout: str
    stderr: str
    stats: dict[str, Any] | None
    pcap: Path | None
    timed_out: bool = False  # stopped by run_in_shell's timeout
    stopped: bool = False  # stopped on request (`stop` set: adaptive stopping)

    @property
    def setup_failed(self) -> bool:
        # The emulator exits EXIT_SETUP with "ccscope-link: error:" when it could not build the link.
        return self.returncode == EXIT_SETUP and "ccscope-link: error" in self.stderr


def run_in_shell(
    cmd: Sequence[str],
    profile: Profile | None = None,
    *,
    pcap: Path | None = None,
    stats: Path | None = None,
    hosts: Path | None = None,
    extra: Sequence[str] = (),
    outer: Sequence[str] = (),
    layers: Sequence[Sequence[str]] = (),
    timeout: float | None = None,
    stop: StopSignal | None = None,
) -> ShellRun:
    """Run `cmd` inside a fresh shell and wait for it; never leaves the shell behind. Setting
    `stop` ends the command early: the emulator passes SIGTERM on to it (the fetch client then
    reports what it has) and writes out the capture, as at a normal end."""
    argv = shell_command(
        cmd, profile, pcap=pcap, stats=stats, hosts=hosts, extra=extra, outer=outer, layers=layers
    )
    cpu0 = cpu_times()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped = threading.Event()
    token: int | None = None

    def end() -> None:
        if proc.poll() is None:
            stopped.set()
            proc.terminate()

    if stop is not None:
        token = stop.subscribe(end)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        # SIGTERM lets the emulator forward the signal, flush the pcap and tear down.
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        err += f"\nccscope: command timed out after {timeout:g} s"
    finally:
        if stop is not None:
            stop.unsubscribe(token)
    stats_doc = None
    if stats is not None and stats.exists():
        try:
            stats_doc = json.loads(stats.read_text())
        except (OSError, ValueError):
            stats_doc = None
    if isinstance(stats_doc, dict) and stats is not None:
        # Beside the emulator's own figures: what the hypervisor took meanwhile (capture/host.py).
        stats_doc["host"] = steal_between(cpu0, cpu_times())
        with contextlib.suppress(OSError):
            stats.write_text(json.dumps(stats_doc))
    run = ShellRun(
        proc.returncode,
        out,
        err,
        stats_doc,
        pcap if pcap and pcap.exists() else None,
        timed_out,
        stopped.is_set(),
    )
    if run.setup_failed:
        raise ShellError(err.strip().splitlines()[-1] if err.strip() else "ccscope-link failed")
    return run
