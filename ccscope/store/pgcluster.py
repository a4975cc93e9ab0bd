"""A throwaway PostgreSQL cluster: initdb in a temp dir, started on a free port, removed on stop.

The one place the tests (`tests/store/pg.py`) and the benchmarks (`bench/api`) get a real
PostgreSQL from. Runs the server as the `postgres` user when started as root (initdb refuses
root). fsync is off: the data is thrown away.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path


def pg_bindir() -> Path | None:
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(d, "initdb")):
            return Path(d)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgCluster:
    def __init__(self, bindir: Path, settings: Sequence[str] = ()) -> None:
        self.bindir = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="ccscope-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.settings = tuple(settings)  # extra `-c name=value` server settings
        self._n = 0
        self._template = False
        self.user = "postgres"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        if os.geteuid() == 0:
            pw = pwd.getpwnam(self.user)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        else:
            self.user = pwd.getpwuid(os.geteuid()).pw_name
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -F -c max_connections=50"
        opts += "".join(f" -c {s}" for s in self.settings)
        self._opts = opts
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.dir / "log"), "-w", "start")

    def restart(self, mode: str = "fast") -> None:
        """Stop (`mode`: fast, or immediate = a crash) and start again on the same port and data
        (the chaos bench's PostgreSQL restart mid-campaign)."""
        data, log = str(self.data), str(self.dir / "log")
        self._run("pg_ctl", "-D", data, "-m", mode, "-w", "stop")
        self._run("pg_ctl", "-D", data, "-o", self._opts, "-l", log, "-w", "start")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{db}"

    def new_database(self) -> str:
        """A fresh, migrated database per caller, so tests never see each other's rows."""
        from ccscope.store.core import Store

        if not self._template:
            # Migrate once into a template; each new database is then a cheap file copy.
            self._create("tmpl_ccscope", None)
            tmpl = Store(self.url("tmpl_ccscope"), tempfile.mkdtemp(dir=self.dir))
            tmpl.migrate()
            tmpl.close()
            self._template = True
        self._n += 1
        name = f"t{self._n}_{int(time.time() * 1000) % 100000}"
        self._create(name, "tmpl_ccscope")
        return self.url(name)

    def _create(self, name: str, template: str | None) -> None:
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as c:
            c.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))


@contextlib.contextmanager
def running_cluster(settings: Sequence[str] = ()) -> Iterator[PgCluster]:
    bindir = pg_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
    c = PgCluster(bindir, settings)
    try:
        c.start()
        yield c
    finally:
        c.stop()
