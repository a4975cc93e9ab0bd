"""Measure lab CCAs under draws from the condition space (classifier/conditions.py).

`collect(jobs, root)` takes (draw, cca, run) jobs, groups them by what a lab bring-up fixes
(initcwnd, GSO, MSS), brings a lab up once per group (on one of the given lab instances, several
groups at once when several instances are given) and runs K jobs at a time. One job:

    ccscope-link <Internet path + shared bottleneck> -- python -m ccscope.classifier.collect _job
        (inside: cross-traffic clients, then for each of the draw's two profiles)
        └─ upstream bottleneck └─ access shells └─ profile shell + capture └─ download

and leaves in `<root>/<draw id>/<cca>/run<r>/`: `A.trace.json` / `A.sender.trace.json` (capture-
and sender-aligned, as `ccscope measure`), `A.truth.trace.json.gz` (the server's own pipe from
TCP_INFO, the classifier's physical-limit oracle), the same for B, `A.pcap` with `--pcap`,
`job.json` (what was asked) and `result.json` (what happened). Every job appends one line to
`<root>/index.jsonl`: draw, cca, label, split, files, status (ok | partial | failed), the reason
of anything not ok, and which downloads hit their time cap. A failed or partial job is reported
on stderr and in the index, never dropped; `collected.load_index()` returns the last line per job
(classifier/collected.py reads a collection: its index, traces and ground truth).
Resumable: a job whose `result.json` says ok or partial is not measured again (failed ones are,
unless retry_failed is off), and a partial job that lacked only the server's record gets it
from records written since. One collection at a time per root and per lab instance: a second
one is refused (`CollectionBusy`, naming the holder's pid).

A QUIC job (its cca a lab QUIC class, `stack:cca`, e.g. `quiche:cubic`) is the same draw
measured over HTTP/3 (`measure_profile(..., transport="quic")`) in packets (quic_adaptation:
MTU 1280, rates and the object scaled by the packet-size ratio); all QUIC jobs share one lab
bring-up with the QUIC servers (`ccscope lab up --quic`). Its truth trace comes from the
server's qlog in the TCP truth's shape (lab/quic/groundtruth.py `truth_trace`), its directory
is `<draw id>/<stack>-<cca>/run<r>/` and its index record says `transport: "quic"` with the
class as its label.

`python -m ccscope.classifier.collect` / `ccscope collect` is the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ccscope.classifier.collected import (
    NO_TRUTH,
    fill_missing_truth,
    save_slot_truth,
    truth_run_id,
)
from ccscope.classifier.conditions import (
    GROUPS,
    SPACES,
    SPLITS,
    ConditionError,
    Draw,
    DrawJob,
    draws,
    is_quic_label,
    plan_jobs,
    plan_quic_jobs,
)
from ccscope.errors import CCScopeError
from ccscope.lab.lease import holder_label, lease_path, read_holder, stamp_holder
from ccscope.profile import Profile, first_rate_bps, kbit_spec, quic_profile

DEFAULT_ROOT = Path("/var/tmp/ccscope-draws")
DEFAULT_INSTANCES = (30,)
DEFAULT_STATE_PREFIX = "/run/ccscope/lab-draws-"
WARMUP_S = 3.0  # elastic cross traffic runs this long before the first download
JOB_OVERHEAD_S = 6.0  # shells up and down, handshakes, ground truth written (measured)
LAB_UP_S = 6.0
# Seconds each shell of a download gets to come up and go down beyond the download's own cap:
# on a loaded 2-core host a nested shell's set-up (ip, nft) has taken over 10 s.
SHELL_SLACK_S = 20.0
TRUTH_WAIT_S = 30.0  # for a slot's server record once the downloads are over
TRUTH_WAIT_CAPPED_S = 240.0  # ... after a capped download (see _inner_job)
# bench/collect on this 2-core VM: collect's own estimate was 0.44-0.50 of the measured wall time
# (K = 8, 16, 32; other sessions' campaigns running beside it), so the estimate is scaled by 2.1.
ESTIMATE_CALIBRATION = 2.1
# Mbit/s of cross traffic that cost as much host CPU as one more concurrent job (job_cost)
CROSS_MBIT_PER_JOB = 6.0


def job_dir(root: Path, job: DrawJob) -> Path:
    return root / job.draw.id / job.cca.replace(":", "-") / f"run{job.run}"


# --- QUIC jobs ------------------------------------------------------------------------------
# A QUIC job (cca = a lab QUIC class, `stack:cca`) measures the same draw in packets: QUIC sends
# ~1228-byte datagrams where a drawn profile may have 100-byte packets, so (as
# ccscope.profile.quic_profile does for A/B) every rate the measurement's own packets meet is
# multiplied by the packet-size ratio and the object grows by it too, keeping delays, BDPs in
# packets, buffers in BDP, download lengths in round trips and every bottleneck's rate relative
# to the profile's. Only the shared bottleneck, which also carries cross traffic, stops at the
# space's top rate: above it the host's CPU, not the draw, would decide (and at 100 Mbit/s the
# shared link stays 4x the fastest QUIC profile, so it binds as rarely as for TCP).
QUIC_SHARE_MAX_MBIT = 100.0
QUIC_MAX_OBJECT = 1 << 30  # the lab QUIC servers' largest /obj/<bytes>
# Seconds a QUIC download's traces take beyond TCP's after the transfer: its capture, the client's
# qlog and the server's qlog are read in Python (~150k packets, ~100 MB of qlog at the time cap)
QUIC_PROCESS_S = 90.0


@dataclass(frozen=True)
class QuicAdaptation:
    scale: float  # QUIC profile rate / the draw's profile rate (1 where the MTU already fits)
    profiles: tuple[Profile, Profile]
    object_bytes: int
    share_rate_mbit: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "scale": round(self.scale, 4),
            "profiles": [p.name for p in self.profiles],
            "object_bytes": self.object_bytes,
            "share_rate_mbit": self.share_rate_mbit,
        }


def quic_adaptation(draw: Draw) -> QuicAdaptation:
    a, b = draw.profiles()
    qa, qb = quic_profile(a), quic_profile(b)
    tcp_bps, q_bps = first_rate_bps(a.down.rate), first_rate_bps(qa.down.rate)
    scale = q_bps / tcp_bps if tcp_bps and q_bps else 1.0
    r = draw.sharing.rate_mbit
    return QuicAdaptation(
        scale=scale,
        profiles=(qa, qb),
        object_bytes=min(QUIC_MAX_OBJECT, int(round(draw.server.object_bytes * scale, -3))),
        share_rate_mbit=None if r is None else float(f"{min(QUIC_SHARE_MAX_MBIT, max(r, r * scale)):.4g}"),
    )


def _scaled_link(p: Profile, k: float) -> Profile:
    """A shell's rate and byte-sized buffer times k (both directions)."""

    def d(x: Any) -> Any:
        bps = first_rate_bps(x.rate)
        if bps is None:
            return x
        buf = x.buffer
        if buf.endswith("B") and buf[:-1].isdigit():
            buf = f"{max(1500, round(int(buf[:-1]) * k))}B"
        return replace(x, rate=kbit_spec(bps * k / 1e3), buffer=buf)

    return replace(p, down=d(p.down), up=d(p.up))


