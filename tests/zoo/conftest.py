"""Fixtures for the BPF congestion-control zoo tests (real kernel, root only).

A transfer runs the *sender* in the root namespace, with TCP_CONGESTION set on its
socket, and the receiver behind ccscope-link's bottleneck (rate-limited queue, delay,
NAT back to the root namespace) when that binary is built; otherwise over loopback.
The sender polls TCP_INFO while it writes, so tests can look at cwnd and ssthresh.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK_BIN = ROOT / "capture" / "link" / "target" / "release" / "ccscope-link"
TEST_PREFIX = "zt_"  # tests register their own names so a running lab is not disturbed

try:
    from ccscope.lab import ccas
except ImportError:  # running from a tree without the package installed
    sys.path.insert(0, str(ROOT))
    import lab.ccas as ccas  # type: ignore[no-redef]


def _why_skip() -> str | None:
    if os.geteuid() != 0:
        return "zoo tests need root (struct_ops, TCP_CONGESTION of unlisted CCAs)"
    if not Path(os.environ.get("CCSCOPE_CCA_BIN", ccas.BIN)).exists():
        return "ccscope-cca not built (run lab/ccas/build.sh)"
    if not ccas.available_ccas():
        return "no BPF objects in lab/ccas/build (run lab/ccas/build.sh)"
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "kernel without BTF"
    return None


SKIP = _why_skip()


@pytest.fixture(scope="session", autouse=True)
def _zoo_session():
    if SKIP:
        pytest.skip(SKIP)
    yield
    # Whatever a failed test left registered under a test name goes away.
    for e in ccas.loaded():
        if e["name"].startswith(TEST_PREFIX):
            with contextlib.suppress(ccas.CCAError):
                ccas.unload(e["name"])


def zt_name(base: str) -> str:
    return TEST_PREFIX + base


# struct tcp_info: 8 one-byte fields, then u32s (see linux/tcp.h).
TI_U32 = {"rto": 0, "rtt": 15, "rttvar": 16, "snd_ssthresh": 17, "snd_cwnd": 18, "total_retrans": 23}
TCPI_OPT_ECN = 8


def tcp_info(s: socket.socket) -> dict[str, int]:
    raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    b = struct.unpack_from("8B", raw)
    u = struct.unpack_from("24I", raw, 8)
    d = {k: u[i] for k, i in TI_U32.items()}
    d["state"], d["ca_state"], d["options"] = b[0], b[1], b[5]
    return d


@dataclass
class Transfer:
    cc: str
    received: int
    seconds: float
    via_link: bool
    info: dict[str, int]
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)  # t, cwnd, ssthresh, rtt

    def reductions(self) -> list[tuple[int, int]]:
        """(cwnd just before, new ssthresh) at each change of ssthresh."""
        out = []
        peak = 0
        prev = None
        for _, cwnd, ssth, _ in self.samples:
            if prev is not None and ssth != prev and ssth < 1 << 30:
                out.append((peak, ssth))
                peak = 0
            peak = max(peak, cwnd)
            prev = ssth
        return out


def _receiver_code(port: int, cc: str | None) -> str:
    setcc = f"c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, {cc!r}.encode())\n" if cc else ""
    return (
        "import os, socket\n"
        "c = socket.socket()\n"
        + setcc
        + f"c.connect((os.environ.get('CCSCOPE_SHELL_OUTER_ADDR', '127.0.0.1'), {port}))\n"
        "n = 0\n"
        "while True:\n"
        "    b = c.recv(1 << 16)\n"
        "    if not b:\n"
        "        break\n"
        "    n += len(b)\n"
        "print(n, flush=True)\n"
        # Abort on exit: no orphan left in the namespace holding the CCA.
        "c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b'\\x01\\0\\0\\0\\0\\0\\0\\0')\n"
        "c.close()\n"
    )


def transfer(
    cc: str,
    nbytes: int = 2_000_000,
    *,
    rate: str = "20mbit",
    buffer: str = "20p",
    delay_ms: int = 10,
    receiver_cc: str | None = None,
    timeout: float = 60,
    use_link: bool | None = None,
) -> Transfer:
    """Sends nbytes from a root-namespace socket using `cc` to a receiver behind the
    emulated bottleneck; returns what the sender saw."""
    via_link = LINK_BIN.exists() if use_link is None else use_link
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0" if via_link else "127.0.0.1", 0))
    ls.listen(1)
    ls.settimeout(20)
    # Set on the listener so the handshake already runs under `cc` (ECN for DCTCP).
    ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    port = ls.getsockname()[1]
    code = _receiver_code(port, receiver_cc)
    if via_link:
        # --keep-root: the receiver sets its socket's congestion control (the zoo's ECN check),
        # which an unprivileged command may not do for an algorithm outside the allowed list.
        cmd = [str(LINK_BIN), "--quiet", "--keep-root", "--rate", rate, "--buffer", buffer]
        cmd += ["--delay", str(delay_ms)]
        cmd += ["--", sys.executable, "-c", code]
    else:
        cmd = [sys.executable, "-c", code]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        try:
            s, _ = ls.accept()
        except TimeoutError:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"receiver never connected: {err[-2000:]}") from None
        got_cc = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
        t0 = time.monotonic()
        samples = []
        buf = b"x" * 65536
        sent = 0
        s.setblocking(False)
        while sent < nbytes:
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"{cc}: sent only {sent} of {nbytes} bytes in {timeout}s")
            select.select([], [s], [], 0.01)
            with contextlib.suppress(BlockingIOError):
                sent += s.send(buf[: min(len(buf), nbytes - sent)])
            ti = tcp_info(s)
            samples.append((time.monotonic() - t0, ti["snd_cwnd"], ti["snd_ssthresh"], ti["rtt"]))
        s.setblocking(True)
        s.shutdown(socket.SHUT_WR)
        # Drain: keep sampling until the receiver has everything.
        while proc.poll() is None and time.monotonic() - t0 < timeout:
            ti = tcp_info(s)
            samples.append((time.monotonic() - t0, ti["snd_cwnd"], ti["snd_ssthresh"], ti["rtt"]))
            time.sleep(0.005)
        info = tcp_info(s)
        out, err = proc.communicate(timeout=10)
        # Abort rather than linger: an orphan still retransmitting its FIN into a torn-down
        # namespace would hold the CCA (and its BPF map) for minutes after unload.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    finally:
        ls.close()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    received = int(out.split()[-1]) if out.split() else -1
    assert received == nbytes, f"receiver got {received} of {nbytes}: {err[-2000:]}"
    return Transfer(got_cc, received, time.monotonic() - t0, via_link, info, samples)
