"""Finding 2: the command of a ccscope shell, and so the measured download that talks to
untrusted servers, runs as an unprivileged user with no capabilities and a scrubbed
environment; read from /proc/<pid> of the inner command while it runs."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccscope.capture.shell import link_binary, shell_command
from ccscope.capture.transports import ClientRequest
from ccscope.capture.transports.tcp import client_command
from ccscope.profile import get_profile
from tests.netutil import CCSCOPE

pytestmark = pytest.mark.netns

SECRETS = {
    "CCSCOPE_API_TOKEN": "s3cret",
    "CCSCOPE_DB_URL": "postgresql://u:pw@db/x",
    "PYTHONPATH": "/tmp/evil",
}


def _inner(shell_pid: int, want_comm: str, timeout: float = 15) -> int:
    """The pid of the first descendant of `shell_pid` running `want_comm`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        todo = [shell_pid]
        while todo:
            p = todo.pop()
            try:
                kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
            except OSError:
                continue
            for k in map(int, kids):
                try:
                    if Path(f"/proc/{k}/comm").read_text().strip().startswith(want_comm):
                        return k
                except OSError:
                    continue
                todo.append(k)
        time.sleep(0.05)
    raise AssertionError(f"no {want_comm} under {shell_pid}")


def _creds(pid: int) -> tuple[dict[str, str], dict[str, str]]:
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    env = dict(
        kv.split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in kv
    )
    return {k: v.strip() for k, v in status.items()}, env


def _assert_unprivileged(pid: int) -> None:
    status, env = _creds(pid)
    assert all(u != "0" for u in status["Uid"].split()), status["Uid"]
    assert all(g != "0" for g in status["Gid"].split()), status["Gid"]
    assert status["Groups"] == ""
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[cap], 16) == 0, (cap, status[cap])
    assert status["NoNewPrivs"] == "1"
    assert not set(SECRETS) & set(env), sorted(env)
    assert env["CCSCOPE_SHELL_DEPTH"] == "1"


def test_ccscope_shell_command_is_unprivileged() -> None:
    argv = [*CCSCOPE, "shell", "--", "--quiet", "--", "sleep", "30"]
    p = subprocess.Popen(argv, env={**os.environ, **SECRETS})
    try:
        _assert_unprivileged(_inner(p.pid, "sleep"))
    finally:
        p.terminate()
        p.wait(timeout=20)


def test_measured_fetch_runs_unprivileged_and_still_downloads(tmp_path: Path) -> None:
    """The download client as `measure` starts it (profile A's shell): while it talks to the
    server it is the unprivileged user, and the capture is still written by the link."""
    srv = socket.create_server(("0.0.0.0", 0))
    port = srv.getsockname()[1]
    fetch = client_command(
        ClientRequest("http://OUTER/obj", "priv", tmp_path, "A", lab=False, timeout=30, max_bytes=10**6)
    )
    fetch[fetch.index("http://OUTER/obj")] = f"http://$CCSCOPE_SHELL_OUTER_ADDR:{port}/obj"
    script = " ".join(a if a.startswith("http://$") else shlex.quote(a) for a in fetch)
    script = f"exec {script} --allow 100.64.0.0/10"
    pcap = tmp_path / "A.pcap"
    argv = shell_command(["sh", "-c", script], get_profile("A"), pcap=pcap)
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **SECRETS})  # fmt: skip
    try:
        srv.settimeout(20)
        conn, _ = srv.accept()
        # whichever client the transport runs: the compiled one by default, else the interpreter
        exe = Path(fetch[0]).resolve()
        pid = _inner(p.pid, "python" if exe == Path(sys.executable).resolve() else exe.name[:15])
        _assert_unprivileged(pid)
        assert Path(f"/proc/{pid}/exe").resolve() == exe
        req = b""
        while b"\r\n\r\n" not in req:  # the whole request (MTU 100: many segments)
            req += conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3000\r\nConnection: close\r\n\r\n" + b"x" * 3000)
        conn.close()
        out, err = p.communicate(timeout=60)
    finally:
        srv.close()
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, (out, err)
    assert '"bytes": 3000' in out
    assert pcap.stat().st_size > 1000 and pcap.stat().st_uid == 0


def test_keep_root_is_explicit() -> None:
    cmd = "id -u; grep ^CapEff /proc/self/status"
    argv = [str(link_binary()), "--quiet", "--keep-root", "--", "sh", "-c", cmd]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert out.stdout.split()[0] == "0" and int(out.stdout.split()[-1], 16) != 0