def measured_layers(job: DrawJob) -> list[Profile]:
    """The shells between the Internet path and the profile shell, as this job meets them."""
    if job.transport != "quic":
        return job.draw.layers()
    k = quic_adaptation(job.draw).scale
    return [_scaled_link(p, k) for p in job.draw.layers()]


def measured_internet_link(job: DrawJob) -> Profile:
    if job.transport != "quic":
        return job.draw.internet_link()
    sh = replace(job.draw.sharing, rate_mbit=quic_adaptation(job.draw).share_rate_mbit)
    return replace(job.draw, sharing=sh).internet_link()


def quic_labels(names: Sequence[str]) -> list[str]:
    """The lab's own labels of QUIC classes (quiche:bbr2_gcongestion -> quiche:bbr2); a name the
    lab has no server for is refused (ConditionError)."""
    from ccscope.lab.quic.registry import quic_server

    try:
        return list(dict.fromkeys(quic_server(n).label for n in names))
    except KeyError as e:
        raise ConditionError(str(e.args[0])) from None


def check_quic_labels(jobs: Sequence[DrawJob]) -> None:
    """Refuse, before anything runs, a QUIC class not in the lab's own spelling (its records
    and directories are named by it)."""
    names = sorted({j.cca for j in jobs if j.transport == "quic"})
    bad = [n for n in names if quic_labels([n]) != [n]]
    if bad:
        raise ConditionError(f"QUIC class(es) {', '.join(bad)} not in the lab's spelling (stack:cca)")


def group_key(job: DrawJob) -> tuple[Any, ...]:
    """What one lab bring-up fixes for a job: the TCP server settings, or one QUIC lab (its
    servers take none of them)."""
    return ("quic",) if job.transport == "quic" else job.draw.server.key()


def object_url(job: DrawJob) -> str:
    """The download of a job: the lab server over HTTPS or nginx over HTTP, the draw's object
    size, and the application-limited rate as a query (bytes/s, after N bytes); for a QUIC job
    its lab QUIC server over HTTP/3 (no rate cap: the QUIC servers take none)."""
    if job.transport == "quic":
        from ccscope.lab.quic.registry import quic_server

        host = quic_server(job.cca).hostname
        return f"https://{host}/obj/{quic_adaptation(job.draw).object_bytes}"
    sv = job.draw.server
    base = (
        f"http://{job.cca}.lab.test:8080/obj/{sv.object_bytes}"
        if sv.program == "nginx"
        else f"https://{job.cca}.lab.test/obj/{sv.object_bytes}"
    )
    if sv.app_limit is None:
        return base
    rate = max(1, int(sv.app_limit * job.draw.profile_rate_bps / 8))
    return f"{base}?rate={rate}&after={int(sv.app_limit_after * sv.object_bytes)}"


