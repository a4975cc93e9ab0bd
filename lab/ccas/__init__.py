"""The congestion-control zoo: CCAs written in BPF, registered with the running kernel.

This kernel has only reno, cubic and bbr built in and cannot load modules, but it runs
TCP congestion control written in BPF (struct_ops). Each algorithm lives in
lab/ccas/bpf/<base>.bpf.c; build.sh compiles them into lab/ccas/build/ and builds the
loader, ``ccscope-cca``, which registers them as ``cc_<base>`` (prefixed so they never
clash with kernel names) and records what it did in /run/ccscope/ccas.json.

Servers then pick one per socket with ``setsockopt(IPPROTO_TCP, TCP_CONGESTION, name)``.
Never make a zoo CCA a namespace's default (net.ipv4.tcp_congestion_control): on this
kernel a failed attempt leaks a reference and the CCA can never be unregistered.

    from ccscope.lab import ccas
    ccas.ensure_loaded(["cubic", "bic"])           # -> ["cc_cubic", "cc_bic"]
    ccas.load("cubic", {"beta": 0.5}, as_name="cc_cubic_b50")
    ccas.unload(["cc_cubic_b50"])
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ccscope.settings import settings

HERE = Path(__file__).resolve().parent
BUILD_DIR = HERE / "build"
BIN = HERE / "loader" / "target" / "release" / "ccscope-cca"
PREFIX = "cc_"
AVAILABLE_FILE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")

# Algorithms that are complete and in the default set. BBRv2 (cc_bbr2) and BBRv3 (cc_bbr3) are
# built, loadable and validated (lab/validate/) but EXPERIMENTAL: they lack the ECN response
# and the drafts' exact per-packet loss test (see lab/ccas/README.md), so they are not in the
# default set. EXPERIMENTAL is also trained on by the classifier (classifier/dataset.py
# zoo_ccas): a census server running BBRv2/v3 must be named, gaps and all.
DEFAULT_SET = (
    "bic", "cubic", "highspeed", "htcp", "hybla", "illinois", "lp", "nv", "scalable",
    "vegas", "veno", "westwood", "yeah", "cdg", "dctcp",
)  # fmt: skip


EXPERIMENTAL = ("bbr2", "bbr3")


class CCAError(RuntimeError):
    """ccscope-cca failed; the message carries its explanation (and verifier log)."""


def _bin() -> Path:
    b = Path(settings().cca_bin or BIN)
    if not b.exists():
        raise CCAError(f"{b} is not built; run lab/ccas/build.sh")
    return b


def _run(args: list[str], timeout: float = 60) -> str:
    p = subprocess.run([str(_bin()), *args], capture_output=True, text=True, timeout=timeout, check=False)
    if p.returncode != 0:
        raise CCAError(p.stderr.strip() or f"ccscope-cca {' '.join(args)} exited {p.returncode}")
    return p.stdout


def base_of(name: str) -> str:
    """'cc_cubic' or 'cubic' -> 'cubic'."""
    return name[len(PREFIX) :] if name.startswith(PREFIX) else name


def zoo_name(name: str) -> str:
    """'cubic' or 'cc_cubic' -> 'cc_cubic' (the registered name)."""
    return PREFIX + base_of(name)


def available_ccas() -> list[str]:
    """Registered names of every built zoo CCA (cc_bic, cc_cubic, ...)."""
    if not BUILD_DIR.is_dir():
        return []
    return sorted(zoo_name(p.name[: -len(".bpf.o")]) for p in BUILD_DIR.glob("*.bpf.o"))


def zoo(with_params: bool = True) -> list[dict[str, Any]]:
    """Each built CCA with its load-time parameters (name, default, scale, doc)."""
    if not with_params:
        return [{"name": n, "base": base_of(n)} for n in available_ccas()]
    return json.loads(_run(["zoo", "--json"]))


def kernel_available() -> list[str]:
    """The kernel's tcp_available_congestion_control."""
    try:
        return AVAILABLE_FILE.read_text().split()
    except OSError:
        return []


def _names(names: str | Iterable[str]) -> list[str]:
    return [names] if isinstance(names, str) else list(names)


def load(
    names: str | Iterable[str],
    params: Mapping[str, Any] | None = None,
    *,
    as_name: str | None = None,
    replace: bool = False,
) -> list[str]:
    """Loads zoo CCAs and returns their registered names.

    ``params`` is either ``{key: value}`` (applied to every name) or
    ``{name: {key: value}}`` per CCA. Values are integers, or decimals for fixed-point
    parameters (``beta=0.5``). ``as_name`` registers a single CCA under another name,
    which is how variants are made. Loading what is already loaded with the same
    parameters is a no-op; different parameters raise CCAError unless ``replace``.
    """
    todo = _names(names)
    if as_name and len(todo) != 1:
        raise ValueError("as_name needs exactly one CCA")
    out = []
    for n in todo:
        p = params or {}
        per = p.get(n, p.get(zoo_name(n), p.get(base_of(n))))
        kv = per if isinstance(per, Mapping) else {k: v for k, v in p.items() if not isinstance(v, Mapping)}
        args = ["load", base_of(n), "--json"]
        if as_name:
            args += ["--as", as_name]
        for k, v in kv.items():
            args += ["--param", f"{k}={v}"]
        if replace:
            args.append("--replace")
        res = json.loads(_run(args).strip().splitlines()[-1])
        out.append(res["name"])
    return out


def unload(names: str | Iterable[str]) -> None:
    """Unregisters zoo CCAs (by registered name). Sockets still using one keep it alive
    until they close; the loader prints a warning then."""
    todo = _names(names)
    if todo:
        _run(["unload", *todo])


def unload_all() -> None:
    """Unloads everything ccscope-cca recorded (and unmounts a bpffs it mounted, if empty)."""
    _run(["unload", "--all"])


def loaded() -> list[dict[str, Any]]:
    """What ccscope-cca has registered: name, base, params, registered, pinned, map_id."""
    if not _bin_exists():
        return []
    return json.loads(_run(["list", "--json"]))["loaded"]


def _bin_exists() -> bool:
    return Path(settings().cca_bin or BIN).exists()


def ensure_loaded(names: str | Iterable[str]) -> list[str]:
    """Loads whichever of ``names`` is not registered yet (default parameters); returns
    the registered names. Built-in kernel CCAs (reno, cubic, bbr) pass through."""
    have = {e["name"] for e in loaded() if e.get("registered")}
    kernel = set(kernel_available())
    out, todo = [], []
    for n in _names(names):
        if n in kernel and not n.startswith(PREFIX):
            out.append(n)  # a kernel built-in asked for by its own name
            continue
        z = zoo_name(n)
        out.append(z)
        if z not in have:
            todo.append(z)
    if todo:
        load(todo)
    return out
