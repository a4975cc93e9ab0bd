"""`ccscope lab`: lab web servers with known CCAs behind an emulated Internet path.

`Lab.up()` starts, as one detached process group,

    ccscope-link --delay D [--jitter J --loss P] --rate R [--buffer B] --route 198.18.0.0/24
                 --inner-addr 198.18.0.11/32 ... --ready-fd N -- python -m ccscope.lab.server ...

so the servers live in the shell's namespace and everything else on the machine reaches them
across the emulated path (the shell *is* the Internet between client and server). A measuring
client in its own `ccscope-link --hosts <lab hosts>` shell then sees `<cca>.lab.test` at the
lab addresses, trusts the lab CA, and its download crosses both links.

State lives in one directory (default /run/ccscope/lab, $CCSCOPE_LAB_DIR overrides):
state.json, server.json (server config), hosts, certs/, server.log, groundtruth/.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ccscope.errors import CCScopeError, LabError, LabNotUp
from ccscope.lab.certs import ensure_certs
from ccscope.lab.lease import LabLeased, holder_label, lease_holder, lease_path
from ccscope.lab.registry import (
    DEFAULT_CCAS,
    LAB_DOMAIN,
    LAB_PREFIX,
    MAX_INSTANCE,
    infra_addr,
    is_lab_address,
    lab_cca,
    lab_prefix,
)
from ccscope.lab.server import DEFAULT_LARGE_BYTES, ListenerSpec, ServerConfig
from ccscope.lab.tcpinfo import set_cca
from ccscope.profile import kbit_spec
from ccscope.settings import settings

__all__ = [
    "DEFAULT_STATE_DIR",
    "LAB_PREFIX",
    "Lab",
    "LabParams",
    "groundtruth_dir",
    "is_lab_address",
    "lab_ca_file",
    "lab_hosts_file",
    "lab_resolve",
    "lab_state_dir",
]

DEFAULT_STATE_DIR = Path("/run/ccscope/lab")
CROSS_UDP_PORT = 9000
CROSS_TCP_PORTS = {"reno": 9001, "cubic": 9002, "bbr": 9003}
STATE_VERSION = 1
# Popen objects of processes this interpreter started: kept so they are reaped, not leaked as
# zombies, when up() and down() run in one process (tests, `ccscope demo`).
_SPAWNED: dict[int, subprocess.Popen[bytes]] = {}


def lab_state_dir(state_dir: str | Path | None = None) -> Path:
    if state_dir is not None:
        return Path(state_dir)
    env = settings().lab_dir
    return Path(env) if env else DEFAULT_STATE_DIR


def groundtruth_dir(state_dir: str | Path | None = None) -> Path:
    return lab_state_dir(state_dir) / "groundtruth"


def lab_hosts_file(state_dir: str | Path | None = None) -> Path:
    """The hosts file mapping `<cca>.lab.test` to the lab addresses (for `--hosts`)."""
    return _existing(lab_state_dir(state_dir) / "hosts", state_dir)


def lab_resolve(host: str, state_dir: str | Path | None = None) -> tuple[str, ...]:
    """Addresses of a lab name from the running lab's hosts file, for clients outside the
    measurement shell (the crawler); () when the name is not in the lab or no lab is up."""
    h = host.strip().lower().rstrip(".")
    if h != LAB_DOMAIN and not h.endswith("." + LAB_DOMAIN):
        return ()
    try:
        text = (lab_state_dir(state_dir) / "hosts").read_text()
    except OSError:
        return ()
    out = []
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) >= 2 and h in (n.lower() for n in parts[1:]):
            out.append(parts[0])
    return tuple(dict.fromkeys(out))


def lab_ca_file(state_dir: str | Path | None = None) -> Path:
    """The lab CA certificate (PEM) clients must trust for https://<cca>.lab.test."""
    return _existing(lab_state_dir(state_dir) / "certs" / "ca.pem", state_dir)


def _existing(p: Path, state_dir: str | Path | None) -> Path:
    if not p.is_file():
        hint = f" --state-dir {state_dir}" if state_dir is not None else ""
        raise LabNotUp(f"the lab is not up ({p} is missing): run `ccscope lab up{hint}`")
    return p


def normalize_rate(rate: str | float | int) -> str:
    """`--rate` takes kbit/s as a bare number, `inf`, or any ccscope-link rate spec."""
    s = str(rate).strip().lower()
    if s in ("", "inf", "0"):
        return "inf"
    try:
        v = float(s)
    except ValueError:
        return s  # a spec with units (10mbit, 500pps, schedules): the emulator validates it
    if v < 0:
        raise LabError(f"rate must be positive, got {rate!r}")
    return kbit_spec(v)


