"""`ccscope measure`: download one object through each standard profile and keep the traces.

For every profile: a fresh shell (bottleneck + delay + capture at its outer edge) runs the
fetch client; the capture becomes per-flow bytes-in-flight traces; the download's own flow
(matched by its client port) is kept, saved next to its pcap and stats. Profiles run one after
another by default, as the published method does, so the server sees one connection at a time;
`concurrent=True` runs them side by side, each in its own shell (bench/scale checks that the two
do not disturb each other on the lab path).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccscope.capture.shell import run_in_shell
from ccscope.capture.tcp_bif import flows_from_pcap_aligned
from ccscope.errors import CaptureError, CCScopeError
from ccscope.profile import Profile, get_profile
from ccscope.targets import lab_mode_enabled, resolve_target
from ccscope.trace import Trace


@dataclass
class ProfileRun:
    profile: str
    ok: bool
    trace_file: str | None = None
    sender_trace_file: str | None = None
    pcap_file: str | None = None
    fetch: dict[str, Any] = field(default_factory=dict)
    bytes: int = 0
    duration_s: float = 0.0
    points: int = 0
    max_bif: int = 0
    retransmits: int = 0
    base_rtt_ms: float | None = None
    internet_rtt_ms: float | None = None
    partial: bool = False
    error: str | None = None
    groundtruth: dict[str, Any] | None = None  # lab mode: error against the server's TCP_INFO


def bif_errors(groundtruth: dict[str, Any] | None) -> tuple[float | None, float | None, float | None]:
    """The three figures every report shows from a run's ground-truth comparison, in % of BDP:
    capture-aligned and sender-aligned beyond the truth's resolution, and sender-aligned strict."""
    g = groundtruth or {}
    cap, snd = g.get("capture") or {}, g.get("sender") or {}
    return cap.get("mae_pct_bdp_resolved"), snd.get("mae_pct_bdp_resolved"), snd.get("mae_pct_bdp")


def format_pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


@dataclass
class Measurement:
    url: str
    run_id: str
    out_dir: str
    lab: bool
    started_at: float
    runs: list[ProfileRun] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "run_id": self.run_id,
            "out_dir": self.out_dir,
            "lab": self.lab,
            "started_at": self.started_at,
            "ok": self.ok,
            "runs": [r.__dict__ for r in self.runs],
        }


def _fetch_cmd(
    url: str, *, lab: bool, cafile: Path | None, run_id: str, timeout: float, max_bytes: int
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "ccscope.capture.fetch",
        url,
        "--run-id",
        run_id,
        "--timeout",
        f"{timeout:g}",
        "--max-bytes",
        str(max_bytes),
    ]
    if lab:
        cmd.append("--lab")
    if cafile is not None:
        cmd += ["--cacert", str(cafile)]
    return cmd


def _pick_flow(traces: list[Trace], local_port: int) -> Trace:
    for t in traces:
        if t.flow.client_port == local_port:
            return t
    if not traces:
        raise CaptureError("the capture holds no TCP flow with a handshake")
    return traces[0]  # the largest flow: the best guess when the port is unknown


def measure_profile(
    url: str,
    profile: Profile,
    out_dir: Path,
    *,
    run_id: str,
    lab: bool = False,
    timeout: float = 60.0,
    max_bytes: int = 16 * 1024 * 1024,
    access: Sequence[str] = (),
    seed: int | None = None,
    layers: Sequence[Sequence[str]] = (),
    stem: str | None = None,
    keep_pcap: bool = True,
    setup_slack: float = 15.0,
) -> ProfileRun:
    """One download through one profile; never raises for a failed download, reports it.
    `access`: link options of an emulated access path around the profile's shell (a lab
    vantage point); `layers`: several such shells, outermost first (around `access`); the
    capture stays at the profile's bottleneck. `stem` names the files (default: the profile's
    name); without `keep_pcap` the capture is deleted once the traces are written. `seed` seeds the shell's
    random jitter and loss (`ccscope-link --seed`); None keeps the emulator's default."""
    hosts = cafile = None
    if lab:
        from ccscope.lab.lab import lab_ca_file, lab_hosts_file

        hosts, cafile = lab_hosts_file(), lab_ca_file()
    stem = stem or profile.name
    pcap = out_dir / f"{stem}.pcap"
    stats = out_dir / f"{stem}.stats.json"
    run = ProfileRun(profile=profile.name, ok=False, pcap_file=str(pcap))
    cmd = _fetch_cmd(
        url, lab=lab, cafile=cafile, run_id=f"{run_id}-{profile.name}", timeout=timeout, max_bytes=max_bytes
    )
    sh = run_in_shell(
        cmd,
        profile,
        pcap=pcap,
        stats=stats,
        hosts=hosts,
        extra=("--seed", str(seed)) if seed is not None else (),
        outer=access,
        layers=layers,
        timeout=timeout + setup_slack,
    )
    try:
        run.fetch = json.loads(sh.stdout.strip().splitlines()[-1]) if sh.stdout.strip() else {}
    except ValueError:
        run.fetch = {}
    fetch_failed = sh.returncode != 0
    if fetch_failed:
        run.error = run.fetch.get("error") or sh.stderr.strip()[-300:] or f"exit {sh.returncode}"
    if not pcap.exists():
        run.error = run.error or "no capture was written"
        return run
    try:
        both = flows_from_pcap_aligned(pcap, ("capture", "sender"), object_url=url, profile=profile)
        cap = both["capture"]
        flow = _pick_flow(cap.traces, int(run.fetch.get("local_port") or 0))
    except CaptureError as e:
        run.error = run.error or str(e)
        return run
    sender = _pick_flow(both["sender"].traces, flow.flow.client_port)
    # A download that failed or was cut short still leaves a usable, clearly marked trace.
    partial = fetch_failed or cap.partial or bool(run.fetch.get("truncated"))
    for t in (flow, sender):
        t.partial = partial
        t.extra.update({"run_id": run_id, "fetch": run.fetch, "link_stats": sh.stats})
    run.trace_file = str(flow.save(out_dir / f"{stem}.trace.json"))
    run.sender_trace_file = str(sender.save(out_dir / f"{stem}.sender.trace.json"))
    run.partial = partial
    run.ok = not fetch_failed
    run.bytes = flow.bytes_acked
    run.duration_s = round(flow.duration, 3)
    run.points = len(flow.t)
    run.max_bif = int(flow.bif.max()) if len(flow.bif) else 0
    run.retransmits = len(flow.events.get("retransmit", []))
    run.base_rtt_ms = flow.base_rtt_ms
    run.internet_rtt_ms = flow.internet_rtt_ms
    if lab:
        run.groundtruth = _compare_with_groundtruth(flow, sender, profile, f"{run_id}-{profile.name}")
    if not keep_pcap:
        pcap.unlink(missing_ok=True)
        run.pcap_file = None
    return run


