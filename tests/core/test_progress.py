"""Progress goes to stderr on a terminal and stays quiet in logs and pipes."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from ccscope.progress import Steps, bar, ticking

SNIPPET = """
import time
from ccscope.progress import Steps, bar, ticking
s = Steps(2, lines=False)
s.step("first")
with ticking("download", 2):
    time.sleep(1.2)
b = bar(3, "sites", unit="site")
for _ in range(3):
    b.update(1)
b.close()
"""


def test_quiet_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    Steps(2, lines=False).step("hidden")
    with ticking("x"):
        pass
    b = bar(2, "y")
    b.update(2)
    b.close()
    Steps(1).step("a line for the log")
    err = capsys.readouterr().err
    assert err == "ccscope: [1/1] a line for the log\n"


def test_shown_on_a_terminal() -> None:
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-c", SNIPPET], stderr=slave, stdout=subprocess.DEVNULL)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    assert p.wait(timeout=30) == 0
    text = out.decode(errors="replace")
    assert "[1/2] first" in text and "download" in text and "sites" in text
