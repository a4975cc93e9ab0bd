"""Validation suite: does every lab CCA do what its specification says?

Each check downloads an object from a lab server through a client-side `ccscope-link` shell
whose link forces the CCA's defining behaviour (a drop-tail bottleneck for multiplicative
decrease, a long fat path for growth laws, a deep buffer for delay-based holding, random loss,
a competing flow, an ECN marker), then reads the server's own TCP_INFO ground truth (1 ms
samples: cwnd, ssthresh, ca_state, srtt, min_rtt, delivery and pacing rate) and compares what
it sees with the specification. Every check yields rows

    {cca, parameter, measured, expected, tolerance, pass, note}

with `pass` = |measured - expected| <= tolerance (one-sided limits are written as
expected 0 or 1 with the limit as tolerance). A second part compares the BPF CUBIC with the
kernel's under the standard profiles A and B (see `compare_cubic`).

This module is the suite (which checks run, the lab they run on, the report) and its command;
`series` holds the client link's path, the ground truth as arrays and the result rows, `client`
the downloads through a client shell, `checks` the checks and `cubic` the CUBIC comparison.

    ccscope lab validate [--ccas reno,cubic,...] [--fast] [--json]

brings its own lab up (instance 3, /run/ccscope/lab-validate unless told otherwise), loads
the zoo CCAs it needs, and at the end takes the lab down and unloads exactly what it loaded.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccscope.errors import CCScopeError, LabError
from ccscope.lab.registry import lab_cca
from ccscope.lab.validate.checks import (
    check_bbr,
    check_bbr_loss,
    check_beta,
    check_cdg,
    check_cubic_curve,
    check_dctcp,
    check_highspeed,
    check_htcp,
    check_hybla,
    check_illinois,
    check_lp,
    check_nv,
    check_scalable_fat,
    check_vegas,
    check_veno,
    check_westwood,
    check_yeah,
)
from ccscope.lab.validate.client import DEFAULT_INSTANCE, DEFAULT_STATE_DIR, Ctx
from ccscope.lab.validate.cubic import compare_cubic
from ccscope.lab.validate.series import LAB_DELAY_MS, Row

# --- the suite --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    name: str
    ccas: tuple[str, ...]  # lab names the check downloads from
    fn: Callable[[Ctx], list[Row]]
    fast: bool = False  # part of the quick subset the tests run


# Longest first, so the worker pool finishes together.
CHECKS: tuple[Check, ...] = (
    Check("cubic-curve", ("cubic",), lambda c: check_cubic_curve(c, "cubic")),
    Check("cc-cubic-curve", ("cc-cubic",), lambda c: check_cubic_curve(c, "cc-cubic")),
    Check("bbr3", ("bbr3",), lambda c: check_bbr(c, "bbr3")),
    Check("bbr2", ("bbr2",), lambda c: check_bbr(c, "bbr2")),
    Check("bbr2-loss", ("bbr2",), lambda c: check_bbr_loss(c, "bbr2")),
    Check("veno", ("veno",), check_veno),
    Check("htcp", ("htcp",), check_htcp),
    Check("lp", ("lp", "reno"), check_lp),
    Check("hybla", ("hybla",), check_hybla),
    Check("nv", ("nv",), check_nv),
    Check("illinois", ("illinois",), check_illinois),
    Check("yeah", ("yeah",), check_yeah),
    Check("highspeed", ("highspeed",), check_highspeed),
    Check("scalable-mimd", ("scalable",), check_scalable_fat),
    Check("cdg", ("cdg",), check_cdg),
    Check("beta-reno", ("reno",), lambda c: check_beta(c, "reno"), fast=True),
    Check("beta-cubic", ("cubic",), lambda c: check_beta(c, "cubic"), fast=True),
    Check("beta-cc-cubic", ("cc-cubic",), lambda c: check_beta(c, "cc-cubic")),
    Check("beta-bic", ("bic",), lambda c: check_beta(c, "bic"), fast=True),
    Check("beta-scalable", ("scalable",), lambda c: check_beta(c, "scalable"), fast=True),
    Check("beta-dctcp-noecn", ("dctcp",), lambda c: check_beta(c, "dctcp")),
    Check("westwood", ("westwood",), check_westwood),
    Check("vegas", ("vegas",), check_vegas, fast=True),
    Check("dctcp-ecn", ("dctcp",), check_dctcp),
)
ZOO = (
    "bic",
    "cc-cubic",
    "highspeed",
    "htcp",
    "hybla",
    "illinois",
    "lp",
    "nv",
    "scalable",
    "vegas",
    "veno",
    "westwood",
    "yeah",
    "cdg",
    "dctcp",
    "bbr2",
    "bbr3",
)


def select_checks(ccas: Sequence[str] | None = None, *, fast: bool = False) -> list[Check]:
    """Checks that concern any of `ccas` (lab or kernel names; all when None)."""
    want = None if ccas is None else {lab_cca(c).name for c in ccas}
    out = []
    for ch in CHECKS:
        if fast and not ch.fast:
            continue
        subject = ch.ccas[0]  # LP's check also needs Reno, but it is about LP
        if want is None or subject in want:
            out.append(ch)
    return out


@dataclass
class Report:
    rows: list[Row]
    cubic_compare: list[dict[str, Any]]
    errors: list[dict[str, str]]
    ccas_loaded: list[str]
    seconds: float
    downloads: int
    check_seconds: dict[str, float]

    @property
    def ok(self) -> bool:
        return (
            not self.errors
            and all(r.passed for r in self.rows)
            and all(c["pass"] for c in self.cubic_compare)  # indistinguishable or equivalent
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "rows": [r.to_dict() for r in self.rows],
            "cubic_bpf_vs_kernel": self.cubic_compare,
            "errors": self.errors,
            "ccas_loaded": self.ccas_loaded,
            "seconds": round(self.seconds, 1),
            "downloads": self.downloads,
            "check_seconds": self.check_seconds,
        }


def _registered() -> set[str]:
    from ccscope.lab import ccas as zoo

    return set(zoo.kernel_available())


def _used_by_other_labs(names: Sequence[str], own: Path) -> set[str]:
    """Kernel CCA names that another running lab (a state.json under /run/ccscope with a live
    emulator) serves: unloading them would break that lab's new connections."""
    used: set[str] = set()
    for st_file in Path("/run/ccscope").glob("*/state.json"):
        if st_file.parent.resolve() == own.resolve():
            continue
        try:
            st = json.loads(st_file.read_text())
            pid = int(st["pids"]["link"]["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not Path(f"/proc/{pid}").exists():
            continue
        used |= {srv.get("kernel_cca") for srv in st.get("servers", [])} & set(names)
    return used


@contextlib.contextmanager
def validation_lab(
    ccas: Sequence[str],
    *,
    instance: int = DEFAULT_INSTANCE,
    state_dir: str | Path | None = None,
    keep: bool = False,
    log: Callable[[str], None] | None = None,
) -> Iterator[Ctx]:
    """A lab with servers for `ccas` (lab names), zoo CCAs loaded as needed. On exit the lab goes
    down and the CCAs this call registered are unregistered again, except any another running
    lab has started to serve meanwhile (those stay, recorded by the loader, and are logged)."""
    from ccscope.lab import ccas as zoo
    from ccscope.lab.lab import Lab, LabParams

    names = tuple(dict.fromkeys(lab_cca(c).name for c in ccas))
    kernel = [lab_cca(c).kernel for c in names]
    before = _registered()
    missing = [k for k in kernel if k.startswith(zoo.PREFIX) and k not in before]
    mine: list[str] = []
    lab = Lab(state_dir or DEFAULT_STATE_DIR)
    say = log or (lambda _m: None)
    try:
        for k in missing:
            mine += zoo.load(zoo.base_of(k))
        lab.up(LabParams(delay_ms=LAB_DELAY_MS, ccas=names, instance=instance))
        ctx = Ctx(lab.dir, log=log)
        ctx.instance = instance
        ctx.kernel_names = kernel
        ctx.loaded_here = list(mine)
        yield ctx
    finally:
        try:
            lab.down(purge=not keep)
            if not keep:
                shutil.rmtree(lab.dir / "cubic-compare", ignore_errors=True)
        finally:
            keep_loaded = _used_by_other_labs(mine, lab.dir)
            if keep_loaded:
                say(f"left registered (another running lab serves them): {', '.join(sorted(keep_loaded))}")
            drop = [m for m in mine if m not in keep_loaded]
            if drop:
                zoo.unload(drop)


def run_validation(
    ccas: Sequence[str] | None = None,
    *,
    fast: bool = False,
    cubic_n: int | None = None,
    cubic_profiles: Sequence[str] | None = None,
    jobs: int = 3,
    instance: int = DEFAULT_INSTANCE,
    state_dir: str | Path | None = None,
    keep: bool = False,
    log: Callable[[str], None] | None = None,
) -> Report:
    """Run the selected checks (and, unless cubic_n is 0, the BPF-vs-kernel CUBIC comparison)."""
    t0 = time.monotonic()
    checks = select_checks(ccas, fast=fast)
    if cubic_n is None:
        cubic_n = 4 if fast else 5  # 4 + 4 traces: 70 label splits, so p can reach 0.03
    if cubic_profiles is None:
        cubic_profiles = ("A",) if fast else ("A", "B")
    do_cubic = cubic_n > 0 and (ccas is None or {"cubic", "cc-cubic"} & {lab_cca(c).name for c in ccas})
    needed = [c for ch in checks for c in ch.ccas] + (["cubic", "cc-cubic"] if do_cubic else [])
    if not needed:
        raise LabError("nothing to validate for " + ",".join(ccas or []))
    rows: list[Row] = []
    errors: list[dict[str, str]] = []
    timings: dict[str, float] = {}
    say = log or (lambda _m: None)
    with validation_lab(needed, instance=instance, state_dir=state_dir, keep=keep, log=log) as ctx:
        loaded = sorted(k for k in ctx.kernel_names if k.startswith("cc_"))

        def run(ch: Check) -> list[Row]:
            t = time.monotonic()
            try:
                return ch.fn(ctx)
            except Exception as e:  # one broken check must not hide the others' results
                errors.append({"check": ch.name, "error": f"{type(e).__name__}: {e}"})
                return []
            finally:
                timings[ch.name] = round(time.monotonic() - t, 1)
                say(f"{ch.name} done in {timings[ch.name]:.0f} s")

        cubic: list[dict[str, Any]] = []
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
            futs = [ex.submit(run, ch) for ch in checks]
            for f in futs:
                rows += f.result()
        if do_cubic:
            t = time.monotonic()
            try:
                cubic = compare_cubic(ctx, cubic_profiles, cubic_n, jobs=jobs)
            except (CCScopeError, OSError, subprocess.SubprocessError, ValueError) as e:
                errors.append({"check": "cubic-compare", "error": f"{type(e).__name__}: {e}"})
            timings["cubic-compare"] = round(time.monotonic() - t, 1)
        downloads = ctx.downloads + (2 * cubic_n * len(cubic_profiles) if do_cubic else 0)
    return Report(rows, cubic, errors, loaded, time.monotonic() - t0, downloads, timings)


def format_report(rep: Report) -> str:
    lines = [f"{'cca':<10} {'parameter':<52} {'measured':>9} {'expected':>9} {'tol':>7}  ok"]
    for r in rep.rows:
        m = "-" if r.measured is None else f"{r.measured:.3f}"
        lines.append(
            f"{r.cca:<10} {r.parameter[:52]:<52} {m:>9} {r.expected:>9.3f} {r.tolerance:>7.3f}  "
            f"{'yes' if r.passed else 'NO'}"
        )
    for c in rep.cubic_compare:
        lines.append(
            f"cubic BPF vs kernel, profile {c['profile']}: distance ratio {c['ratio']:.3f} "
            f"(cross {c['cross_median_distance_bdp']:.3f} / within "
            f"{c['within_median_distance_bdp']:.3f} BDP), "
            f"p = {c['p_value']:.3f}, n = {c['n']} each -> "
            f"{'indistinguishable' if c['indistinguishable'] else 'distinguishable'}, "
            f"excess {c['excess_distance_bdp']:+.3f} BDP "
            f"({'equivalent' if c['equivalent'] else 'NOT equivalent'})"
        )
    for e in rep.errors:
        lines.append(f"error in {e['check']}: {e['error']}")
    n_ok = sum(r.passed for r in rep.rows)
    lines.append(f"{n_ok}/{len(rep.rows)} rows pass; {rep.downloads} downloads in {rep.seconds:.0f} s")
    return "\n".join(lines)


# --- CLI --------------------------------------------------------------------------------------


def register(subparsers: Any) -> Any:
    """Adds `validate` to the `ccscope lab` subcommands."""
    p = subparsers.add_parser(
        "validate",
        help="check each CCA's defining behaviour from ground truth",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--ccas", help="comma-separated lab names (default: all checks)")
    p.add_argument("--fast", action="store_true", help="the quick subset (what the tests run)")
    p.add_argument("--cubic-n", type=int, help="downloads per CUBIC implementation and profile (0: skip)")
    p.add_argument("--jobs", type=int, default=3, help="checks run at once (default 3)")
    p.add_argument("--instance", type=int, default=DEFAULT_INSTANCE)
    p.add_argument("--state-dir", default=str(DEFAULT_STATE_DIR))
    p.add_argument("--keep", action="store_true", help="keep the ground truth when the lab goes down")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_validate)
    return p


def cmd_validate(args: Any) -> int:
    ccas = [c.strip() for c in args.ccas.split(",") if c.strip()] if args.ccas else None
    log = None if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    try:
        if ccas:
            for c in ccas:
                lab_cca(c)
    except KeyError as e:
        raise LabError(str(e.args[0])) from None
    rep = run_validation(
        ccas,
        fast=args.fast,
        cubic_n=args.cubic_n,
        jobs=args.jobs,
        instance=args.instance,
        state_dir=args.state_dir,
        keep=args.keep,
        log=log,
    )
    print(json.dumps(rep.to_dict(), indent=2) if args.json else format_report(rep))
    return 0 if rep.ok else 1