def _seed(job: DrawJob, what: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{job.key}/{what}".encode()).digest()[:4], "big")


def job_cost(draw: Draw, budget: float, *, quic: bool = False) -> float:
    """How much of the concurrency budget a job takes. Every packet costs CPU in each userspace
    shell it crosses; a measurement moves at most a few hundred packets a second, cross traffic
    on a shared bottleneck of R Mbit/s ~83·R (1500-byte packets) through two shells. On this
    2-core VM eight jobs with ~10 Mbit/s of cross traffic each starved everything (load 29), so
    a job with cross traffic counts as 1 + R/CROSS_MBIT_PER_JOB jobs (100 Mbit/s: nearly alone).
    A QUIC job's R is its scaled shared rate (quic_adaptation)."""
    c = 1.0
    rate = quic_adaptation(draw).share_rate_mbit if quic else draw.sharing.rate_mbit
    if draw.sharing.has_cross_traffic and rate:
        c += rate / CROSS_MBIT_PER_JOB
    return min(c, float(budget))


def estimate_s(jobs: Sequence[DrawJob], concurrency: int) -> float:
    """Wall time of a collection: each job's two expected downloads plus set-up, weighted by its
    share of the concurrency budget, plus a lab bring-up per server group."""
    work = sum(
        (
            j.draw.expected_duration_s("A")
            + j.draw.expected_duration_s("B")
            + JOB_OVERHEAD_S
            + (WARMUP_S if j.draw.sharing.flows else 0.0)
        )
        * job_cost(j.draw, concurrency, quic=j.transport == "quic")
        for j in jobs
    )
    groups = len({group_key(j) for j in jobs})
    return ESTIMATE_CALIBRATION * (work / max(1, concurrency) + groups * LAB_UP_S)


# --- one job, outside and inside the Internet-path shell -----------------------------------


def run_job(
    job: DrawJob, root: Path, lab_dir: Path, cross: dict[str, Any] | None, *, keep_pcap: bool
) -> dict[str, Any]:
    """Measure one job; returns its index record (never raises for a failed measurement)."""
    from ccscope.capture.shell import link_argv

    out = job_dir(root, job)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").unlink(missing_ok=True)
    spec = {
        "draw": job.draw.to_dict(),
        "cca": job.cca,
        "run": job.run,
        "key": job.key,
        "url": object_url(job),
        "cross": cross,
        "keep_pcap": keep_pcap,
    }
    if job.transport == "quic":
        spec["quic"] = quic_adaptation(job.draw).to_dict()
    (out / "job.json").write_text(json.dumps(spec, indent=1))
    inet = measured_internet_link(job)
    argv = link_argv(
        [*inet.link_args(), "--seed", str(_seed(job, "internet")),
         "--stats", str(out / "internet.stats.json"), "--quiet"],
        [sys.executable, "-m", "ccscope.classifier.collect", "_job", str(out / "job.json")],
        keep_root=True,  # it nests more shells
    )  # fmt: skip
    shells = 1 + len(job.draw.layers())
    limit = (
        job.draw.duration_cap_s("A")
        + job.draw.duration_cap_s("B")
        + WARMUP_S
        + 60.0
        + 2 * SHELL_SLACK_S * shells
        + TRUTH_WAIT_CAPPED_S
    )
    if job.transport == "quic":
        limit += 2 * QUIC_PROCESS_S
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "CCSCOPE_LAB_DIR": str(lab_dir)})  # fmt: skip
    try:
        _, err = proc.communicate(timeout=limit)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        # SIGTERM first: the emulator forwards it and tears its namespace down
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        rc, err = None, f"the job ran over its {limit:.0f} s limit"
    err = (err or "").strip()[-600:]
    try:
        res = json.loads((out / "result.json").read_text())
    except (OSError, ValueError):
        res = {"status": "failed", "reason": f"no result (exit {rc}): {err or 'no output'}", "slots": {}}
    if not keep_pcap:  # a job cut short leaves its capture behind
        for f in out.glob("*.pcap"):
            f.unlink(missing_ok=True)
    res["wall_s"] = round(time.monotonic() - t0, 1)
    # The emulators' timing: how late the worst shell of the job released its packets (p99). A
    # host too busy for its K shows here first; filter on it (samples(max_lateness_us=...)).
    late = [_lateness_p99(out / "internet.stats.json")]
    late += [s.get("lateness_p99_us") for s in res.get("slots", {}).values()]
    known = [x for x in late if x is not None]
    res["lateness_p99_us"] = max(known) if known else None
    return _record(job, res)


def _lateness_p99(stats: Path) -> float | None:
    """The larger direction's p99 release lateness (us) from a ccscope-link stats file."""
    try:
        doc = json.loads(stats.read_text())
    except (OSError, ValueError):
        return None
    vals = [((doc.get(d) or {}).get("lateness_us") or {}).get("p99") for d in ("down", "up")]
    known = [float(v) for v in vals if v is not None]
    return max(known) if known else None


