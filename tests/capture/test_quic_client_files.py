"""The QUIC client runs unprivileged (capture/shell.py) yet must write its qlog, the estimator's
best input, into the measurement's directory: it is handed that one file and nothing more."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ccscope.capture.transports import ClientRequest
from ccscope.capture.transports.quic import client_command


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory the unprivileged user may traverse (pytest's tmp_path is root's alone), as
    a collection's root under /var/tmp is."""
    d = Path(tempfile.mkdtemp(prefix="ccscope-qlog-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d)


def test_the_client_may_write_its_qlog_and_nothing_else(open_dir: Path) -> None:
    out = open_dir / "job"
    out.mkdir(mode=0o755)
    old = out / "A.client.sqlog"
    old.write_text("a previous run's log")
    cmd = client_command(ClientRequest("https://cubic.quiche.lab.test/obj/1000", "r1", out, "A"))
    qlog = Path(cmd[cmd.index("--qlog") + 1])
    assert qlog == old and qlog.read_text() == ""  # never a previous run's log
    if os.geteuid() != 0:
        return
    try:
        user = pwd.getpwnam("ccscope")
    except KeyError:
        pytest.skip("no ccscope user (make setup creates it)")
    st = qlog.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (user.pw_uid, 0o600)

    def as_client(script: str) -> int:
        argv = ["runuser", "-u", "ccscope", "--", "sh", "-c", script]
        return subprocess.run(argv, capture_output=True).returncode

    assert as_client(f"echo qlog > {qlog}") == 0 and qlog.read_text() == "qlog\n"
    assert as_client(f"echo x > {out / 'other'}") != 0
