"""Gilbert–Elliott loss and reordering through the real ccscope-link: seeded and measurable."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.lab.lab_testkit import link_binary_or_skip, needs_root

pytestmark = [needs_root, pytest.mark.netns]

N = 3000
_SENDER = f"""
import os, socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dst = (os.environ["CCSCOPE_SHELL_OUTER_ADDR"], int(os.environ["PORT"]))
t = time.monotonic()
for i in range({N}):
    s.sendto(i.to_bytes(4, "big"), dst)
    t += 0.0004
    time.sleep(max(0.0, t - time.monotonic()))
"""


def _through_link(opts: list[str]) -> list[int]:
    """Sequence numbers of N datagrams sent from inside a shell, in the order they arrived."""
    link = link_binary_or_skip()
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    rx.bind(("0.0.0.0", 0))
    rx.settimeout(0.5)
    port = rx.getsockname()[1]
    p = subprocess.Popen(
        [str(link), "--quiet", *opts, "--", "env", f"PORT={port}", sys.executable, "-c", _SENDER]
    )
    got: list[int] = []
    try:
        while True:
            try:
                got.append(int.from_bytes(rx.recv(16)[:4], "big"))
            except TimeoutError:
                if p.poll() is not None:
                    break
    finally:
        p.wait(timeout=30)
        rx.close()
    assert p.returncode == 0
    return got


def _lost(got: list[int]) -> set[int]:
    return set(range(N)) - set(got)


def _bursts(lost: set[int]) -> float:
    starts = sum(1 for i in lost if i - 1 not in lost)
    return len(lost) / max(1, starts)


def test_gilbert_elliott_loss_is_seeded_and_bursty() -> None:
    ge = ["--up-ge-loss", "0.01,0.3"]  # mean burst 3.3 packets, long-run loss 3.2 %
    a = _lost(_through_link([*ge, "--seed", "11"]))
    b = _lost(_through_link([*ge, "--seed", "11"]))
    c = _lost(_through_link([*ge, "--seed", "12"]))
    assert 0.01 * N < len(a) < 0.07 * N, len(a)
    # the same seed drops the same datagrams (a stray packet of the namespace may shift one burst)
    assert len(a & b) >= 0.9 * max(len(a), len(b))
    assert len(a & c) < 0.5 * max(len(a), len(c))
    assert _bursts(a) > 2.0  # Bernoulli loss at 3 % would give ~1.03


def _held(order: list[int]) -> set[int]:
    """Datagrams that arrived after one sent later than them (the ones held back)."""
    out, top = set(), -1
    for x in order:
        if x < top:
            out.add(x)
        top = max(top, x)
    return out


def test_reordering_is_seeded_and_measurable() -> None:
    opts = ["--up-reorder", "0.05", "--up-reorder-gap", "5"]
    a = _through_link([*opts, "--seed", "4"])
    assert sorted(a) == list(range(N))  # reordered, not lost
    held = _held(a)
    assert 0.02 * N < len(held) < 0.09 * N, len(held)
    # 5 ms late at one datagram per 0.4 ms: ~12 later datagrams overtake each held one
    pos = {x: i for i, x in enumerate(a)}
    assert 6 <= sorted(pos[x] - x for x in held)[len(held) // 2] <= 14
    b = _held(_through_link([*opts, "--seed", "4"]))
    c = _held(_through_link([*opts, "--seed", "5"]))
    assert len(held & b) >= 0.9 * max(len(held), len(b))
    assert len(held & c) < 0.5 * max(len(held), len(c))
