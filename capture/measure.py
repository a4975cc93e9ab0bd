"""`ccscope measure`: download one object through each standard profile and keep the traces.

For every profile: a fresh shell (bottleneck + delay + capture at its outer edge) runs the
transport's client (capture/transports: TCP's fetch.py, QUIC's quiche client); the transport
turns the capture into the download's bytes-in-flight trace (matched by its client port), saved
next to its pcap and stats. Profiles run one after another by default, as the published method
does, so the server sees one connection at a time; `concurrent=True` runs them side by side,
each in its own shell (bench/scale checks that the two do not disturb each other on the lab
path).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccscope.capture.shell import StopSignal, run_in_shell
from ccscope.capture.transports import ClientRequest, client_result
from ccscope.errors import CaptureError, CCScopeError
from ccscope.profile import Profile, get_profile
from ccscope.targets import lab_mode_enabled, resolve_target
from ccscope.transports import get_transport

if TYPE_CHECKING:
    from ccscope.classifier.stopping import StoppingRule
    from ccscope.trace import Trace
    from ccscope.verdict import Verdict


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
    groundtruth: dict[str, Any] | None = None  # lab mode: error against the server's own record
    transport: str = "tcp"
    estimator: dict[str, Any] | None = None  # what the transport's BiF estimator reports (QUIC)
    # The failure's kind (capture.fetch's error_kind, or a CCScopeError's kind: capture, shell,
    # lab_down...), so that the workers decide retries on it rather than on the message.
    error_kind: str | None = None
    stopped: bool = False  # ended early by adaptive stopping: a cut download, on purpose
    # How well the emulator kept its timing (release lateness p99, both directions' worse) and
    # what the hypervisor took from the machine meanwhile (capture/host.py).
    timing: dict[str, Any] | None = None


def bif_errors(groundtruth: dict[str, Any] | None) -> tuple[float | None, float | None, float | None]:
    """The three figures every report shows from a run's ground-truth comparison, in % of BDP:
    capture-aligned and sender-aligned beyond the truth's resolution, and sender-aligned strict."""
    g = groundtruth or {}
    cap, snd = g.get("capture") or {}, g.get("sender") or {}
    if "sender_time" in g:  # QUIC: the qlog truth is exact; its error is read over time
        return (
            (g.get("capture_time") or {}).get("mae_pct_bdp"),
            g["sender_time"].get("mae_pct_bdp"),
            snd.get("mae_pct_bdp"),
        )
    return cap.get("mae_pct_bdp_resolved"), snd.get("mae_pct_bdp_resolved"), snd.get("mae_pct_bdp")


def shell_timing(stats: dict[str, Any] | None) -> dict[str, Any] | None:
    """The emulator's release lateness p99 (ms, the worse direction) and the host's steal."""
    if not isinstance(stats, dict):
        return None
    p99 = [
        float(v)
        for d in ("down", "up")
        if isinstance(v := ((stats.get(d) or {}).get("lateness_us") or {}).get("p99"), int | float)
    ]
    host = stats.get("host") or {}
    return {
        "lateness_p99_ms": round(max(p99) / 1000, 3) if p99 else None,
        "host_steal_s": host.get("steal_s"),
    }


def timing_warning(profile: str, timing: dict[str, Any] | None, limit_ms: float = 1.0) -> str | None:
    """One line for a person when the emulator released packets late, saying whether the
    hypervisor froze the machine meanwhile; None when the timing held."""
    late = (timing or {}).get("lateness_p99_ms")
    if late is None or late < limit_ms:
        return None
    steal = (timing or {}).get("host_steal_s")
    if steal is None:
        why = "the hypervisor's steal could not be read"
    elif steal > 0:
        why = (
            f"the hypervisor took {steal:.2f} CPU-s from this machine meanwhile (a frozen VM, "
            "not the emulator falling behind)"
        )
    else:
        why = "no hypervisor steal: this machine's own load delayed it"
    return f"timing: profile {profile}'s emulator released 1 % of packets >= {late:.1f} ms late; {why}"


def format_pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


@dataclass
class Measurement:
    url: str
    run_id: str
    out_dir: str
    lab: bool
    started_at: float
    transport: str = "tcp"
    runs: list[ProfileRun] = field(default_factory=list)
    # Adaptive stopping's record (None without it): the rule, each check's verdict, and whether
    # and when the downloads were stopped.
    stopping: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "run_id": self.run_id,
            "out_dir": self.out_dir,
            "lab": self.lab,
            "transport": self.transport,
            "started_at": self.started_at,
            "ok": self.ok,
            "runs": [r.__dict__ for r in self.runs],
            **({"stopping": self.stopping} if self.stopping is not None else {}),
        }