def _compare_with_groundtruth(
    flow: Trace, sender: Trace, profile: Profile, run_id: str
) -> dict[str, Any] | None:
    from ccscope.lab.groundtruth import compare_bif, compare_pipe, find_groundtruth

    truth = find_groundtruth(run_id=run_id, trace=flow, wait_s=5.0)
    if truth is None:
        return None
    bdp = profile.bdp_bytes(flow.internet_rtt_ms or 0.0) or 1.0
    out = {
        "cca": truth.extra.get("cca"),
        "capture": compare_bif(flow, truth, bdp_bytes=bdp),
        "sender": compare_bif(sender, truth, bdp_bytes=bdp),
    }
    if "sacked" in sender.columns:  # with SACK the pipe is measured too: score it
        out["sender_pipe"] = compare_pipe(sender, truth, bdp_bytes=bdp)
    return out


def measure(
    url: str,
    profiles: Sequence[str] = ("A", "B"),
    out_dir: Path | None = None,
    *,
    lab: bool = False,
    timeout: float = 60.0,
    max_bytes: int = 16 * 1024 * 1024,
    access: Sequence[str] = (),
    seed: int | None = None,
    on_profile: Callable[[str, int, int], AbstractContextManager[object]] | None = None,
    concurrent: bool = False,
) -> Measurement:
    """Download `url` through each profile in turn, or, with `concurrent`, through all of them
    at once (one shell and one connection per profile; the time to a verdict is the longest
    profile's, not the sum). `on_profile(name, i, n)`, when given, is a context manager entered
    around profile i of n (progress display); concurrent profiles enter theirs together."""
    lab = lab_mode_enabled(lab)
    if not lab:
        # Vet the target up front for a clear refusal; fetch vets it again inside the shell.
        # (Lab names resolve only inside the shell, so lab targets are vetted there alone.)
        resolve_target(url)
    run_id = uuid.uuid4().hex[:12]
    out = Path(out_dir) if out_dir else Path("runs") / time.strftime("%Y%m%dT%H%M%S") / run_id
    out.mkdir(parents=True, exist_ok=True)
    m = Measurement(url=url, run_id=run_id, out_dir=str(out), lab=lab, started_at=time.time())

    def one(i: int, name: str) -> ProfileRun:
        around = on_profile(name, i, len(profiles)) if on_profile else nullcontext()
        try:
            with around:
                return measure_profile(
                    url,
                    get_profile(name),
                    out,
                    run_id=run_id,
                    lab=lab,
                    timeout=timeout,
                    max_bytes=max_bytes,
                    access=access,
                    seed=seed,
                )
        except CCScopeError as e:
            return ProfileRun(profile=name, ok=False, error=str(e))

    if concurrent and len(profiles) > 1:
        # Each profile has its own shell, bottleneck and capture; threads only wait on them.
        with ThreadPoolExecutor(max_workers=len(profiles), thread_name_prefix=f"measure-{run_id}") as pool:
            m.runs.extend(pool.map(one, range(len(profiles)), profiles))
    else:
        m.runs.extend(one(i, name) for i, name in enumerate(profiles))
    (out / "measurement.json").write_text(json.dumps(m.to_dict(), indent=2, default=str))
    return m