@dataclass(frozen=True)
class LabParams:
    """The emulated Internet path between the lab servers and everything else."""

    delay_ms: float = 10.0  # one way; the path adds 2x this to every RTT
    jitter_ms: float = 0.0
    loss: float = 0.0
    rate: str = "inf"
    buffer: str | None = None  # None: the emulator's default
    cross_traffic_kbit: float = 0.0
    ccas: tuple[str, ...] = DEFAULT_CCAS
    mtu: int = 1500
    large_bytes: int = DEFAULT_LARGE_BYTES
    instance: int = 0  # which /24 of 198.18.0.0/16: labs with different instances coexist
    # Extra site names served by a CCA's server, (hostname, cca): a census needs many sites, and
    # real ones share a CCA. One label under lab.test, so the lab's wildcard certificate fits.
    sites: tuple[tuple[str, str], ...] = ()
    # Server settings (classifier/conditions.py's server group), applied in the lab's namespace:
    initcwnd: int | None = None  # initial congestion window, segments (None: the kernel's 10)
    gso: bool | None = None  # GSO on the servers' device (None: the kernel's default, on)
    mss: int | None = None  # TCP_MAXSEG of every listener (None: from the path MTU)
    nginx: bool = False  # also serve every CCA with nginx (HTTP, sendfile) on port 8080
    nginx_root: str | None = None  # where nginx's obj/<N> files are (default /var/tmp/ccscope-objects)
    cross_sources: bool = False  # TCP (reno/cubic/bbr) and UDP cross-traffic sources on 198.18.N.2
    # QUIC servers beside the TCP ones (lab/quic): labels like quiche:cubic, or ("all",)
    quic: tuple[str, ...] = ()
    # Milliseconds between the servers' TCP_INFO samples of every connection (the ground truth).
    # One real-time thread samples them all, so its CPU grows with the connections open: a lab
    # for a census, which keeps no ground truth, can sample more coarsely, or not at all (0).
    sample_interval_ms: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", normalize_rate(self.rate))
        if self.quic:
            from ccscope.lab.quic.lab import resolve_servers

            object.__setattr__(self, "quic", resolve_servers(tuple(self.quic)))
        try:  # lab names, whichever spelling was given (bic or cc_bic)
            names = tuple(lab_cca(c).name for c in self.ccas)
        except KeyError as e:
            raise LabError(str(e.args[0])) from None
        object.__setattr__(self, "ccas", names)
        object.__setattr__(self, "sites", tuple(_check_site(h, c, names) for h, c in self.sites))
        if len({h for h, _ in self.sites}) != len(self.sites):
            raise LabError("duplicate lab site name")
        if not self.sample_interval_ms >= 0:
            raise LabError("sample_interval_ms must be >= 0 (0: no ground truth samples)")
        if self.delay_ms < 0 or self.jitter_ms < 0:
            raise LabError("delay and jitter must be >= 0")
        if not 0.0 <= self.loss < 1.0:
            raise LabError("loss must be in [0, 1)")
        if self.cross_traffic_kbit < 0:
            raise LabError("cross traffic rate must be >= 0")
        if not self.ccas:
            raise LabError("at least one CCA is needed")
        if len(set(self.ccas)) != len(self.ccas):
            raise LabError(f"duplicate CCA in {','.join(self.ccas)}")
        if not 576 <= self.mtu <= 9000:
            raise LabError("mtu must be in [576, 9000]")
        if not 0 <= self.instance <= MAX_INSTANCE:
            raise LabError(f"lab instance must be in 0..{MAX_INSTANCE}")
        if self.large_bytes < 400_000:
            raise LabError("the /large object must be at least 400 KB")
        if self.initcwnd is not None and not 1 <= self.initcwnd <= 1000:
            raise LabError("initcwnd must be in 1..1000 segments")
        if self.mss is not None and not 88 <= self.mss <= 9000:
            raise LabError("mss must be in 88..9000 bytes")

    def link_args(self) -> list[str]:
        a = ["--delay", f"{self.delay_ms:g}", "--rate", self.rate, "--mtu", str(self.mtu)]
        if self.jitter_ms:
            a += ["--jitter", f"{self.jitter_ms:g}"]
        if self.loss:
            a += ["--loss", f"{self.loss:g}"]
        if self.buffer:
            a += ["--buffer", self.buffer]
        return a

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ccas"] = list(self.ccas)
        d["sites"] = [list(x) for x in self.sites]
        d["quic"] = list(self.quic)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabParams:
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known}
        if "sites" in kw:
            kw["sites"] = tuple((str(h), str(c)) for h, c in kw["sites"])
        if "quic" in kw:
            kw["quic"] = tuple(str(q) for q in kw["quic"])
        return cls(**kw)


