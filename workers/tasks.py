"""The measurement pipeline as plain functions, shared by the Celery tasks and embedded mode.

`run_measurement` takes one queued measurement row to `classified` or `failed`. Every step is a
conditional write in the store (the state machine, the per-site lease), so a task that is
delivered twice, or re-run after its worker was killed, finishes the measurement exactly once:

* classified / failed: nothing to do (a redelivered task is a no-op);
* captured: the traces are stored, only classification is left (the worker died after capture);
* running: another delivery is measuring it right now -> retry later; if it has been silent
  (no heartbeat) for longer than `stale_after_seconds` its worker died -> requeue and run it;
* queued: take the site's lease, -> running, download, store traces, -> captured, classify.

Transient problems (site lease busy or too soon after the last visit, a download whose failure's
kind is in RETRIED_KINDS) raise `Transient`; the callers retry with backoff. Everything else, and
a refused connection on its CONNECTION_REFUSED_ATTEMPTS-th attempt, fails the row with a reason.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ccscope.classifier.stopping import StoppingRule
from ccscope.errors import CaptureError, CCScopeError
from ccscope.settings import settings
from ccscope.store.blobs import BlobError
from ccscope.store.core import Conflict, IllegalTransition, NotFound, Store, StoreError, aware
from ccscope.store.models import Campaign, Measurement, utcnow
from ccscope.transports import get_transport

log = logging.getLogger("ccscope.workers")
TRACE_MEDIA_TYPE = "application/json"
PCAP_MEDIA_TYPE = "application/vnd.tcpdump.pcap"

# A target that refuses connections has answered, if not on the first try (a restart, a full
# accept queue): this many attempts, then the measurement fails for good.
CONNECTION_REFUSED_ATTEMPTS = 3

# The failures worth another attempt, by kind (CCScopeError.kind, capture.fetch's error_kind),
# with how many attempts each gets (None: the caller's whole retry budget). Any other kind
# (target_refused, tls, protocol, redirects, capture, shell...) fails the measurement at once.
RETRIED_KINDS: dict[str, int | None] = {
    "connection_refused": CONNECTION_REFUSED_ATTEMPTS,
    "timeout": None,
    "unreachable": None,
    "network": None,  # reset, or closed before the response
    "dns_temporary": None,
    "lab_down": None,  # the lab is (re)starting
}


# What the QUIC client reports for a server that answers QUIC only partly (capture/quic).
_DEFINITIVE_QUIC = frozenset({"version_negotiation", "handshake_timeout", "no_h3", "tls", "refused", "h3"})


class Transient(CCScopeError):
    """Retry the task later (with backoff); the measurement row is left as it is. `kind` says
    why: "busy" (another delivery, the site lease) or a failed download's kind."""

    def __init__(self, message: str, kind: str = "busy") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class WorkerConfig:
    vantage: str
    profiles: tuple[str, ...] = ("A", "B")  # what a row with profile "default" downloads through
    lab: bool = False
    out_root: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "ccscope-work")
    timeout: float = 60.0
    max_bytes: int = 16 * 1024 * 1024
    # A running measurement beats (Store.heartbeat) every `heartbeat_seconds`, renewing its site
    # lease and its row; a dead worker's lease lapses `lease_seconds` after its last beat and
    # its row counts as dead after `stale_after_seconds` of silence, however long runs take.
    lease_seconds: float = 120.0
    stale_after_seconds: float = 120.0
    heartbeat_seconds: float = 20.0
    min_gap_seconds: float = 10.0
    keep_files: bool = False  # the traces are in the store; the scratch directory can go
    # Store each profile's pcap beside its trace (open data: the capture itself). Off by
    # default: a census of many sites would keep ~10x the bytes of the traces.
    keep_pcap: bool = False
    # Link options of an emulated access path around every download (lab vantage points: a
    # second "location" of the same lab is a different path to it). Empty on a real vantage.
    access: tuple[str, ...] = ()
    # Download a measurement's profiles at the same time, each in its own shell (the time to a
    # verdict is the slower profile's, not the sum); bench/scale checks they do not disturb
    # each other on the lab path.
    concurrent_profiles: bool = True
    # Adaptive stopping (classifier/stopping.py, the default rule): the profiles' downloads stop
    # once the verdict on their traces so far has settled, never before the rule's min_s.
    adaptive: bool = True

    @classmethod
    def from_env(cls, vantage: str, **overrides: object) -> WorkerConfig:
        """Worker processes (Celery) take their knobs from the environment (ccscope.settings)."""
        env = settings()
        cfg = cls(vantage=vantage)
        if env.worker_profiles:
            cfg = replace(cfg, profiles=tuple(env.worker_profiles.split(",")))
        for name, value in (
            ("timeout", env.worker_timeout),
            ("lease_seconds", env.worker_lease),
            ("stale_after_seconds", env.worker_stale_after),
            ("heartbeat_seconds", env.worker_heartbeat),
            ("min_gap_seconds", env.worker_min_gap),
            ("max_bytes", env.worker_max_bytes),
        ):
            if value is not None:
                cfg = replace(cfg, **{name: value})
        if env.worker_access:
            cfg = replace(cfg, access=tuple(shlex.split(env.worker_access)))
        if env.worker_dir:
            cfg = replace(cfg, out_root=env.worker_dir)
        if env.lab:
            cfg = replace(cfg, lab=True)
        if env.worker_keep_pcap:
            cfg = replace(cfg, keep_pcap=True)
        if env.worker_concurrent_profiles is not None:
            cfg = replace(cfg, concurrent_profiles=env.worker_concurrent_profiles)
        if env.worker_adaptive is not None:
            cfg = replace(cfg, adaptive=env.worker_adaptive)
        return replace(cfg, **overrides)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Outcome:
    measurement_id: int
    state: str  # the row's state afterwards
    noop: bool = False  # the row was already finished: nothing was done
    detail: str = ""