def _record(job: DrawJob, res: dict[str, Any]) -> dict[str, Any]:
    from ccscope.classifier.dataset import VARIANTS, label_of

    if job.transport == "quic":
        return {
            "key": job.key,
            "draw_id": job.draw.id,
            "draw": job.draw.to_dict(),
            "cca": job.cca,
            "label": job.cca,  # the stack's own class: a stack's CUBIC is not the kernel's
            "transport": "quic",
            "quic": quic_adaptation(job.draw).to_dict(),  # the draw as measured, in packets
            "is_variant": False,
            "split": job.draw.split,
            "space": job.draw.space,
            "fixed": list(job.draw.fixed),
            "run": job.run,
            "time": time.time(),
            **res,
        }
    return {
        "key": job.key,
        "draw_id": job.draw.id,
        "draw": job.draw.to_dict(),
        "cca": job.cca,
        "label": label_of(job.cca),
        "is_variant": job.cca in VARIANTS,
        "split": job.draw.split,
        "space": job.draw.space,
        "fixed": list(job.draw.fixed),
        "run": job.run,
        "time": time.time(),
        **res,
    }


def _inner_job(spec_file: Path) -> int:
    """Inside the Internet-path shell: cross traffic, then the draw's two profiles (for a QUIC
    job, as quic_adaptation adapts them)."""
    from ccscope.capture.measure import measure_profile
    from ccscope.lab.crosstraffic import CrossTraffic, FlowSpec
    from ccscope.lab.groundtruth import find_record

    spec = json.loads(spec_file.read_text())
    out = spec_file.parent
    draw = Draw.from_dict(spec["draw"])
    job = DrawJob(draw, spec["cca"], int(spec["run"]))
    url, keep_pcap = spec["url"], bool(spec["keep_pcap"])
    result: dict[str, Any] = {"status": "ok", "reason": None, "url": url, "slots": {}}
    xt = None
    sh = draw.sharing
    quic = quic_adaptation(draw) if job.transport == "quic" else None
    share_mbit = quic.share_rate_mbit if quic is not None else sh.rate_mbit
    if sh.has_cross_traffic:
        cross = spec.get("cross")
        if not cross:
            result.update(status="failed", reason="the draw has cross traffic but the lab runs no sources")
            (out / "result.json").write_text(json.dumps(result, indent=1))
            return 1
        xt = CrossTraffic(
            addr=cross["addr"],
            tcp_ports={k: int(v) for k, v in cross["tcp_ports"].items()},
            udp_port=int(cross["udp_port"]),
            udp_kbit=(share_mbit or 0.0) * 1000.0 * sh.udp_share,
            flows=[FlowSpec(f.cca, f.on_mean_s, f.off_mean_s) for f in sh.flows],
            seed=_seed(job, "cross"),
        )
        xt.start()
        time.sleep(WARMUP_S if sh.flows else 0.5)
    problems: list[str] = []
    pending: list[tuple[str, str, str, bool]] = []  # slots whose server record is still to find
    try:
        layer_opts = [[*p.link_args(), "--seed", str(_seed(job, p.name))] for p in measured_layers(job)]
        size = quic.object_bytes if quic is not None else draw.server.object_bytes
        run_id = job.key.replace("/", "-")
        profiles = quic.profiles if quic is not None else draw.profiles()
        # A QUIC client fetches a short object again until the transfer is long enough to
        # classify (capture/transports/quic.py): the time cap bounds those repeats, not the size.
        max_bytes = size + (1 << 20) if quic is None else size + (1 << 30)
        for slot, prof in zip(("A", "B"), profiles, strict=True):
            cap = draw.duration_cap_s(slot)
            s: dict[str, Any] = {"profile": prof.name, "cap_s": round(cap, 1)}
            result["slots"][slot] = s
            try:
                r = measure_profile(url, prof, out, run_id=run_id, lab=True, timeout=cap,
                                    max_bytes=max_bytes, seed=_seed(job, slot), layers=layer_opts,
                                    stem=slot, keep_pcap=keep_pcap,
                                    setup_slack=SHELL_SLACK_S * (1 + len(layer_opts)),
                                    transport=job.transport)  # fmt: skip
            except CCScopeError as e:
                s["error"] = str(e)
                problems.append(f"{slot}: {e}")
                continue
            got = int(r.fetch.get("bytes") or 0)
            capped = (
                bool(r.fetch.get("truncated"))
                and got < size
                and float(r.fetch.get("seconds") or 0) >= cap - 1
            )
            s.update({
                "ok": r.ok, "partial": r.partial, "capped": capped, "error": r.error,
                "bytes": got, "seconds": r.fetch.get("seconds"), "points": r.points,
                "retransmits": r.retransmits, "internet_rtt_ms": r.internet_rtt_ms,
                "trace": r.trace_file, "sender_trace": r.sender_trace_file, "pcap": r.pcap_file,
                "bif_error": r.groundtruth,
            })  # fmt: skip
            s["lateness_p99_us"] = _lateness_p99(out / f"{slot}.stats.json")
            # Beside the lateness, the hypervisor's steal tells a frozen vCPU from an emulator
            # that fell behind (capture/host.py); measure_profile has read it already.
            s["host_steal_s"] = (r.timing or {}).get("host_steal_s")
            if r.sender_trace_file is None:
                problems.append(f"{slot}: no trace ({r.error})")
                continue
            if r.partial and not capped:
                problems.append(f"{slot}: partial download ({r.error or 'cut short'})")
            if quic is not None:
                why = _quic_truth(truth_run_id(job.key, prof.name), r, prof, out, slot, s, keep_raw=keep_pcap)
                if why:
                    problems.append(f"{slot}: {why}")
                continue
            pending.append((slot, truth_run_id(job.key, prof.name), r.sender_trace_file, capped))
    finally:
        if xt is not None:
            result["cross_traffic"] = xt.stop()
    # The server writes its record once the connection is over. After a capped download
    # that takes minutes: the client's shell is gone, and the server's kernel retransmits
    # into it until it gives up (35-170 s after the cap, measured on 16 such slots). So
    # the records are looked up after both downloads, a capped slot's for longer.
    for slot, rid, sender_file, capped in pending:
        rec = find_record(run_id=rid, wait_s=TRUTH_WAIT_CAPPED_S if capped else TRUTH_WAIT_S)
        if rec is None:
            problems.append(f"{slot}: {NO_TRUTH}")
            continue
        try:
            save_slot_truth(rec, sender_file, slot, result["slots"][slot])
        except (CCScopeError, OSError) as e:
            problems.append(f"{slot}: ground truth unreadable: {e}")
    if problems:
        no_trace = (
            any(not s.get("sender_trace") for s in result["slots"].values()) or len(result["slots"]) < 2
        )
        result["status"] = "failed" if no_trace else "partial"
        result["reason"] = "; ".join(problems)
    (out / "result.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


def _quic_truth(
    run_id: str, r: Any, prof: Profile, out: Path, slot: str, s: dict[str, Any], *, keep_raw: bool
) -> str | None:
    """Write a QUIC download's ground truth (the server's qlog) beside its traces; the problem
    if there is none. `r` is measure_profile's run: its `groundtruth`, the estimate scored
    against the same qlog, when the record was there in time (if not, it is scored here once the
    record is). Without `keep_raw` the server's and the client's qlogs (~100 MB on a long
    download) go once the truth trace holds what they said."""
    from ccscope.lab.quic.groundtruth import find_run, score_quic_run, truth_trace
    from ccscope.trace import Trace

    scored: dict[str, Any] | None = r.groundtruth
    rec: dict[str, Any] | None = None
    if scored and scored.get("qlog"):
        rec = {"qlog": scored["qlog"], "label": scored.get("cca"), "stack": scored.get("stack")}
        rec["run_id"] = run_id
    else:  # the server writes its record and flushes the qlog once the connection is over
        rec = find_run(run_id, wait_s=30.0)
    if rec is None:
        return "no ground truth from the server (no qlog record)"
    try:
        sender = Trace.load(r.sender_trace_file)
        truth = truth_trace(rec, like=sender)
        s["truth_trace"] = str(truth.save(out / f"{slot}.truth.trace.json.gz"))
        s["truth_cca"] = rec.get("label")
        if not scored and r.trace_file:
            s["bif_error"] = score_quic_run(Trace.load(r.trace_file), sender, prof, run_id)
    except (CCScopeError, OSError, KeyError, ValueError) as e:
        return f"ground truth unreadable: {e}"  # the qlogs stay for a look
    if not keep_raw:
        Path(rec["qlog"]).unlink(missing_ok=True)
        (out / f"{slot}.client.sqlog").unlink(missing_ok=True)
    return None


# --- the collection -----------------------------------------------------------------------


def _done(job: DrawJob, root: Path, retry_failed: bool) -> bool:
    try:
        st = json.loads((job_dir(root, job) / "result.json").read_text()).get("status")
    except (OSError, ValueError):
        return False
    return st in ("ok", "partial") or (st == "failed" and not retry_failed)


@dataclass
class Summary:
    jobs: int = 0
    skipped: int = 0
    ok: int = 0
    partial: int = 0
    failed: int = 0
    capped_downloads: int = 0
    wall_s: float = 0.0
    estimate_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class CollectionBusy(CCScopeError):
    """Another `ccscope collect` holds the collection or a lab instance this one needs."""


@contextlib.contextmanager
def exclusive(locks: Sequence[Path]) -> Iterator[None]:
    """Hold each lock file (flock, with the holder's pid in it) while the body runs, or raise
    CollectionBusy naming the holder. Two collectors on one root overwrite each other's job
    directories, and two on one lab instance take its lab down under each other's downloads;
    both happened once, silently, and 71 measurements had to be thrown away."""
    fds: list[int] = []
    try:
        for p in locks:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o600)
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CollectionBusy(
                    f"{p} is held by a running collection ({holder_label(read_holder(fd))}): "
                    "stop it, or give this one another --root and --instances"
                ) from None
            stamp_holder(fd)
        yield
    finally:
        for fd in fds:
            os.close(fd)