def _check_site(host: str, cca: str, ccas: tuple[str, ...]) -> tuple[str, str]:
    h = host.strip().lower().rstrip(".")
    label, _, rest = h.partition(".")
    ok = rest == LAB_DOMAIN and 0 < len(label) <= 63 and all(c.isalnum() or c == "-" for c in label)
    if not ok or label.startswith("-"):
        raise LabError(f"lab site {host!r} must be one label under {LAB_DOMAIN} (e.g. shop.{LAB_DOMAIN})")
    try:
        name = lab_cca(cca).name
    except KeyError as e:
        raise LabError(str(e.args[0])) from None
    if name not in ccas:
        raise LabError(f"lab site {h} runs {name}, which is not among the lab's CCAs")
    return h, name


@dataclass
class LabServerInfo:
    cca: str
    addr: str
    hostname: str
    http_url: str
    https_url: str
    kernel_cca: str
    nginx_port: int = 0  # >0: nginx serves this CCA at http://<addr>:<port>/ too


@dataclass
class LabStatus:
    up: bool
    healthy: bool
    state_dir: str
    problems: list[str] = field(default_factory=list)
    servers: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] | None = None
    cross_traffic: dict[str, Any] | None = None
    log_tail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Lab:
    """One lab instance, identified by its state directory."""

    def __init__(self, state_dir: str | Path | None = None) -> None:
        self.dir = lab_state_dir(state_dir)
        self.state_file = self.dir / "state.json"
        self.gt_dir = self.dir / "groundtruth"
        self.cert_dir = self.dir / "certs"
        self.hosts_file = self.dir / "hosts"
        self.config_file = self.dir / "server.json"
        self.log_file = self.dir / "server.log"
        self.sink_log = self.dir / "sink.log"
        self.cross_stats = self.dir / "cross-traffic.json"
        self.link_stats = self.dir / "link-stats.json"

    # -- public API --

    def state(self) -> dict[str, Any] | None:
        """The recorded state of a lab that was brought up (it may have died since)."""
        try:
            doc = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise LabError(f"unreadable lab state {self.state_file}: {e}") from e
        return doc if isinstance(doc, dict) else None

    @property
    def params(self) -> LabParams | None:
        st = self.state()
        return LabParams.from_dict(st["params"]) if st else None

    @property
    def delay_ms(self) -> float | None:
        """One-way delay of the lab's Internet path (RTT adds twice this)."""
        p = self.params
        return p.delay_ms if p else None

    @property
    def devices(self) -> list[str]:
        """Network devices of the lab in the root namespace (the path's outer end)."""
        st = self.state()
        dev = (st or {}).get("link", {}).get("device")
        return [dev] if dev else []

    @property
    def tables(self) -> list[str]:
        """Names of the nftables tables the lab's shell created."""
        st = self.state()
        return [name for _, name in (st or {}).get("nft_tables", [])]

    def servers(self) -> list[LabServerInfo]:
        st = self.state()
        if st is None:
            return []
        return [LabServerInfo(**s) for s in st["servers"]]

    def cross_sources(self) -> dict[str, Any] | None:
        """Address and ports of the cross-traffic sources, when the lab runs them."""
        st = self.state()
        return (st or {}).get("cross_sources")

    def up(self, params: LabParams | None = None, *, timeout: float = 30.0) -> dict[str, Any]:
        """Bring the lab up (no-op if already up and healthy with the same parameters)."""
        params = params or LabParams()
        _require_root()
        self._check_lease("bring it up again")
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            st = self.state()
            if st is not None:
                same = LabParams.from_dict(st.get("params", {})) == params
                if same and self._status(st, timeout=2.0).healthy:
                    return {**st, "changed": False}
                self._down(st, purge=False)
            return {**self._up(params, timeout), "changed": True}

    def down(self, *, purge: bool = False, timeout: float = 10.0) -> dict[str, Any]:
        """Stop everything the lab started and check nothing is left behind."""
        _require_root()
        self._check_lease("take it down")
        if not self.dir.exists():
            return {"was_up": False, "leftovers": [], "purged": False}
        with self._locked():
            return self._down(self.state(), purge=purge, timeout=timeout)

    def status(self, *, timeout: float = 2.0) -> LabStatus:
        """What is up, checked live (processes, /health of every server, the path device)."""
        st = self.state()
        if st is None:
            return LabStatus(up=False, healthy=False, state_dir=str(self.dir))
        return self._status(st, timeout=timeout)

    # -- up --

    def _up(self, params: LabParams, timeout: float) -> dict[str, Any]:
        from ccscope.capture.shell import link_argv

        link = _link_binary()
        prefix = lab_prefix(params.instance)
        _check_prefix_free(prefix)
        specs = [replace(lab_cca(c), addr=lab_cca(c).addr_in(params.instance)) for c in params.ccas]
        _check_ccas(tuple(s.kernel for s in specs))
        quic = _quic_specs(params)
        names = [f"*.{LAB_DOMAIN}", LAB_DOMAIN, *(s.hostname for s in specs), *_quic_cert_names(quic)]
        quic_addrs = [q.addr_in(params.instance) for q in quic]
        certs = ensure_certs(self.cert_dir, names, [s.addr for s in specs] + quic_addrs)
        self.gt_dir.mkdir(parents=True, exist_ok=True)
        self._write_hosts(specs, params.sites, [(q.addr_in(params.instance), q.hostname) for q in quic])
        cross_port = _free_udp_port() if params.cross_traffic_kbit > 0 else 0
        xaddr = infra_addr(params.instance) if params.cross_sources else None
        from ccscope.lab.nginx import DEFAULT_OBJECT_ROOT, NGINX_PORT

        cfg = ServerConfig(
            servers=[ListenerSpec(cca=s.name, addr=s.addr, kernel_cca=s.kernel) for s in specs]
            + _quic_companions(quic, params.instance),
            groundtruth_dir=str(self.gt_dir),
            cert_file=str(certs.cert),
            key_file=str(certs.key),
            large_bytes=params.large_bytes,
            cross_traffic_kbit=params.cross_traffic_kbit,
            cross_traffic_port=cross_port,
            initcwnd=params.initcwnd,
            gso=params.gso,
            mss=params.mss,
            nginx_port=NGINX_PORT if params.nginx else 0,
            nginx_dir=str(self.dir / "nginx"),
            nginx_root=params.nginx_root or str(DEFAULT_OBJECT_ROOT),
            cross_addr=xaddr,
            cross_udp_port=CROSS_UDP_PORT if xaddr else 0,
            cross_tcp_ports=dict(CROSS_TCP_PORTS) if xaddr else None,
            sample_interval_ms=params.sample_interval_ms,
        )
        cfg.save(self.config_file)
        for stale in (self.cross_stats, self.link_stats):
            stale.unlink(missing_ok=True)

        server_cmd = [sys.executable, "-m", "ccscope.lab.server", "--config", str(self.config_file)]
        if quic:
            from ccscope.lab.quic import lab as quic_lab

            # The QUIC servers get a leaf with names only: BoringSSL (quiche's TLS) refuses a leaf
            # with an IP address SAN under a CA whose name constraints include an IP range, and
            # QUIC clients verify the server by name (SNI) anyway.
            qcerts = ensure_certs(self.cert_dir, names, [], leaf="quic-server")
            qcfg = quic_lab.write_config(self.dir / "quic.json", quic, instance=params.instance,
                                         cert=str(qcerts.cert), key=str(qcerts.key),
                                         groundtruth_dir=self.gt_dir, large=params.large_bytes)  # fmt: skip
            server_cmd = quic_lab.wrap(qcfg, server_cmd)
        r, w = os.pipe()
        argv = link_argv(
            [*params.link_args(), "--route", prefix,
             *[a for s in specs for a in ("--inner-addr", f"{s.addr}/32")],
             *(["--inner-addr", f"{xaddr}/32"] if xaddr else []),
             *[a for q in quic_addrs for a in ("--inner-addr", f"{q}/32")],
             "--stats", str(self.link_stats), "--ready-fd", str(w),
             # the servers outlive `lab up`, which only starts them
             "--detach"],
            server_cmd,
            keep_root=True,  # the servers set CCAs, real-time priority, routes, ports 80/443
        )  # fmt: skip
        with self.log_file.open("wb") as log:
            try:
                proc = _spawn(argv, log, pass_fds=(w,))
            finally:
                os.close(w)
        st: dict[str, Any] = {
            "version": STATE_VERSION,
            "state_dir": str(self.dir),
            "started_at": time.time(),
            "params": params.to_dict(),
            "pids": {"link": _proc_id(proc.pid)},
            "pgid": proc.pid,
            "servers": [
                {**asdict(_server_info(s.name, s.addr, s.kernel)), "nginx_port": cfg.nginx_port}
                for s in specs
            ],
            "cross_sources": (
                {"addr": xaddr, "udp_port": cfg.cross_udp_port, "tcp_ports": cfg.cross_tcp_ports}
                if xaddr
                else None
            ),
            "quic_servers": _quic_infos(quic, params.instance),
            "hosts_file": str(self.hosts_file),
            "ca_file": str(certs.ca_cert),
            "cert_file": str(certs.cert),
            "key_file": str(certs.key),
            "groundtruth_dir": str(self.gt_dir),
            "server_config": str(self.config_file),
            "log_file": str(self.log_file),
            "link": {"binary": str(link), "argv": argv, "stats_file": str(self.link_stats)},
            "nft_tables": [],
            "cross_traffic": None,
        }
        # Written before waiting: if anything below fails, down() knows what to stop.
        self._write_state(st)
        try:
            _wait_ready(r, proc, timeout, self.log_file)
            dev, outer = _route_device(specs[0].addr)
            st["link"].update({"device": dev, "outer_addr": outer})
            # Shells share one static NAT table (ccscope_shells), which is no lab's to remove;
            # an emulator of an older build named its own table ccscope_<index>_<pid>.
            st["nft_tables"] = [t for t in _nft_tables() if t[1].endswith(f"_{proc.pid}")]
            if params.cross_traffic_kbit > 0:
                with self.sink_log.open("wb") as slog:
                    sink = _spawn(
                        [sys.executable, "-m", "ccscope.lab.crosstraffic", "sink", "--bind",
                         outer or "0.0.0.0", "--port", str(cross_port), "--stats",
                         str(self.cross_stats)],
                        slog,
                    )  # fmt: skip
                st["pids"]["sink"] = _proc_id(sink.pid)
                st["cross_traffic"] = {"kbit": params.cross_traffic_kbit, "sink": f"{outer}:{cross_port}",
                                       "stats_file": str(self.cross_stats)}  # fmt: skip
            self._write_state(st)
            health = self._wait_healthy(st, proc, timeout)
            pid = next((h.get("pid") for h in health if h.get("pid")), None)
            if pid:
                st["pids"]["server"] = _proc_id(int(pid))
            self._write_state(st)
        except BaseException:
            with contextlib.suppress(CCScopeError, OSError):
                self._down(st, purge=False)
            raise
        finally:
            os.close(r)
        return st

    def _write_hosts(
        self, specs: list[Any], sites: tuple[tuple[str, str], ...] = (), extra: list[tuple[str, str]] = ()
    ) -> None:
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{s.addr}\t{s.hostname}" for s in specs]
        lines += [f"{addr}\t{host}" for addr, host in extra]
        addr = {s.name: s.addr for s in specs}
        lines += [f"{addr[cca]}\t{host}" for host, cca in sites]
        lines.append(f"{specs[0].addr}\t{LAB_DOMAIN}")  # the bare domain: the first server
        _atomic_write(self.hosts_file, "\n".join(lines) + "\n")

    def _write_state(self, st: dict[str, Any]) -> None:
        _atomic_write(self.state_file, json.dumps(st, indent=2))

    def _wait_healthy(
        self, st: dict[str, Any], proc: subprocess.Popen[bytes], timeout: float
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        ctx = _client_tls(Path(st["ca_file"]))
        last: list[str] = []
        while True:
            if proc.poll() is not None:
                raise LabError(
                    f"the lab shell exited (status {proc.returncode}) before the servers were "
                    f"up; log {self.log_file}:\n{_tail(self.log_file)}"
                )
            results = _check_servers(st["servers"], ctx, timeout=1.0)
            last = [f"{s['hostname']}: {h['error']}" for s, h in zip(st["servers"], results,
                    strict=True) if not h["ok"]]  # fmt: skip
            last += _quic_problems(st, timeout=2.0)
            if not last:
                return results
            if time.monotonic() > deadline:
                raise LabError(
                    "lab servers did not become healthy within "
                    f"{timeout:g} s ({'; '.join(last)}); log {self.log_file}:\n{_tail(self.log_file)}"
                )
            time.sleep(0.2)

    # -- status --

    def _status(self, st: dict[str, Any], *, timeout: float) -> LabStatus:
        s = LabStatus(up=True, healthy=False, state_dir=str(self.dir), state=st)
        pids = st.get("pids", {})
        for role in ("link", "server", "sink"):
            if role in pids and not _alive(pids[role]):
                s.problems.append(f"{role} process {pids[role]['pid']} is not running")
        dev = st.get("link", {}).get("device")
        if dev and not _link_exists(dev):
            s.problems.append(f"path device {dev} is gone")
        ctx = None
        with contextlib.suppress(OSError, ssl.SSLError):
            ctx = _client_tls(Path(st["ca_file"]))
        servers = st.get("servers", [])
        for srv, h in zip(servers, _check_servers(servers, ctx, timeout), strict=True):
            s.servers.append({**srv, **h})
            if not h["ok"]:
                s.problems.append(f"{srv['hostname']} ({srv['addr']}): {h['error']}")
        s.problems += _quic_problems(st, timeout=timeout)
        if st.get("cross_traffic"):
            try:
                s.cross_traffic = json.loads(Path(st["cross_traffic"]["stats_file"]).read_text())
            except (OSError, ValueError):
                s.cross_traffic = {"error": "no sink statistics yet"}
        s.healthy = not s.problems
        if s.problems:
            s.log_tail = _tail(Path(st.get("log_file", self.log_file)))
        return s

    # -- down --

    def _down(self, st: dict[str, Any] | None, *, purge: bool, timeout: float = 10.0) -> dict[str, Any]:
        report: dict[str, Any] = {"was_up": st is not None, "leftovers": [], "purged": purge}
        if st is not None:
            procs = list(st.get("pids", {}).values())
            pgids = {p["pid"] for p in procs}
            for p in procs:  # the emulator tears its namespace down on SIGTERM
                _signal(p, signal.SIGTERM)
            if not _wait_gone(procs, pgids, timeout):
                for p in procs:
                    _signal(p, signal.SIGKILL)
                _wait_gone(procs, pgids, 3.0)
            leftovers = _leftovers(st, procs, pgids)
            if leftovers:
                _force_cleanup(st)
                leftovers = _leftovers(st, procs, pgids)
            report["leftovers"] = leftovers
            if leftovers:
                raise LabError(
                    "the lab did not tear down cleanly: " + "; ".join(leftovers)
                    + f" (state kept in {self.state_file})"
                )  # fmt: skip
        for f in (
            self.state_file,
            self.hosts_file,
            self.config_file,
            self.cross_stats,
            self.dir / "quic.json",
        ):
            f.unlink(missing_ok=True)
        if purge:
            shutil.rmtree(self.gt_dir, ignore_errors=True)
            shutil.rmtree(self.cert_dir, ignore_errors=True)
            for f in (self.log_file, self.sink_log, self.link_stats):
                f.unlink(missing_ok=True)
        return report

    def _check_lease(self, what: str) -> None:
        pid = lease_holder(self.dir)
        if pid is not None:
            raise LabLeased(
                f"the lab in {self.dir} is leased to a running collection ({holder_label(pid)}, "
                f"{lease_path(self.dir)}): stop that first rather than {what} under its downloads, "
                "or use another --state-dir and --instance"
            )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # up/down from two terminals at once must not interleave.
        fd = os.open(self.dir / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


# --- helpers ------------------------------------------------------------------------------


def _quic_specs(params: LabParams) -> list[Any]:
    if not params.quic:
        return []
    from ccscope.lab.quic.lab import specs

    return specs(params.quic)


def _quic_companions(quic: list[Any], instance: int) -> list[ListenerSpec]:
    """HTTP(S) over TCP on each QUIC server's address too, as a real HTTP/3 site has (clients
    and the crawler find it over TCP first); kernel CUBIC, the TCP side is not ground truth."""
    return [
        ListenerSpec(cca=f"{q.short}.{q.stack}", addr=q.addr_in(instance), kernel_cca="cubic") for q in quic
    ]


def _quic_cert_names(quic: list[Any]) -> list[str]:
    if not quic:
        return []
    from ccscope.lab.quic.lab import cert_names

    return cert_names(quic)


def _quic_infos(quic: list[Any], instance: int) -> list[dict[str, Any]]:
    if not quic:
        return []
    from ccscope.lab.quic.lab import server_infos

    return server_infos(quic, instance)


def _quic_problems(st: dict[str, Any], timeout: float) -> list[str]:
    """The QUIC servers' /health over HTTP/3 (lab/quic); [] when the lab has none."""
    qs = st.get("quic_servers") or []
    if not qs:
        return []
    from ccscope.lab.quic.lab import check

    res = check(qs, Path(st["ca_file"]), timeout)
    return [
        f"{q['hostname']} ({q['addr']}, QUIC): {h['error']}"
        for q, h in zip(qs, res, strict=True)
        if not h["ok"]
    ]


def _server_info(cca: str, addr: str, kernel: str) -> LabServerInfo:
    host = f"{cca}.{LAB_DOMAIN}"
    return LabServerInfo(cca=cca, addr=addr, hostname=host, http_url=f"http://{host}/",
                         https_url=f"https://{host}/", kernel_cca=kernel)  # fmt: skip


def _require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, TUN devices, routes)")


def _link_binary() -> Path:
    from ccscope.capture.shell import link_binary

    return link_binary()


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=10, check=False)