def _holder(measurement_id: int) -> str:
    # The lease belongs to the measurement, not the worker: the re-run of a measurement whose
    # worker died can then take back its own lease without waiting for it to expire.
    return f"measurement-{measurement_id}"


def _profiles_for(m: Measurement, cfg: WorkerConfig) -> tuple[str, ...]:
    if m.profile in ("", "default"):
        return cfg.profiles
    return tuple(p for p in m.profile.split("+") if p)


def _fail(store: Store, measurement_id: int, reason: str) -> Outcome:
    try:
        store.transition(measurement_id, "failed", reason)
    except IllegalTransition:
        # Someone else finished (or requeued) it meanwhile; report what the row says now.
        m = store.get_measurement(measurement_id)
        return Outcome(measurement_id, m.state, detail="lost a race while failing")
    return Outcome(measurement_id, "failed", detail=reason)


def _classify_stored(store: Store, measurement_id: int) -> Outcome:
    """captured -> classified from the traces in the store (not the scratch files)."""
    from ccscope.classifier import classify
    from ccscope.trace import Trace

    m = store.get_measurement(measurement_id)
    stored = [t for t in m.traces if t.media_type == TRACE_MEDIA_TYPE]
    if not stored:
        return _fail(store, measurement_id, "captured without traces")
    try:
        traces = [Trace.from_bytes(store.read_trace(t.sha256), f"trace {t.sha256[:12]}") for t in stored]
        verdict = classify(traces)
    except CCScopeError as e:
        return _fail(store, measurement_id, f"classification failed: {e}")
    # A concurrent delivery may have classified it first; record_verdict never duplicates.
    with contextlib.suppress(IllegalTransition):
        store.record_verdict(measurement_id, verdict)
    return Outcome(measurement_id, store.get_measurement(measurement_id).state, detail=verdict.display)


class NotOffered(CCScopeError):
    """The site does not offer this transport (a QUIC row for a site without HTTP/3)."""


def _find_url(store: Store, m: Measurement, cfg: WorkerConfig) -> str | None:
    if m.url:
        return m.url
    from ccscope.crawler.site import pick_object

    url = pick_object(store, m.site.domain, lab=cfg.lab).url
    if url is None or m.transport != "quic":
        return url
    # QUIC: the crawled object, where the site serves it over HTTP/3 (Alt-Svc, else one probe)
    from ccscope.crawler.site import quic_url_for_site

    offer = quic_url_for_site(store, m.site.domain, url, lab=cfg.lab)
    if offer.url is None:
        raise NotOffered(
            f"{m.site.domain} does not offer HTTP/3: {offer.how}"
            + (f" ({offer.detail})" if offer.detail else "")
        )
    return offer.url


