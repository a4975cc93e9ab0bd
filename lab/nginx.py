"""nginx as the lab's second server program: Debian's nginx, sendfile on, one listener per CCA.

nginx cannot set a congestion control per listening socket, so it runs under the listen() shim
(lab/shim), which maps each listener's address to its CCA (and sets TCP_MAXSEG for the MSS
factor). It serves `/obj/<N>` from files holding exactly the lab server's content for N bytes,
over plain HTTP so sendfile really sends from the page cache (TLS would copy through user space).
`?rate=B&after=N` caps the send rate at B bytes/s after the first N bytes (nginx's own
limit_rate / limit_rate_after): the application-limited sends of the condition space. The lab
server starts it inside the lab's namespace; `ccscope.lab.diag` records its ground truth.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from ccscope.errors import LabError
from ccscope.lab.content import iter_object

NGINX_PORT = 8080
SHIM = Path(__file__).resolve().parent / "shim" / "ccscope-listen.so"
DEFAULT_OBJECT_ROOT = Path("/var/tmp/ccscope-objects")

# One JSON object per request: the ground-truth sampler matches it to a connection by the
# client's address and port, and takes the run id from it.
_LOG_FORMAT = (
    '\'{"remote_addr":"$remote_addr","remote_port":"$remote_port","server_addr":"$server_addr",'
    '"uri":"$uri","run":"$http_x_ccscope_run","bytes":"$body_bytes_sent","status":"$status",'
    '"msec":"$msec"}\''
)


def nginx_binary() -> Path:
    p = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.access(p, os.X_OK):
        raise LabError("nginx is not installed: run `make setup` (Debian's nginx-light)")
    return Path(p)


def shim_library() -> Path:
    if not SHIM.is_file():
        raise LabError(f"{SHIM} is not built: run `make setup` (lab/shim/build.sh)")
    return SHIM


def ensure_objects(sizes: Iterable[int], root: Path = DEFAULT_OBJECT_ROOT) -> Path:
    """Files `<root>/obj/<N>` with the lab's content, written once (atomically) per size."""
    d = root / "obj"
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    os.chmod(d, 0o755)
    for n in sorted(set(sizes)):
        f = d / str(n)
        if f.is_file() and f.stat().st_size == n:
            continue
        tmp = d / f".{n}.tmp"
        with tmp.open("wb") as out:
            for chunk in iter_object(n):
                out.write(chunk)
        tmp.chmod(0o644)
        tmp.replace(f)
    return root


def write_conf(
    state_dir: Path, addrs: Sequence[str], object_root: Path, *, port: int = NGINX_PORT
) -> tuple[Path, Path]:
    """nginx.conf for listeners on `addrs`; returns (conf, access log)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    log = state_dir / "nginx-access.log"
    listens = "\n".join(f"        listen {a}:{port};" for a in addrs)
    tmp = state_dir / "nginx-tmp"
    tmp.mkdir(exist_ok=True)
    conf = f"""# written by ccscope.lab.nginx
daemon off;
master_process on;
worker_processes 1;
pid {state_dir}/nginx.pid;
error_log {state_dir}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format ccscope escape=json {_LOG_FORMAT};
    map $arg_rate $ccscope_rate {{ "" 0; default $arg_rate; }}
    map $arg_after $ccscope_after {{ "" 0; default $arg_after; }}
    access_log {log} ccscope;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    default_type application/octet-stream;
    sendfile on;
    keepalive_timeout 15s;
    send_timeout 60s;
    server {{
{listens}
        root {object_root};
        add_header Cache-Control no-store;
        location /obj/ {{
            limit_rate $ccscope_rate;
            limit_rate_after $ccscope_after;
        }}
        location = /health {{
            default_type application/json;
            return 200 '{{"ok": true, "server": "nginx"}}';
        }}
    }}
}}
"""
    path = state_dir / "nginx.conf"
    path.write_text(conf)
    return path, log


def start(conf: Path, cca_map: dict[str, str], *, mss: int | None, log: Path) -> subprocess.Popen[bytes]:
    """nginx in the foreground under the shim (in the caller's network namespace)."""
    env = {
        **os.environ,
        "LD_PRELOAD": str(shim_library()),
        "CCSCOPE_CCA_MAP": ",".join(f"{a}={c}" for a, c in cca_map.items()),
    }
    if mss:
        env["CCSCOPE_MAXSEG"] = str(mss)
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(nginx_binary()), "-c", str(conf), "-e", str(conf.parent / "nginx-error.log")],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