def profile_run_id(run_id: str, profile: str) -> str:
    """The run id one profile's download sends the server: the lab names its ground-truth
    record by it, so whoever looks the record up later builds it here too."""
    return f"{run_id}-{profile}"


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
    transport: str = "tcp",
    stop: StopSignal | None = None,
    groundtruth: bool = True,
    cap: StoppingRule | None = None,
) -> ProfileRun:
    """One download through one profile; never raises for a failed download, reports it.
    `access`: link options of an emulated access path around the profile's shell (a lab
    vantage point); `layers`: several such shells, outermost first (around `access`); the
    capture stays at the profile's bottleneck. `stem` names the files (default: the profile's
    name); without `keep_pcap` the capture is deleted once the traces are written. `seed` seeds
    the shell's random jitter and loss (`ccscope-link --seed`); None keeps the emulator's default.
    `transport` names a catalogued transport (ccscope/transports.py); it adapts the profile
    (QUIC needs 1280-byte packets) and supplies the client and the capture -> trace step.
    Setting `stop` ends the download where it is (adaptive stopping); what was captured until
    then is the trace. `cap`: the rule whose evidence cap (StoppingRule.cap_s, from the
    connection's RTT) the TCP client keeps by itself, so that a download a late check did not
    stop still ends where the classifier's evidence does. `groundtruth=False` skips the lab's
    comparison with the server's record (a caller that keeps only the traces: it reads every
    record of the last minutes, so its CPU grows with the measurements running at once)."""
    tr = get_transport(transport)
    why = tr.unavailable()
    if why:
        return ProfileRun(profile=profile.name, ok=False, transport=transport, error=why)
    profile = tr.adapt_profile(profile)
    hosts = cafile = None
    if lab:
        from ccscope.lab.lab import lab_ca_file, lab_hosts_file

        hosts, cafile = lab_hosts_file(), lab_ca_file()
    stem = stem or profile.name
    pcap = out_dir / f"{stem}.pcap"
    stats = out_dir / f"{stem}.stats.json"
    run = ProfileRun(profile=profile.name, ok=False, pcap_file=str(pcap), transport=transport)
    req = ClientRequest(
        url=url,
        run_id=profile_run_id(run_id, profile.name),
        out_dir=out_dir,
        stem=stem,
        lab=lab,
        cafile=cafile,
        timeout=min(timeout, cap.cap_max_s) if cap is not None else timeout,
        max_bytes=max_bytes,
        cap_rtts=cap.cap_rtts if cap is not None else None,
        cap_min_s=cap.cap_min_s if cap is not None else 0.0,
    )
    sh = run_in_shell(
        tr.client_command(req),
        profile,
        pcap=pcap,
        stats=stats,
        hosts=hosts,
        extra=("--seed", str(seed)) if seed is not None else (),
        outer=access,
        layers=layers,
        timeout=timeout + setup_slack,
        stop=stop,
    )
    run.fetch = client_result(sh.stdout)
    run.stopped = sh.stopped
    run.timing = shell_timing(sh.stats)
    fetch_failed = sh.returncode != 0
    if fetch_failed:
        run.error = run.fetch.get("error") or sh.stderr.strip()[-300:] or f"exit {sh.returncode}"
        run.error_kind = run.fetch.get("error_kind") or ("timeout" if sh.timed_out else "shell")
    if not pcap.exists():
        if run.error is None:
            run.error, run.error_kind = "no capture was written", CaptureError.kind
        return run
    try:
        got = tr.flows(
            pcap,
            fetch=run.fetch,
            object_url=url,
            profile=profile,
            out_dir=out_dir,
            stem=stem,
            link_stats=sh.stats,
        )
    except CaptureError as e:
        if run.error is None:
            run.error, run.error_kind = str(e), e.kind
        return run
    flow, sender = got.capture, got.sender
    # A download that failed or was cut short still leaves a usable, clearly marked trace.
    partial = fetch_failed or got.partial or bool(run.fetch.get("truncated"))
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
    run.estimator = got.info or None
    if lab and groundtruth and tr.groundtruth is not None:
        run.groundtruth = tr.groundtruth(
            flow, sender, profile, req.run_id, out_dir=out_dir, stem=stem, fetch=run.fetch
        )
    if not keep_pcap:
        pcap.unlink(missing_ok=True)
        run.pcap_file = None
    return run


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
    transport: str = "tcp",
    stopping: StoppingRule | None = None,
    classify: Callable[[Sequence[Trace]], Verdict] | None = None,
    groundtruth: bool = True,
) -> Measurement:
    """Download `url` through each profile in turn, or, with `concurrent`, through all of them
    at once (one shell and one connection per profile; the time to a verdict is the longest
    profile's, not the sum). `on_profile(name, i, n)`, when given, is a context manager entered
    around profile i of n (progress display); concurrent profiles enter theirs together.
    `transport` names a catalogued transport (ccscope/transports.py).

    `stopping` (adaptive stopping, implies `concurrent`): while the profiles download, every
    `stopping.every_s` seconds the captures so far become traces and are classified (`classify`,
    default the shipped classifier); once `stopping.settled(...)` the downloads are stopped and
    the traces end there. The rule never stops before `min_s` seconds of trace, the evidence a
    BBRv1 server's ProbeRTT (every 10 s) needs; otherwise the rule's evidence cap (cap_s), kept
    by the TCP client itself, `timeout` and `max_bytes` end the downloads.
    `Measurement.stopping` records the checks. `groundtruth`: in the lab, score each profile
    against the server's own record (measure_profile)."""
    get_transport(transport)  # an unknown name is refused before anything runs
    if stopping is not None:
        concurrent = True
    lab = lab_mode_enabled(lab)
    if not lab:
        # Vet the target up front for a clear refusal; fetch vets it again inside the shell.
        # (Lab names resolve only inside the shell, so lab targets are vetted there alone.)
        resolve_target(url)
    run_id = uuid.uuid4().hex[:12]
    out = Path(out_dir) if out_dir else Path("runs") / time.strftime("%Y%m%dT%H%M%S") / run_id
    out.mkdir(parents=True, exist_ok=True)
    m = Measurement(
        url=url, run_id=run_id, out_dir=str(out), lab=lab, started_at=time.time(), transport=transport
    )

    stop = StopSignal() if stopping is not None else None

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
                    transport=transport,
                    stop=stop,
                    groundtruth=groundtruth,
                    cap=stopping,
                )
        except CCScopeError as e:
            return ProfileRun(profile=name, ok=False, error=str(e), error_kind=e.kind, transport=transport)

    if (concurrent and len(profiles) > 1) or stop is not None:
        # Each profile has its own shell, bottleneck and capture; threads only wait on them.
        with ThreadPoolExecutor(max_workers=len(profiles), thread_name_prefix=f"measure-{run_id}") as pool:
            futures = [pool.submit(one, i, name) for i, name in enumerate(profiles)]
            if stopping is not None and stop is not None:
                watcher = _Watcher(url, profiles, out, transport, stopping, classify, stop)
                watcher.run(futures)
                m.stopping = watcher.record
            m.runs.extend(f.result() for f in futures)
    else:
        m.runs.extend(one(i, name) for i, name in enumerate(profiles))
    (out / "measurement.json").write_text(json.dumps(m.to_dict(), indent=2, default=str))
    return m