def run_measurement(
    store: Store,
    measurement_id: int,
    cfg: WorkerConfig,
    *,
    measure_fn: Callable[..., object] | None = None,
) -> Outcome:
    """Take one measurement as far as it goes; raises Transient to be retried later.
    `measure_fn` replaces capture.measure.measure (tests only)."""
    try:
        m = store.get_measurement(measurement_id)
    except NotFound:
        return Outcome(measurement_id, "missing", noop=True, detail="no such measurement")
    if m.state in ("classified", "failed"):
        return Outcome(measurement_id, m.state, noop=True)
    if m.state == "captured":
        return _classify_stored(store, measurement_id)
    if m.state == "running":
        if not is_stale(m, cfg.stale_after_seconds):
            raise Transient(f"measurement {measurement_id} is running elsewhere")
        # Its worker died. Requeue this row only (store.requeue_stale would requeue every stale
        # row and leave their leases held); the conditional transition lets one delivery win.
        try:
            store.transition(measurement_id, "queued")
        except IllegalTransition:
            raise Transient(f"measurement {measurement_id} was taken up by another delivery") from None
        log.warning("measurement %s: its worker died mid-run; running it again", measurement_id)
        # The lease is the measurement's own (see _holder), so the dead run's lease is ours to free.
        store.release_site(m.site.domain, _holder(measurement_id))
        m = store.get_measurement(measurement_id)
    domain = m.site.domain
    if store.is_opted_out(domain):
        return _fail(store, measurement_id, f"{domain} has opted out of measurement")
    try:
        why = get_transport(m.transport).unavailable()
    except CCScopeError as e:
        why = str(e)
    if why:
        return _fail(store, measurement_id, f"transport {m.transport} is not measured by this worker: {why}")
    if not store.acquire_site(domain, _holder(measurement_id), cfg.lease_seconds, cfg.min_gap_seconds):
        raise Transient(f"{domain} is being measured or was measured too recently")
    try:
        try:
            store.transition(measurement_id, "running")
        except IllegalTransition:
            # Another delivery took it between our read and now: it owns the run.
            raise Transient(f"measurement {measurement_id} was taken by another delivery") from None
        # Traces a dead attempt stored before it could move the row to captured: one set only.
        store.drop_traces(measurement_id)
        # Beat often enough that neither the lease nor the staleness window can run out on a
        # live run, whatever the knobs say.
        every = min(cfg.heartbeat_seconds, cfg.lease_seconds / 4, cfg.stale_after_seconds / 4)
        # Longer than any live run: every profile to its timeout one after another, set-up,
        # trace storage and classification.
        longest = len(_profiles_for(m, cfg)) * (cfg.timeout + 30.0) + 120.0
        with store.keep_alive(measurement_id, _holder(measurement_id), cfg.lease_seconds, every, longest):
            return _measure_and_classify(store, m, cfg, measure_fn)
    finally:
        store.release_site(domain, _holder(measurement_id))


def give_up(store: Store, measurement_id: int, reason: str) -> Outcome:
    """The retries are spent: fail a row that is still queued, so it does not wait forever.
    A row another delivery is running (or has finished) is left to that delivery."""
    m = store.get_measurement(measurement_id)
    if m.state != "queued":
        return Outcome(measurement_id, m.state, noop=True, detail="left to the delivery that has it")
    return _fail(store, measurement_id, f"gave up after repeated transient failures: {reason}")


def is_stale(m: Measurement, stale_after_seconds: float) -> bool:
    """A `running` row silent (no heartbeat, or no start) for longer than `stale_after_seconds`:
    its worker died."""
    last = aware(m.heartbeat_at) or aware(m.started_at)
    return m.state == "running" and (last is None or (utcnow() - last).total_seconds() > stale_after_seconds)


