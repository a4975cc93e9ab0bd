"""Downloads from the validation lab through a client-side `ccscope-link` shell, each
returning the server's ground truth for the connection."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ccscope.errors import LabError
from ccscope.lab.groundtruth import find_record
from ccscope.lab.validate.series import LinkPath, Series

DEFAULT_STATE_DIR = Path("/run/ccscope/lab-validate")
DEFAULT_INSTANCE = 3


# --- running downloads through a client shell -----------------------------------------------


@dataclass
class Flow:
    """One download in a shell: `cca` is the lab name, started `start_s` after the shell."""

    cca: str
    nbytes: int
    start_s: float = 0.0


class Ctx:
    """A running validation lab: where its hosts file and ground truth are, and how to run a
    download through a client-side link and get the server's TCP_INFO back."""

    def __init__(self, state_dir: Path, *, log: Callable[[str], None] | None = None) -> None:
        from ccscope.capture.shell import link_binary

        self.state_dir = state_dir
        self.hosts = state_dir / "hosts"
        self.gt_dir = state_dir / "groundtruth"
        self.link = link_binary()
        self.log = log or (lambda _m: None)
        self.downloads = 0
        self.instance = DEFAULT_INSTANCE
        self.kernel_names: list[str] = []
        self.loaded_here: list[str] = []
        self._lock = threading.Lock()

    def run(
        self,
        flows: Sequence[Flow],
        path: LinkPath,
        *,
        tag: str,
        pre: Sequence[str] = (),
        timeout: float | None = None,
    ) -> list[Series]:
        """Run the flows (concurrently, each after its start delay) in one client shell behind
        `path`; returns each flow's ground truth. `pre` are shell commands run first inside the
        shell's namespace (e.g. a sysctl)."""
        ids = [f"val-{tag}-{f.cca}-{uuid.uuid4().hex[:8]}" for f in flows]
        secs = max(f.start_s + f.nbytes * 8 / path.rate_bps for f in flows)
        timeout = timeout or 3 * secs + 30
        parts = list(pre)
        for f, rid in zip(flows, ids, strict=True):
            fetch = [
                sys.executable,
                "-m",
                "ccscope.capture.fetch",
                f"http://{f.cca}.lab.test/obj/{f.nbytes}",
                "--lab",
                "--run-id",
                rid,
                "--timeout",
                f"{timeout:g}",
                "--max-bytes",
                str(f.nbytes + 1),
            ]
            parts.append(f"(sleep {f.start_s:g}; exec {shlex.join(fetch)}) &")
        parts.append("wait")
        from ccscope.capture.shell import link_argv

        # `pre` commands set sysctls of the client's namespace: they need root there.
        argv = link_argv(
            ["--quiet", "--hosts", str(self.hosts), *path.link_args()],
            ["/bin/sh", "-c", "\n".join(parts)],
            keep_root=bool(pre),
        )
        t0 = time.monotonic()
        # Clients that resolve lab names themselves must use this lab's hosts file too (the
        # shell's --hosts and $CCSCOPE_LAB_DIR agree), not whichever lab is the default.
        env = {**os.environ, "CCSCOPE_LAB_DIR": str(self.state_dir)}
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 30, check=False, env=env)
        results = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
        errors = [r.get("error") for r in results if r.get("error")]
        if p.returncode != 0 or errors or len(results) != len(flows):
            raise LabError(
                f"download {tag} failed (exit {p.returncode}): {errors or p.stderr.strip()[-400:]}"
            )
        out = []
        for rid in ids:
            rec = find_record(run_id=rid, gt_dir=self.gt_dir, wait_s=20.0)
            if rec is None:
                raise LabError(f"no ground truth for run {rid}")
            out.append(Series.from_record(rec, path))
        with self._lock:
            self.downloads += len(flows)
        self.log(
            f"  {tag}: {' + '.join(f.cca for f in flows)} over {path.describe()} "
            f"in {time.monotonic() - t0:.1f} s"
        )
        return out

    def one(self, cca: str, path: LinkPath, seconds: float, *, tag: str, pre: Sequence[str] = ()) -> Series:
        return self.run([Flow(cca, path.bytes_for(seconds))], path, tag=tag, pre=pre)[0]