def collection_locks(root: Path, instances: Sequence[int], state_prefix: str) -> list[Path]:
    """The collection's own lock and the lease of every lab instance it brings up: while held,
    `ccscope lab up`/`down` on those labs from another terminal is refused (lab.LabLeased)."""
    return [root / ".collect.lock", *(lease_path(f"{state_prefix}{i}") for i in sorted(set(instances)))]


def collect(
    jobs: Sequence[DrawJob],
    root: Path = DEFAULT_ROOT,
    *,
    concurrency: int = 8,
    instances: Sequence[int] = DEFAULT_INSTANCES,
    state_prefix: str = DEFAULT_STATE_PREFIX,
    keep_pcap: bool = False,
    retry_failed: bool = True,
    progress: bool | None = None,
) -> Summary:
    """Measure every job not already done; returns counts. Needs root and the built lab. Refuses
    (CollectionBusy) while another collection holds `root` or one of `instances`."""
    check_quic_labels(jobs)
    root.mkdir(parents=True, exist_ok=True)
    with exclusive(collection_locks(root, instances, state_prefix)):
        return _collect(jobs, root, concurrency, instances, state_prefix, keep_pcap, retry_failed, progress)


def _collect(
    jobs: Sequence[DrawJob],
    root: Path,
    concurrency: int,
    instances: Sequence[int],
    state_prefix: str,
    keep_pcap: bool,
    retry_failed: bool,
    progress: bool | None,
) -> Summary:
    from ccscope.classifier.dataset import _ensure_ccas
    from ccscope.lab import nginx
    from ccscope.lab.lab import Lab, LabParams

    index = root / "index.jsonl"
    mended = fill_missing_truth(root, [Path(f"{state_prefix}{i}") / "groundtruth" for i in instances])
    if mended:
        print(f"collect: {len(mended)} partial jobs now have the server's record", file=sys.stderr)
    todo = [j for j in jobs if not _done(j, root, retry_failed)]
    summ = Summary(
        jobs=len(jobs), skipped=len(jobs) - len(todo), estimate_s=round(estimate_s(todo, concurrency))
    )
    if not todo:
        return summ
    groups: dict[tuple[Any, ...], list[DrawJob]] = defaultdict(list)
    for j in todo:
        groups[group_key(j)].append(j)
    print(
        f"collect: {len(todo)} jobs ({summ.skipped} already done) in {len(groups)} server groups, "
        f"{concurrency} at a time on lab instance(s) {','.join(map(str, instances))}; "
        f"estimated {summ.estimate_s / 3600:.1f} h",
        file=sys.stderr,
    )
    tcp = [j for j in todo if j.transport == "tcp"]
    _ensure_ccas(sorted({j.cca for j in tcp} | {f.cca for j in todo for f in j.draw.sharing.flows}))
    sizes = {j.draw.server.object_bytes for j in tcp if j.draw.server.program == "nginx"}
    if sizes:
        nginx.ensure_objects(sizes)
    pool = ThreadPoolExecutor(max(1, concurrency))
    interrupted = threading.Event()
    budget = _Budget(float(max(1, concurrency)))
    lock = threading.Lock()
    t0 = time.monotonic()
    bar = _Progress(len(todo), progress)

    def record(rec: dict[str, Any]) -> None:
        with lock:
            with index.open("a") as f:
                f.write(json.dumps(rec, default=str) + "\n")
            st = rec["status"]
            setattr(summ, st, getattr(summ, st) + 1)
            summ.capped_downloads += sum(bool(s.get("capped")) for s in rec.get("slots", {}).values())
            if st != "ok":
                bar.note(f"{rec['key']}: {st}: {rec.get('reason')}")
            bar.advance(st)

    def run_group(key: tuple[Any, ...], gjobs: list[DrawJob], instance: int) -> None:
        if interrupted.is_set():
            return
        sv = gjobs[0].draw.server
        lab_dir = Path(f"{state_prefix}{instance}")
        lab = Lab(lab_dir)
        if key == ("quic",):
            # the QUIC servers beside one TCP server (a lab needs one) and the cross sources
            params = LabParams(
                ccas=("cubic",), delay_ms=0.0, instance=instance, quic=tuple(sorted({j.cca for j in gjobs})),
                cross_sources=any(j.draw.sharing.has_cross_traffic for j in gjobs),
            )  # fmt: skip
        else:
            params = LabParams(
                ccas=tuple(sorted({j.cca for j in gjobs})), delay_ms=0.0, instance=instance,
                initcwnd=sv.initcwnd, gso=sv.gso, mss=sv.mss,
                nginx=any(j.draw.server.program == "nginx" for j in gjobs),
                cross_sources=any(j.draw.sharing.has_cross_traffic for j in gjobs),
            )  # fmt: skip
        try:
            st = lab.up(params, timeout=60)
        except Exception as e:  # a lab that will not come up fails its jobs, loudly, not the run
            for j in gjobs:
                record(_record(j, {"status": "failed", "reason": f"lab bring-up failed: {e}", "slots": {}}))
            return
        try:

            def one_job(j: DrawJob) -> dict[str, Any] | None:
                if interrupted.is_set():
                    return None  # never started: not recorded, so a resumed run measures it
                with budget.take(job_cost(j.draw, concurrency, quic=j.transport == "quic")):
                    if interrupted.is_set():
                        return None
                    return run_job(j, root, lab_dir, st.get("cross_sources"), keep_pcap=keep_pcap)

            futs = [pool.submit(one_job, j) for j in gjobs]
            for j, fu in zip(gjobs, futs, strict=True):
                try:
                    rec = fu.result()
                except Exception as e:
                    rec = _record(j, {"status": "failed", "reason": f"{type(e).__name__}: {e}", "slots": {}})
                if rec is not None:
                    record(rec)
        finally:
            with contextlib.suppress(Exception):
                lab.down()

    free = list(instances)
    cond = threading.Condition()
    running: list[Future[None]] = []
    with ThreadPoolExecutor(len(instances)) as gpool:
        try:
            _run_groups(groups, gpool, running, free, cond, run_group)
        except KeyboardInterrupt:
            # Ctrl-C (or SIGTERM): no job starts from here; the ones running are bounded by
            # their own timeouts, finish and are recorded, so a resumed run measures exactly
            # what never ran. Their labs come down as their groups end.
            interrupted.set()
            n = sum(not fu.done() for fu in running)
            print(
                f"collect: interrupted: no new job starts; {n} lab group(s) finish their running "
                "jobs, then it stops (run it again to resume)",
                file=sys.stderr,
            )
            for fu in running:
                with contextlib.suppress(Exception):
                    fu.result()
            raise
    pool.shutdown()
    bar.close()
    summ.wall_s = round(time.monotonic() - t0, 1)
    return summ