def _measure_and_classify(
    store: Store, m: Measurement, cfg: WorkerConfig, measure_fn: Callable[..., object] | None
) -> Outcome:
    mid = m.id
    try:
        url = _find_url(store, m, cfg)
    except NotOffered as e:
        return _fail(store, mid, str(e))
    except CCScopeError as e:
        return _fail(store, mid, f"finding an object failed: {e}")
    if not url:
        return _fail(store, mid, f"{m.site.domain} offers no object worth downloading")
    if measure_fn is None:
        from ccscope.capture.measure import measure as measure_fn
    out = run_dir(cfg, mid)
    try:
        try:
            res = measure_fn(
                url,
                _profiles_for(m, cfg),
                out,
                lab=cfg.lab,
                timeout=cfg.timeout,
                max_bytes=cfg.max_bytes,
                transport=m.transport,
                **({"access": cfg.access} if cfg.access else {}),
                # The lab's per-profile ground truth is not stored with a measurement: skip it.
                **({"groundtruth": False} if cfg.lab else {}),
                **({"concurrent": True} if cfg.concurrent_profiles else {}),
                **({"stopping": StoppingRule()} if cfg.adaptive else {}),
            )
        except CCScopeError as e:
            return _after_error(store, mid, str(e), e.kind)
        runs = getattr(res, "runs", [])
        # A download cut short still leaves a usable (partial) trace; an HTTP error page does
        # not measure the server's congestion control, so it fails the measurement.
        refused = [r for r in runs if not 200 <= int(r.fetch.get("status") or 200) < 300]
        if refused:
            why = "; ".join(f"{r.profile}: HTTP {r.fetch.get('status')} from {url}" for r in refused)
            return _fail(store, mid, why)
        # A server that answers QUIC only partly (version negotiation, a Retry loop, no h3, a
        # handshake that never completes) will not answer better on a retry: fail the row now.
        definitive = [r for r in runs if (r.fetch or {}).get("error_kind") in _DEFINITIVE_QUIC]
        if definitive and len(definitive) == len(runs):
            r0 = definitive[0]
            return _fail(store, mid, f"QUIC {r0.fetch['error_kind']}: {r0.error}")
        # The sender-aligned trace: the alignment the classifier's model is trained on (the
        # capture-aligned one is what the bottleneck saw, kept in the pcap when asked for).
        files = [
            (r, r.sender_trace_file or r.trace_file) for r in runs if r.sender_trace_file or r.trace_file
        ]
        failed = [r for r in runs if r.error]
        if not files:
            why = "; ".join(f"{r.profile}: {r.error}" for r in failed) or "the download left no trace"
            return _after_error(store, mid, why, _kind_of([r.error_kind or "error" for r in failed]))
        try:
            for r, path in files:
                store.add_trace(mid, Path(path).read_bytes(), profile=r.profile)
            if cfg.keep_pcap:
                for r, _ in files:
                    pcap = Path(r.pcap_file) if getattr(r, "pcap_file", None) else None
                    if pcap is not None and pcap.exists():
                        store.add_trace(mid, pcap.read_bytes(), profile=r.profile, media_type=PCAP_MEDIA_TYPE)
        except (BlobError, OSError) as e:
            # The trace store is full or away (a disk, a bucket): the site is not to blame. The
            # row goes back to the queue, so the retries measure it again once traces fit.
            with contextlib.suppress(IllegalTransition):
                store.transition(mid, "queued")
            raise Transient(f"the trace store cannot take this measurement's traces: {e}") from None
    finally:
        if not cfg.keep_files:
            shutil.rmtree(out, ignore_errors=True)
        elif out.is_dir():
            # Kept on purpose: drop the owner from the name so no sweep takes it for a dead run's.
            with contextlib.suppress(OSError):
                out.rename(out.with_name(out.name.rsplit(".", 1)[0]))
    try:
        store.transition(mid, "captured")
    except IllegalTransition:
        # The row was requeued under us (we were taken for dead): the re-run owns it now.
        raise Transient(f"measurement {mid} was requeued while running") from None
    return _classify_stored(store, mid)


def _kind_of(kinds: Sequence[str]) -> str:
    """One kind for a measurement whose profiles all failed: a lasting failure of any profile
    (a 'tls' beside a 'timeout') makes the whole one lasting; else the most sparingly retried."""
    if not kinds:
        return CaptureError.kind  # nothing failed, yet no trace came out
    lasting = [k for k in kinds if k not in RETRIED_KINDS]
    if lasting:
        return lasting[0]
    return min(kinds, key=lambda k: RETRIED_KINDS[k] or 1_000_000)


def _after_error(store: Store, mid: int, message: str, kind: str) -> Outcome:
    """Fail the row, or give it back to be retried, by the failure's kind and the row's
    attempts so far (counted by the store across workers and redeliveries)."""
    if kind not in RETRIED_KINDS:
        return _fail(store, mid, message)
    limit = RETRIED_KINDS[kind]
    attempts = store.get_measurement(mid).attempts
    if limit is not None and attempts >= limit:
        return _fail(store, mid, f"{message} ({kind.replace('_', ' ')} on {attempts} attempts)")
    # Give the row back so the retry can take it again from the top.
    with contextlib.suppress(IllegalTransition):
        store.transition(mid, "queued")
    raise Transient(message, kind)


# ---- scratch ----------------------------------------------------------------------------------
#
# A run downloads into out_root/<vantage>/m<id>-<time>.<owner>/ (pcaps, stats, traces) and removes
# it when it ends. A run killed with its worker cannot, so a worker starting up sweeps the run
# directories whose owner process is gone. The owner is named by pid, the process's start time
# and the boot, so a reused pid does not pass for it; other workers sharing out_root keep theirs.

_RUN_DIR = re.compile(r"^m\d+-\d{8}T\d{12}\.(?P<pid>\d+)-(?P<start>\d+)-(?P<boot>[0-9a-f]{8})$")


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8]
    except OSError:
        return "0" * 8


