"""A lab's lease: a long-running user of a lab instance (a collection) holds it, so that
`ccscope lab up`/`down` from another terminal cannot pull the lab out from under its downloads.
Kept apart from lab.py so the collection can take it without importing the lab. A held lock
file carries its holder's pid (`stamp_holder`, `read_holder`, `holder_label`): the one format
and the one wording both the collection's locks and the lab's refusal use."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ccscope.errors import LabError


class LabLeased(LabError):
    """Another process relies on this lab (it holds the lab's lease): up/down would pull the lab
    out from under its downloads."""


def lease_path(state_dir: str | Path) -> Path:
    """The lock file a long-running user of a lab (a collection) holds for as long as it relies on
    the lab; beside the state directory, since a purge removes the directory itself."""
    d = Path(state_dir)
    return d.with_name(d.name + ".lease")


def stamp_holder(fd: int) -> None:
    """Write this process's pid into a lock file it has just locked: what `read_holder` reads."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def read_holder(fd: int) -> int:
    """The pid `stamp_holder` wrote into a lock file; -1 if none (or no number) was written."""
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else -1


def holder_label(pid: int) -> str:
    """How a refusal names a lock's holder (`read_holder`'s pid)."""
    return f"pid {pid}" if pid > 0 else "pid unknown: its lock file holds none"


def _ancestors() -> set[int]:
    """This process and every process above it: a lease held by one of them is our own."""
    out, pid = {os.getpid()}, os.getppid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def lease_holder(state_dir: str | Path) -> int | None:
    """The pid holding the lab's lease when it is another process tree than ours; None when the
    lease is free, or held by this process or one of its ancestors (a collection's own up and
    down). A holder whose pid cannot be read counts as -1: still held."""
    p = lease_path(state_dir)
    try:
        fd = os.open(p, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None  # nobody holds it exclusively
        except BlockingIOError:
            pass
        pid = read_holder(fd)
        return None if pid in _ancestors() else pid
    finally:
        os.close(fd)
