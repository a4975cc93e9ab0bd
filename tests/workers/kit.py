"""Shared by the worker tests and `bench/chaos`: a Redis broker of one's own and worker
processes started in their own process groups, each waited for until it is ready.

A worker runs in a session of its own so that a kill takes its whole group (the worker, its
shells and the downloads in flight), as a crash of the host's worker unit would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_tcp(
    host: str, port: int, timeout: float, what: str, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Until `host:port` accepts a connection; RuntimeError after `timeout` s or when `proc`
    (the server) has exited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
                raise RuntimeError(f"{what} did not come up on {host}:{port}") from None
            time.sleep(0.1)


class RedisServer:
    """redis-server on `host` (a free port unless given), its log and data under `d`.

    `durable`: an append-only file synced on every write, so a restarted broker still has every
    queued and every unacknowledged message; otherwise nothing is kept on disk."""

    def __init__(
        self,
        d: Path,
        *,
        host: str = "127.0.0.1",
        bind: str | None = None,
        port: int | None = None,
        durable: bool = True,
        extra: Sequence[str] = (),
        timeout: float = 10,
    ) -> None:
        self.dir, self.host, self.bind = d, host, bind or host
        self.port = port or free_port(host)
        self.durable, self.extra, self.timeout = durable, tuple(extra), timeout
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def log(self) -> Path:
        return self.dir / "redis.log"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (apt-get install -y redis-server)")
        aof = ["--appendonly", "yes", "--appendfsync", "always"] if self.durable else ["--appendonly", "no"]
        self.dir.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [exe, "--port", str(self.port), "--bind", self.bind, "--save", "", *aof, "--daemonize", "no",
                 "--dir", str(self.dir), *self.extra],
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        # Ready when it answers PING: a restarted broker accepts connections while it still
        # loads its append-only file.
        deadline = time.monotonic() + self.timeout
        while not self._pong():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                tail = self.log.read_text(errors="replace")[-500:]
                raise RuntimeError(f"redis-server did not start: {tail}")
            time.sleep(0.1)

    def _pong(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as c:
                c.sendall(b"PING\r\n")
                return c.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class GroupProcess:
    """`cmd` started (and restarted) in a session of its own, its output appended to `log`."""

    def __init__(self, cmd: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> None:
        self.cmd, self.log, self.env = list(cmd), log, dict(env) if env is not None else None
        self.proc: subprocess.Popen[bytes] | None = None
        self._mark = 0  # the log's size at the last start: what this run wrote comes after it

    def start(self) -> None:
        self._mark = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, marker: str = "ready.", timeout: float = 60) -> bool:
        """Whether this run logged `marker` within `timeout` s (False as soon as it exits)."""
        needle = marker.encode()
        deadline = time.monotonic() + timeout
        while True:
            with self.log.open("rb") as f:
                f.seek(self._mark)
                if needle in f.read():
                    return True
            if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL to the whole group."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM to the whole group, SIGKILL if it is still there after `timeout` s."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()


def proc_stats() -> Iterator[tuple[int, str, list[str]]]:
    """(pid, command name, the /proc/PID/stat fields after the name) of every live process;
    fields[1] is the parent pid, fields[2] the process group, fields[11:15] the CPU ticks (utime,
    stime, and those of reaped children)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        yield int(d.name), stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()


def group_pids(pgid: int, comm: str) -> list[int]:
    """Pids of process group `pgid` whose command name starts with `comm`."""
    return [pid for pid, name, f in proc_stats() if int(f[2]) == pgid and name.startswith(comm[:15])]