def _start_ticks(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot), or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def run_dir(cfg: WorkerConfig, measurement_id: int) -> Path:
    """The scratch directory of one run of a measurement, owned by this process."""
    pid = os.getpid()
    owner = f"{pid}-{_start_ticks(pid) or 0}-{_boot_id()}"
    return cfg.out_root / cfg.vantage / f"m{measurement_id}-{utcnow():%Y%m%dT%H%M%S%f}.{owner}"


def sweep_scratch(out_root: Path) -> list[Path]:
    """Remove the run directories under `out_root` whose owner process is gone; those of live
    processes, and anything not named as a run directory, stay. Returns what was removed."""
    swept: list[Path] = []
    boot = _boot_id()
    try:
        vantages = [d for d in out_root.iterdir() if d.is_dir() and not d.is_symlink()]
    except OSError:
        return swept
    for v in vantages:
        try:
            runs = list(v.iterdir())
        except OSError:
            continue
        for d in runs:
            m = _RUN_DIR.match(d.name)
            if m is None or d.is_symlink() or not d.is_dir():
                continue
            if m["boot"] == boot and _start_ticks(int(m["pid"])) == int(m["start"]):
                continue  # a live run
            shutil.rmtree(d, ignore_errors=True)
            swept.append(d)
    if swept:
        log.warning("removed the scratch of %d killed run(s) under %s", len(swept), out_root)
    return swept


# ---- campaigns --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    measurement_id: int
    vantage: str
    created: bool
    state: str


def plan_campaign(store: Store, campaign_id: int, slot: str) -> list[Planned]:
    """Queue the campaign's measurements for one slot; running it again for the same slot
    returns the same rows (the idempotency key includes the slot). Opted-out sites are skipped."""
    c: Campaign = store.get_campaign(campaign_id)
    domains = store.top_sites(c.site_list.id, c.top_n)
    short = shortfall(c.top_n, len(domains), c.site_list.name)
    if short:
        log.warning("campaign %s: %s", campaign_id, short)
    out: list[Planned] = []
    for v in c.vantages:
        for domain in domains:
            for transport in c.transports:
                for profile in c.profiles:
                    try:
                        m, created = store.enqueue_measurement(
                            domain, v.name, transport, slot, campaign_id=c.id, profile=profile
                        )
                    except Conflict:  # opted out since the list was imported
                        continue
                    out.append(Planned(m.id, v.name, created, m.state))
    return out


def shortfall(top_n: int, available: int, list_name: str) -> str | None:
    """What a campaign larger than its list gets instead, said once (None: nothing short)."""
    if available >= top_n:
        return None
    return f"asks for the top {top_n} sites of list {list_name!r}, which has {available}: planning those"


def cron_slot(schedule: str, now: dt.datetime | None = None) -> str:
    """The most recent minute (UTC, ISO) at or before `now` that `schedule` fires on: the slot a
    beat tick belongs to, so a late or repeated tick still names the same slot. A schedule that
    is not valid cron (stored before the API checked it) raises StoreError with the reason."""
    from celery.schedules import crontab

    from ccscope.store.core import validate_cron

    minute, hour, dom, month, dow = validate_cron(schedule).split()
    cr = crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow)
    t = (now or utcnow()).astimezone(dt.UTC).replace(second=0, microsecond=0)
    day = t.replace(hour=0, minute=0)
    for back in range(0, 400):
        d = day - dt.timedelta(days=back)
        # crontab days of the week count from Sunday = 0; isoweekday has Sunday = 7.
        if d.day not in cr.day_of_month or d.month not in cr.month_of_year:
            continue
        if d.isoweekday() % 7 not in cr.day_of_week:
            continue
        for h in sorted(cr.hour, reverse=True):
            for mi in sorted(cr.minute, reverse=True):
                cand = d.replace(hour=h, minute=mi)
                if cand <= t:
                    return cand.isoformat()
    return t.isoformat()


def queued_ids(planned: Sequence[Planned]) -> dict[str, list[int]]:
    """Rows still to run, per vantage point (re-dispatching a queued row is harmless)."""
    out: dict[str, list[int]] = {}
    for p in planned:
        if p.state in ("queued", "running", "captured"):
            out.setdefault(p.vantage, []).append(p.measurement_id)
    return out


__all__ = [
    "CONNECTION_REFUSED_ATTEMPTS",
    "RETRIED_KINDS",
    "Outcome",
    "Planned",
    "StoreError",
    "Transient",
    "WorkerConfig",
    "cron_slot",
    "give_up",
    "is_stale",
    "plan_campaign",
    "queued_ids",
    "run_dir",
    "run_measurement",
    "shortfall",
    "sweep_scratch",
]