def _state_prefix(st: dict[str, Any]) -> str:
    return lab_prefix(int(st.get("params", {}).get("instance", 0)))


def _check_prefix_free(prefix: str) -> None:
    r = _run(["ip", "-j", "route", "show", prefix])
    routes = json.loads(r.stdout or "[]") if r.returncode == 0 else []
    if routes:
        dev = routes[0].get("dev", "?")
        raise LabError(
            f"{prefix} is already routed (via {dev}): another lab is up on this instance. Stop "
            "it with `ccscope lab down` (with its --state-dir), or use another --instance."
        )


def _check_ccas(ccas: tuple[str, ...]) -> None:
    # Setting it on a scratch socket also makes the kernel load the module if it can.
    bad = []
    for c in ccas:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                set_cca(s, c)
            except OSError as e:
                bad.append(f"{c}: {e.strerror or e}")
    if bad:
        raise LabError(
            "congestion control not available: " + "; ".join(bad)
            + " (BPF zoo CCAs, cc_<name>, are loaded with `ccscope-cca load <name>`)"
        )  # fmt: skip


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def _spawn(argv: list[str], log: Any, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    """Start a detached process group (its own session: no terminal signals reach it)."""
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True, pass_fds=pass_fds, close_fds=True)  # fmt: skip
    except OSError as e:
        raise LabError(f"cannot start {argv[0]}: {e}") from e
    _SPAWNED[p.pid] = p
    return p