def _run_groups(
    groups: dict[tuple[Any, ...], list[DrawJob]],
    gpool: ThreadPoolExecutor,
    running: list[Future[None]],
    free: list[int],
    cond: threading.Condition,
    run_group: Any,
) -> None:
    """Each server group on the next free lab instance, until every group has run."""
    for key, gjobs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        with cond:
            cond.wait_for(lambda: bool(free))
            inst = free.pop(0)

        def one(k: tuple[Any, ...] = key, g: list[DrawJob] = gjobs, i: int = inst) -> None:
            try:
                run_group(k, g, i)
            finally:
                with cond:
                    free.append(i)
                    cond.notify_all()

        running.append(gpool.submit(one))
    for fu in running:
        fu.result()


class _Budget:
    """A weighted semaphore, first come first served: a job waits until it is first in line and
    its cost fits in what is free (so light jobs cannot starve a heavy one)."""

    def __init__(self, total: float) -> None:
        self.free = total
        self._cond = threading.Condition()
        self._line: list[int] = []
        self._ticket = 0

    @contextlib.contextmanager
    def take(self, n: float) -> Any:
        with self._cond:
            me = self._ticket
            self._ticket += 1
            self._line.append(me)
            self._cond.wait_for(lambda: self._line[0] == me and self.free >= n - 1e-9)
            self._line.pop(0)
            self.free -= n
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self.free += n
                self._cond.notify_all()