class CheckGate:
    """Adaptive stopping's checks in one process: at most `slots` run at once, granted in the
    order they fell due, and a due check waits for its turn rather than being dropped.

    On a host loaded with K measurements a check's wall time is mostly waiting for a core, so
    a bounded wait that drops the check (as before) starved the checks exactly when many
    downloads ran: almost none settled, every download ran to its cap, and the load that
    starved them grew. A late check is still a valid one (the rule reads how much each trace
    holds, not the clock), so the queue only delays; each watcher has at most one check
    waiting, so it holds at most K."""

    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self._cv = threading.Condition()
        self._queue: deque[object] = deque()
        self._busy = 0
        self.granted = 0
        self.abandoned = 0
        self.waited_s = 0.0
        self.waited_max_s = 0.0
        # How long a granted check holds its slot (wall): CPU per check is tens of ms, so a long
        # hold says the checks themselves wait for a core, not just for a slot.
        self.held_s = 0.0
        self.held_max_s = 0.0
        self._granted_at = threading.local()

    def acquire(self, abandon: Callable[[], bool], poll_s: float = 1.0) -> bool:
        """Wait for a slot in turn; False (and out of the queue) once `abandon()` is true.

        A waiter sleeps until the gate changes or `wake()` is called (its downloads ended), and
        reads `abandon` every `poll_s` only as a safety net: K waiters polling at 10 Hz each
        (as before) were a share of the wake-ups that cost a loaded worker ~14 % of its CPU."""
        ticket = object()
        t0 = time.monotonic()
        with self._cv:
            self._queue.append(ticket)
            while not (self._busy < self.slots and self._queue[0] is ticket):
                if abandon():
                    self._queue.remove(ticket)
                    self.abandoned += 1
                    self._cv.notify_all()  # the head may have been this ticket
                    return False
                self._cv.wait(poll_s)
            self._queue.popleft()
            self._busy += 1
            waited = time.monotonic() - t0
            self.granted += 1
            self.waited_s += waited
            self.waited_max_s = max(self.waited_max_s, waited)
            self._cv.notify_all()  # the next in line may fit a free slot too
        self._granted_at.t = time.monotonic()
        return True

    def release(self) -> None:
        held = time.monotonic() - getattr(self._granted_at, "t", time.monotonic())
        with self._cv:
            self._busy -= 1
            self.held_s += held
            self.held_max_s = max(self.held_max_s, held)
            self._cv.notify_all()

    def wake(self) -> None:
        """Have every waiter read its `abandon` again now (a measurement's downloads ended)."""
        with self._cv:
            self._cv.notify_all()

    def stats(self) -> dict[str, Any]:
        with self._cv:
            return {
                "slots": self.slots,
                "waiting": len(self._queue),
                "granted": self.granted,
                "abandoned": self.abandoned,
                "waited_s_mean": round(self.waited_s / self.granted, 3) if self.granted else None,
                "waited_s_max": round(self.waited_max_s, 3),
                "held_s_mean": round(self.held_s / self.granted, 3) if self.granted else None,
                "held_s_max": round(self.held_max_s, 3),
            }