def _wait_ready(fd: int, proc: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise LabError(f"the lab shell was not ready within {timeout:g} s:\n{_tail(log)}")
        rl, _, _ = select.select([fd], [], [], min(left, 0.5))
        if rl:
            chunk = os.read(fd, 64)
            if not chunk:  # every writer closed without "ready": the emulator failed
                proc.poll()
                time.sleep(0.2)
                raise LabError(f"the lab shell failed to start:\n{_tail(log)}")
            buf += chunk
        elif proc.poll() is not None:
            raise LabError(f"the lab shell exited with status {proc.returncode}:\n{_tail(log)}")
    if not buf.startswith(b"ready"):
        raise LabError(f"unexpected readiness message {buf!r} from ccscope-link")


def _route_device(addr: str) -> tuple[str | None, str | None]:
    """The outer-side device and address the route into the shell uses."""
    r = _run(["ip", "-j", "route", "get", addr])
    try:
        info = json.loads(r.stdout)[0]
    except (ValueError, IndexError, KeyError):
        return None, None
    return info.get("dev"), info.get("prefsrc")


def _nft_tables() -> list[list[str]]:
    """ccscope-looking nftables tables as [family, name] (JSON-friendly)."""
    r = _run(["nft", "-j", "list", "tables"])
    if r.returncode != 0:
        return []
    try:
        items = json.loads(r.stdout).get("nftables", [])
    except ValueError:
        return []
    out = []
    for it in items:
        t = it.get("table")
        if t and ("ccs" in t.get("name", "")):
            out.append([str(t.get("family")), str(t.get("name"))])
    return out


def _link_exists(dev: str) -> bool:
    return os.path.exists(f"/sys/class/net/{dev}")


def _proc_id(pid: int) -> dict[str, int]:
    """A pid plus its start time, so a recycled pid is never mistaken for ours."""
    return {"pid": pid, "start": _start_time(pid) or 0}


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from 3 (state) on; comm may hold spaces


def _start_time(pid: int) -> int | None:
    f = _stat(pid)
    return int(f[19]) if f else None


def _reap(pid: int) -> None:
    p = _SPAWNED.get(pid)
    if p is not None and p.poll() is not None:
        _SPAWNED.pop(pid, None)


def _alive(p: dict[str, int]) -> bool:
    _reap(p["pid"])
    f = _stat(p["pid"])
    if f is None or f[0] in ("Z", "X"):
        return False
    return not p.get("start") or int(f[19]) == p["start"]


def _group_members(pgids: set[int]) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = _stat(int(d))
            if f and f[0] not in ("Z", "X") and int(f[2]) in pgids:
                out.append(int(d))
    return out


def _signal(p: dict[str, int], sig: int) -> None:
    """Signal a process, or its whole group when it leads one (the emulator and its command)."""
    pid = p["pid"]
    f = _stat(pid)
    alive = _alive(p)
    leader = f is not None and int(f[2]) == pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if leader or not alive:
            # A dead leader's group may live on; killpg reaches it (ESRCH if it is empty).
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _wait_gone(procs: list[dict[str, int]], pgids: set[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if not any(_alive(p) for p in procs) and not _group_members(pgids):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _leftovers(st: dict[str, Any], procs: list[dict[str, int]], pgids: set[int]) -> list[str]:
    left = [f"process {p['pid']} still running" for p in procs if _alive(p)]
    left += [f"process {pid} (group of the lab) still running" for pid in _group_members(pgids)]
    dev = st.get("link", {}).get("device")
    if dev and _link_exists(dev) and _device_owned_by_lab(st, dev):
        left.append(f"device {dev} still exists")
    prefix = _state_prefix(st)
    r = _run(["ip", "-j", "route", "show", prefix])
    if r.returncode == 0 and json.loads(r.stdout or "[]"):
        left.append(f"route {prefix} still present")
    now = _nft_tables()
    left += [f"nft table {f} {n} still present" for f, n in st.get("nft_tables", []) if [f, n] in now]
    return sorted(set(left))


def _device_owned_by_lab(st: dict[str, Any], dev: str) -> bool:
    """Shell device names are reused as soon as a shell exits: the device is still the lab's
    only if no other live shell holds the index lock (its pid is written in the lock file)."""
    idx = dev.removeprefix("ccs").removesuffix("o")
    try:
        holder = int(Path(f"/run/ccscope/shells/{idx}.lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return True  # no live owner recorded: an orphan of ours
    lab_pid = st.get("pids", {}).get("link", {}).get("pid")
    return holder == lab_pid or not Path(f"/proc/{holder}").exists()


def _force_cleanup(st: dict[str, Any]) -> None:
    """Remove exactly what this lab created, should the emulator have died without cleaning."""
    dev = st.get("link", {}).get("device")
    if dev and _link_exists(dev) and _device_owned_by_lab(st, dev):
        _run(["ip", "link", "del", dev])
    for fam, name in st.get("nft_tables", []):
        _run(["nft", "delete", "table", fam, name])
    prefix = _state_prefix(st)
    r = _run(["ip", "-j", "route", "show", prefix])
    routes = json.loads(r.stdout or "[]") if r.returncode == 0 else []
    if routes and (not dev or routes[0].get("dev") == dev):
        _run(["ip", "route", "del", prefix])


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(empty log)"


def _client_tls(ca: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def http_get(
    addr: str,
    port: int,
    path: str,
    *,
    host: str,
    tls: ssl.SSLContext | None = None,
    timeout: float = 2.0,
    headers: dict[str, str] | None = None,
    max_bytes: int = 1 << 26,
) -> tuple[int, dict[str, str], bytes]:
    """A minimal HTTP/1.1 GET to an address (lab names do not resolve in the root namespace)."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    req = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode()
    with socket.create_connection((addr, port), timeout=timeout) as raw:
        sock: socket.socket = tls.wrap_socket(raw, server_hostname=host) if tls else raw
        try:
            sock.sendall(req)
            buf = bytearray()
            while len(buf) <= max_bytes:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
        finally:
            if sock is not raw:
                sock.close()
    head, sep, body = bytes(buf).partition(b"\r\n\r\n")
    if not sep:
        raise OSError("truncated HTTP response")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, body


def _check_servers(
    servers: list[dict[str, Any]], tls: ssl.SSLContext | None, timeout: float
) -> list[dict[str, Any]]:
    # In parallel: each check costs a few RTTs of the emulated path.
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(servers)))) as ex:
        return list(ex.map(lambda s: _check_server(s, tls, timeout), servers))


def _check_server(srv: dict[str, Any], tls: ssl.SSLContext | None, timeout: float) -> dict[str, Any]:
    """GET /health over HTTP and HTTPS; the server must report the CCA it is meant to run."""
    res: dict[str, Any] = {"ok": False, "error": None}
    try:
        st, _, body = http_get(srv["addr"], 80, "/health", host=srv["hostname"], timeout=timeout)
        h = json.loads(body)
        res.update({"pid": h.get("pid"), "cca": h.get("cca"), "uptime_s": h.get("uptime_s"),
                    "records_written": h.get("records_written")})  # fmt: skip
        if st != 200 or h.get("cca") != srv.get("kernel_cca", srv["cca"]):
            res["error"] = f"http /health: status {st}, cca {h.get('cca')!r}"
            return res
        if tls is not None:
            st, _, _ = http_get(srv["addr"], 443, "/health", host=srv["hostname"], tls=tls,
                                timeout=timeout)  # fmt: skip
            if st != 200:
                res["error"] = f"https /health: status {st}"
                return res
        if srv.get("nginx_port"):
            st, _, _ = http_get(
                srv["addr"], srv["nginx_port"], "/health", host=srv["hostname"], timeout=timeout
            )
            if st != 200:
                res["error"] = f"nginx /health: status {st}"
                return res
        res["ok"] = True
    except (OSError, ssl.SSLError, ValueError) as e:
        res["error"] = f"{type(e).__name__}: {e}" if not str(e) else str(e)
    return res