class _Progress:
    """A rich progress bar on a terminal; on anything else, only the notes (failures)."""

    def __init__(self, total: int, enabled: bool | None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.counts: dict[str, int] = defaultdict(int)
        self._p: Any = None
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._p = Progress(TextColumn("collect"), BarColumn(), MofNCompleteColumn(),
                               TextColumn("{task.fields[status]}"), TimeRemainingColumn())  # fmt: skip
            self._p.start()
            self._task = self._p.add_task("jobs", total=total, status="")

    def advance(self, status: str) -> None:
        self.counts[status] += 1
        if self._p is not None:
            st = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
            self._p.update(self._task, advance=1, status=st)

    def note(self, msg: str) -> None:
        if self._p is not None:
            self._p.console.print(msg, style="yellow", markup=False, highlight=False)
        else:
            print(msg, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()


# --- command line -------------------------------------------------------------------------


def default_ccas() -> tuple[str, ...]:
    from ccscope.classifier.dataset import VARIANTS, trained_ccas

    return (*trained_ccas(), *VARIANTS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--space", default="full", choices=sorted(SPACES))
    p.add_argument("--split", default="train", choices=sorted(SPLITS))
    p.add_argument("--draws", type=int, help="how many draws (required unless --plan)")
    p.add_argument(
        "--plan",
        choices=("reference", "reference-quic"),
        help="the classifier's reference set (classifier/reference.py: plan, or quic_plan for the lab's "
        "QUIC classes) instead of --space/--draws",
    )
    p.add_argument("--sets", help="with --plan: which of its sets, comma-separated (default all)")
    p.add_argument(
        "--scale", type=float, default=1.0, help="with --plan: each set's count per class times this (min 1)"
    )
    p.add_argument(
        "--train-per-cca", type=int, metavar="N",
        help="with --plan reference: the train set's first N draws per CCA of its seeded stream "
        "(default classifier.reference.N_TRAIN); more training draws, every other set unchanged",
    )  # fmt: skip
    p.add_argument("--start", type=int, default=0, help="index of the first draw (default 0)")
    p.add_argument("--fix", action="append", default=[], choices=GROUPS, metavar="GROUP",
                   help=f"hold a factor group at its mildest ({', '.join(GROUPS)}); repeatable")  # fmt: skip
    p.add_argument("--ccas", help="comma-separated lab CCAs (default: every trained CCA and variant); "
                   "a QUIC class as stack:cca (e.g. quiche:cubic) is measured over QUIC")  # fmt: skip
    p.add_argument("--runs", type=int, default=1, help="runs per (draw, CCA) (default 1)")
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help=f"output (default {DEFAULT_ROOT})")
    p.add_argument("--concurrency", "-k", type=int, default=8, help="jobs at once (default 8)")
    p.add_argument("--instances", default=",".join(map(str, DEFAULT_INSTANCES)),
                   help="lab instances to use, comma-separated (several: server groups overlap)")  # fmt: skip
    p.add_argument("--state-prefix", default=DEFAULT_STATE_PREFIX,
                   help=f"lab state dirs are PREFIX<instance> (default {DEFAULT_STATE_PREFIX}N)")  # fmt: skip
    p.add_argument("--pcap", action="store_true", help="keep each download's pcap (off: saves disk)")
    p.add_argument("--no-retry-failed", action="store_true", help="leave failed jobs as they are")
    p.add_argument(
        "--skip-in", type=Path, metavar="FEATURES",
        help="skip jobs already measured in this reference-features file (e.g. the shipped "
        "classifier/models/reference-<version>.json.gz): grow a collection whose traces are gone, "
        "then `ccscope train --extend FEATURES --root ROOT`",
    )  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="print the plan and its time estimate only")
    p.add_argument("--json", action="store_true", help="the summary as JSON")


def run_cli(args: argparse.Namespace) -> int:
    if args.plan in ("reference", "reference-quic"):
        from ccscope.classifier.reference import plan, quic_plan

        if not 0 < args.scale <= 1:
            print(f"collect: --scale must be in (0, 1], not {args.scale}", file=sys.stderr)
            return 2
        if args.train_per_cca is not None and (args.plan != "reference" or args.train_per_cca < 1):
            print("collect: --train-per-cca needs --plan reference and a count >= 1", file=sys.stderr)
            return 2
        if args.plan == "reference":
            sets = plan(scale=args.scale, train_per_cca=args.train_per_cca)
        else:
            sets = quic_plan(scale=args.scale)
        want = [x for x in (args.sets or ",".join(sets)).split(",") if x]
        unknown = [x for x in want if x not in sets]
        if unknown:
            print(f"collect: unknown set(s) {', '.join(unknown)} (known: {', '.join(sets)})", file=sys.stderr)
            return 2
        jobs = [j for x in want for j in sets[x]]
        ds = list({j.draw.id: j.draw for j in jobs}.values())
    else:
        if args.draws is None:
            print("collect: --draws is required without --plan", file=sys.stderr)
            return 2
        try:
            ds = draws(args.draws, args.space, args.split, start=args.start, fixed=args.fix)
        except ConditionError as e:
            print(f"collect: {e}", file=sys.stderr)
            return 2
        ccas = tuple(c for c in args.ccas.split(",") if c) if args.ccas else default_ccas()
        try:
            quic = quic_labels([c for c in ccas if is_quic_label(c)])
        except ConditionError as e:
            print(f"collect: {e}", file=sys.stderr)
            return 2
        jobs = plan_jobs(ds, [c for c in ccas if not is_quic_label(c)], args.runs)
        jobs += plan_quic_jobs(ds, quic, args.runs)
    if args.skip_in is not None:
        from ccscope.classifier.train import ReferenceFeaturesError, load_reference_features

        try:
            measured = {s.key for s in load_reference_features(args.skip_in)[0]}
        except ReferenceFeaturesError as e:
            print(f"collect: {e}", file=sys.stderr)
            return 2
        before = len(jobs)
        jobs = [j for j in jobs if j.key not in measured]
        print(f"collect: {before - len(jobs)} of {before} jobs already measured in {args.skip_in}",
              file=sys.stderr)  # fmt: skip
    k = args.concurrency
    if args.dry_run:
        doc = {
            "draws": len(ds),
            "jobs": len(jobs),
            "server_groups": len({j.draw.server.key() for j in jobs}),
            "estimate_s": round(estimate_s(jobs, k)),
            "draw_ids": [d.id for d in ds],
        }
        if args.json:
            print(json.dumps(doc, indent=1))
        else:
            for d in ds:
                print(f"{d.id}  {d.describe()}")
            print(f"{len(jobs)} jobs in {doc['server_groups']} server groups; "
                  f"estimated {doc['estimate_s'] / 3600:.2f} h at K = {k}")  # fmt: skip
        return 0
    instances = [int(x) for x in str(args.instances).split(",") if x]
    try:
        summ = collect(jobs, args.root, concurrency=k, instances=instances, state_prefix=args.state_prefix,
                       keep_pcap=args.pcap, retry_failed=not args.no_retry_failed)  # fmt: skip
    except CollectionBusy as e:
        print(f"collect: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summ.to_dict(), indent=1))
    else:
        print(f"collect: {summ.ok} ok, {summ.partial} partial, {summ.failed} failed, {summ.skipped} "
              f"already done; {summ.capped_downloads} downloads capped; {summ.wall_s:.0f} s; "
              f"index {args.root}/index.jsonl")  # fmt: skip
    return 0 if summ.failed == 0 else 1


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "collect",
        help="measure lab CCAs under seeded draws from the condition space",
        description="Measure lab CCAs under draws from the condition space (classifier/README.md, "
        "'Condition space'): traces, the server's own ground truth and an index per job. Needs root.",
    )
    add_arguments(p)
    p.set_defaults(func=run_cli)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_job"]:
        return _inner_job(Path(argv[1]))
    ap = argparse.ArgumentParser(prog="python -m ccscope.classifier.collect")
    add_arguments(ap)
    return run_cli(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