# One gate per process: K measurements in one worker share it. A slot per core: a check is a
# few tens of ms of interpreter work, and more at once than cores only contend for the lock.
CHECKS = CheckGate(os.cpu_count() or 1)


class _Watcher:
    """Adaptive stopping's loop, beside the running downloads: the growing pcaps become the
    sender-aligned traces the classifier reads, every `rule.every_s` seconds. A transport with a
    live reader (TCP) parses only what each capture gained since the last check; otherwise a
    snapshot of the whole file is parsed each time."""

    def __init__(
        self,
        url: str,
        profiles: Sequence[str],
        out: Path,
        transport: str,
        rule: StoppingRule,
        classify: Callable[[Sequence[Trace]], Verdict] | None,
        stop: StopSignal,
    ) -> None:
        tr = get_transport(transport)
        self.url, self.out, self.tr, self.rule, self.stop = url, out, tr, rule, stop
        self.profiles = [tr.adapt_profile(get_profile(p)) for p in profiles]
        self.readers: dict[str, Callable[[], Trace]] = {}
        if tr.live is not None:
            for p in self.profiles:
                self.readers[p.name] = tr.live(out / f"{p.name}.pcap", object_url=url, profile=p)
        self.classify = classify
        self.record: dict[str, Any] = {
            "rule": {
                k: getattr(rule, k)
                for k in ("every_s", "min_s", "stable", "min_p", "cap_rtts", "cap_min_s", "cap_max_s")
            },
            "settled": False,
            "stopped_at_s": None,
            "verdict": None,
            "checks": [],
        }
        self._done_s = 0.0  # the last grid point classified (trace seconds)

    def _classify(self, traces: Sequence[Trace]) -> Verdict:
        if self.classify is None:
            from ccscope.classifier import classify

            self.classify = classify
        return self.classify(traces)

    def _live(self, profile: Profile) -> Trace | None:
        """The download's sender-aligned trace from its capture so far; None before it has one.
        The pcap is flushed every 100 ms by the emulator: a record cut at the end is dropped by
        the reader, as after a crash."""
        reader = self.readers.get(profile.name)
        if reader is not None:
            try:
                return reader()
            except (OSError, CCScopeError):
                return None
        pcap = self.out / f"{profile.name}.pcap"
        snap = self.out / f"{profile.name}.live.pcap"
        try:
            snap.write_bytes(pcap.read_bytes())
            got = self.tr.flows(
                snap,
                fetch={},
                object_url=self.url,
                profile=profile,
                out_dir=self.out,
                stem=f"{profile.name}.live",
                link_stats=None,
            )
        except (OSError, CCScopeError):
            return None
        finally:
            snap.unlink(missing_ok=True)
        return got.sender

    def run(self, futures: Sequence[Any]) -> None:
        """Check until the rule settles (then set `stop`) or every download has ended."""
        history: list[Verdict] = []
        t0 = time.monotonic()
        every = self.rule.every_s
        due = t0
        # The downloads' end wakes the watcher (and its place in the gate's queue) at once, so
        # nothing polls: 10 Hz polls per watcher, per waiter and per shell cost the census
        # process ~14 % of its CPU at K = 32 and 64 (bench/scale, process_s).
        ended = threading.Event()

        def on_done(_: Any) -> None:
            if all(f.done() for f in futures):
                ended.set()
                CHECKS.wake()

        for f in futures:
            f.add_done_callback(on_done)
        while True:
            # The next check is due one interval after the last was due; one that overran its
            # interval (a loaded host) is not caught up: the next waits a full interval. Checks
            # back to back would each slow the others further, on every measurement at once.
            due = due + every if due + every > time.monotonic() else time.monotonic() + every
            if ended.wait(max(0.0, due - time.monotonic())):
                return  # the full traces decide from here
            # The traces hold less than the time since the start: a check that could not matter
            # even holding all of it is not made (rule.useful), nor its capture read.
            if not self.rule.useful(time.monotonic() - t0):
                continue
            # Process-wide, checks take turns (CheckGate): one waits, however long, until its
            # turn or the downloads' end; the next falls due one interval after it ran.
            waited = time.monotonic()
            if not CHECKS.acquire(ended.is_set):
                return
            self.record["waited_s"] = round(self.record.get("waited_s", 0.0) + time.monotonic() - waited, 3)
            try:
                self._check(history, t0, ended)
            finally:
                CHECKS.release()
            due = time.monotonic()
            if self.stop.is_set():
                return

    def _check(self, history: list[Verdict], t0: float, ended: threading.Event | None = None) -> None:
        """One check: classify the captures so far at the rule's grid points they reached since
        the last check; set `stop` once the rule has settled.

        The rule's checks fall on a grid of trace time (every_s, 2 every_s, ...), as
        `classifier.stopping.simulate` replays them, which is where `recall_adaptive` and the
        rule's error budget were measured. On a loaded host a check comes late (it waited its
        turn): it then classifies the grid points it missed, at most the last `stable` (all a
        stop can read), so one turn decides as the on-time checks would have, instead of a stop
        needing `stable` more turns while the downloads, and the load, run on."""
        traces = [self._live(p) for p in self.profiles]
        if any(t is None for t in traces):
            return  # a profile has no connection yet: nothing to read
        live = [t for t in traces if t is not None]
        held = min(t.duration for t in live)
        points = self._grid_points(held)
        if not points:
            return  # no grid point a stop could read was reached since the last check
        self.record["turns"] = self.record.get("turns", 0) + 1
        for g in points:
            if ended is not None and ended.is_set():
                return  # the full traces decide from here
            self._done_s = g
            try:
                v = self._classify([t.head(g) for t in live])
            except CCScopeError as e:
                history.clear()  # a check that could not be made breaks the run of equal ones
                self.record["checks"].append({"at_s": round(g, 2), "error": str(e)[:200]})
                return
            history.append(v)
            self.record["checks"].append(
                {
                    "at_s": round(g, 2),
                    "wall_s": round(time.monotonic() - t0, 2),
                    "turn": self.record["turns"],
                    "display": v.display,
                    "kind": v.kind,
                    "confidence": round(v.confidence, 3),
                }
            )
            if self.rule.settled(history, g):
                self.record.update(settled=True, stopped_at_s=round(g, 2), verdict=v.display)
                self.stop.set()
                return

    def _grid_points(self, held: float) -> list[float]:
        """The grid points in (last classified, held] a stop can read: useful ones, the last
        `stable` of them."""
        every = self.rule.every_s
        first = int(self._done_s / every + 1e-6) + 1
        last = int(held / every + 1e-6)
        pts = [round(k * every, 6) for k in range(first, last + 1)]
        return [g for g in pts if self.rule.useful(g)][-self.rule.stable :]
