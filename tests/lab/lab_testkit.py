"""Helpers for the lab tests: real kernel TCP in namespaces we create, and the lab itself."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
REPO = Path(__file__).resolve().parents[2]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def link_binary_or_skip() -> Path:
    from ccscope.capture.shell import link_binary
    from ccscope.errors import CCScopeError

    try:
        return link_binary()
    except CCScopeError as e:
        pytest.skip(str(e))


def run_in_netns(ns: str, fn: Callable[[], T]) -> T:
    """Run fn in a thread that joined network namespace `ns` (setns is per thread), so the
    sockets it creates live there while the test process stays in the root namespace."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns failed")
            finally:
                os.close(fd)
            box["result"] = fn()
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


@contextlib.contextmanager
def netns(rate: str | None = "20mbit") -> Iterator[str]:
    """A scratch network namespace with lo up and, if the kernel has tbf, a rate limit on lo
    (so a download lasts long enough for the 1 ms sampler to see a trajectory)."""
    name = f"ccslabtest-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        # MTU 1500: Internet-sized segments, and tbf drops any packet larger than its burst.
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "mtu", "1500", "up"], check=True)
        if rate:
            subprocess.run(
                ["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root", "tbf",
                 "rate", rate, "burst", "20k", "limit", "200k"],
                check=False, capture_output=True,
            )  # fmt: skip
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


class ServerProc:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path, gt_dir: Path) -> None:
        self.proc, self.log, self.gt_dir = proc, log, gt_dir

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(ns: str, cfg_path: Path, log: Path, gt_dir: Path) -> ServerProc:
    with log.open("wb") as f:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "ccscope.lab.server",
             "--config", str(cfg_path)],
            stdout=f, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 10
    while "ready:" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"lab server did not start:\n{log.read_text()}")
        time.sleep(0.05)
    return ServerProc(proc, log, gt_dir)


def stop_server(s: ServerProc) -> None:
    s.proc.terminate()
    try:
        s.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        s.proc.kill()
        s.proc.wait()


def wait_for(pred: Callable[[], T], timeout: float = 10.0, every: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(every)


@contextlib.contextmanager
def running_lab(state_dir: Path, params: Any) -> Iterator[Any]:
    """A real lab on its own instance for a test module or session; CCSCOPE_LAB_DIR points at it
    meanwhile, so measure() and CLI/worker subprocesses find it. Lab *mode* stays off."""
    from ccscope.lab.lab import Lab
    from ccscope.lab.registry import lab_prefix

    if os.geteuid() != 0:
        pytest.skip("needs root")
    link_binary_or_skip()
    prefix = lab_prefix(params.instance)
    out = subprocess.run(["ip", "-j", "route", "show", prefix], capture_output=True, text=True).stdout
    if json.loads(out or "[]"):
        pytest.fail(f"{prefix} is already routed: another lab is up on instance {params.instance}")
    old = os.environ.get("CCSCOPE_LAB_DIR")
    os.environ["CCSCOPE_LAB_DIR"] = str(state_dir)
    lab = Lab(state_dir)
    lab.up(params)
    try:
        yield lab
    finally:
        lab.down()
        if old is None:
            os.environ.pop("CCSCOPE_LAB_DIR", None)
        else:
            os.environ["CCSCOPE_LAB_DIR"] = old
