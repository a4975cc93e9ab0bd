"""Start the lab's QUIC servers beside the TCP lab server, inside the lab's shell.

`python -m ccscope.lab.quic.launch --config quic.json -- CMD...` starts one process per QUIC
server listed in the config, then runs CMD (the TCP lab server) and lives as long as it does:
a signal is passed on to every child, and when CMD ends the QUIC servers are stopped. A QUIC
server that dies is logged, not restarted (the lab's health check then reports it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} lab-quic: {msg}\n")
    sys.stderr.flush()


# A userspace QUIC server *is* its transport stack: when it waits for a CPU, ACKs wait with it
# and its congestion control runs late, which a kernel TCP stack (ACKs in softirq) never does.
# On a loaded machine that put 100-250 ms stalls into the qlog truth, so the servers run
# real-time, one step below the link emulators (ccscope-link runs at SCHED_FIFO 10). They sleep
# in recv between datagrams, so this costs no CPU; without the privilege they keep the default.
RT_PRIORITY = 5


def _realtime() -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
    except (OSError, AttributeError):
        with contextlib.suppress(OSError):
            os.nice(-10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccscope.lab.quic.launch")
    ap.add_argument("--config", required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    cfg: dict[str, Any] = json.loads(Path(args.config).read_text())
    children: dict[str, subprocess.Popen[bytes]] = {}
    for srv in cfg.get("servers", []):
        try:
            children[srv["label"]] = subprocess.Popen(srv["argv"], preexec_fn=_realtime)
        except OSError as e:
            log(f"cannot start {srv['label']}: {e}")
    main_proc = subprocess.Popen(cmd) if cmd else None

    def forward(signum: int, _frame: object) -> None:
        for p in [*children.values(), *([main_proc] if main_proc else [])]:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    reported: set[str] = set()
    try:
        while True:
            if main_proc is not None and main_proc.poll() is not None:
                break
            if main_proc is None and all(p.poll() is not None for p in children.values()):
                break
            for label, p in children.items():
                if p.poll() is not None and label not in reported:
                    reported.add(label)
                    log(f"{label} exited with status {p.returncode}")
            time.sleep(0.2)
    finally:
        for p in children.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 5
        for p in children.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
    return main_proc.returncode if main_proc is not None and main_proc.returncode is not None else 0


if __name__ == "__main__":
    sys.exit(main())
