#!/usr/bin/env python3
"""Chaos: the distributed engine, for real, under kills and restarts. Counts what is lost,
duplicated or left behind.

The set-up is the deployment's, as separate processes on this host:

* PostgreSQL (a throwaway cluster), Redis (append-only file, fsync always: a restarted broker
  keeps its queues) and moto's S3 server for the traces, all bound to 198.18.72.1, an address
  on the root namespace's loopback device: the workers' namespaces reach it through their NAT,
  as remote hosts reach a service (127.0.0.1 would be their own loopback);
* three Celery workers, three vantage points, each `ccscope worker --netns --access ...`: its own
  network namespace behind its own emulated access path, through which it reaches the lab, the
  store, the broker and S3; the first also consumes the control queue;
* Celery beat with the store's scheduler, and a weekly campaign whose cron fires in the coming
  minute (a second slot, when the first runs out before the kills do, goes through the run-now
  path: `plan_campaign_task` with a slot of its own);
* a lab (instance 71) serving many small sites (small objects: many quick measurements).

Then, while the campaign runs: every worker in turn is SIGKILLed (its whole process group: the
namespace's shell, the Celery process and the downloads in flight) while a download is running,
and started again, `--kills` times in all; PostgreSQL is restarted a third of the way through
and Redis two thirds. Afterwards the campaign is left to finish, the workers are stopped and the
figures are counted:

    lost                 planned measurements that did not end classified (`unfinished`: each
                         row still open, and whether the broker held a message for it)
    duplicated           measurement rows per idempotency key > 1, verdicts per measurement > 1,
                         trace sets per (measurement, profile) > 1, census counts != verdicts
    leaked_namespaces    network namespaces still held by a process of this run
    leaked_nft_tables    nftables tables of a killed shell still present
    leaked_tun_devices   TUN devices of a killed shell still present
    leaked_shell_locks   /run/ccscope/shells lock files naming a killed shell

usage: python bench/chaos/run.py --out bench/results/chaos.json [--kills 100] [--sites 60]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.workers.kit import GroupProcess, RedisServer, free_port, group_pids, wait_tcp  # noqa: E402

CCSCOPE = str(Path(sys.executable).with_name("ccscope"))
CELERY = str(Path(sys.executable).with_name("celery"))
LAB_INSTANCE = 71
LAB_DIR = "/run/ccscope/lab-bench-chaos"
SVC_ADDR = "198.18.72.1"  # lab instance 72's /24, held by this bench: no lab runs there
VANTAGES = (("near", "--delay 2"), ("mid", "--delay 10"), ("far", "--delay 30 --jitter 1"))
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "ccscope-chaos",
    "AWS_SECRET_ACCESS_KEY": "ccscope-chaos-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
RUN_MARK = "CHAOS_BENCH_RUN"
# A killed worker's connections are never closed: its namespace vanished with its TUN device.
# PostgreSQL must notice (keepalives) and must not keep a dead client's open transaction, whose
# row locks would stall every live worker (seen here without them: all three stalled for
# minutes behind sessions 'idle in transaction'). The deployment's postgres sets the same.
PG_SETTINGS = (
    "max_connections=300",
    "idle_in_transaction_session_timeout=20s",
    "tcp_keepalives_idle=10",
    "tcp_keepalives_interval=5",
    "tcp_keepalives_count=3",
)
GUARD_ROUTE = ("unreachable", "100.64.0.0/10")  # in every process this bench starts: survivors are leaks


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


@contextlib.contextmanager
def services_address() -> Iterator[str]:
    """The services' address, on the root namespace's loopback device: a local address that the
    workers' namespaces reach through their NAT (127.0.0.1 would be their own loopback)."""
    sh("ip", "addr", "del", f"{SVC_ADDR}/32", "dev", "lo", check=False)
    sh("ip", "addr", "add", f"{SVC_ADDR}/32", "dev", "lo")
    try:
        yield SVC_ADDR
    finally:
        sh("ip", "addr", "del", f"{SVC_ADDR}/32", "dev", "lo", check=False)


@contextlib.contextmanager
def unreachable_guard() -> Iterator[None]:
    """Packets for a dead shell's address (a server's keepalive or retransmission to a killed
    worker) would otherwise follow the default route off this machine; an `unreachable` route
    under the live shells' /30s answers them locally. Added only if absent, removed if added."""
    have = GUARD_ROUTE[1] in sh("ip", "route", "show", "type", GUARD_ROUTE[0], check=False).stdout
    if not have:
        sh("ip", "route", "add", *GUARD_ROUTE)
    try:
        yield
    finally:
        if not have:
            sh("ip", "route", "del", *GUARD_ROUTE, check=False)


# ---- services ----------------------------------------------------------------------------------


class Moto:
    def __init__(self, work: Path) -> None:
        self.port = free_port(SVC_ADDR)
        self.log = (work / "moto.log").open("ab")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{SVC_ADDR}:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", SVC_ADDR, "-p", str(self.port)],
            env={**os.environ, **CREDENTIALS},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_tcp(SVC_ADDR, self.port, 60, "moto")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)


# ---- workers -----------------------------------------------------------------------------------


class Worker(GroupProcess):
    """`ccscope worker` for one vantage point in its own namespace (--netns) behind its access path."""

    def __init__(self, vantage: str, access: str, env: dict[str, str], work: Path, control: bool) -> None:
        cmd = [CCSCOPE, "worker", "--vantage", vantage, "--netns", "--access", access, "--lab",
               "--concurrency", "3", "--profiles", "A,B"] + (["--control"] if control else [])  # fmt: skip
        super().__init__(cmd, work / f"worker-{vantage}.log", env)
        self.vantage = vantage
        self.starts = 0
        self.killed_shells: list[int] = []  # pids of ccscope-link processes SIGKILLed with it

    def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as f:
            f.write(f"\n==== start {self.starts} ====\n".encode())
        super().start()

    def ready(self, timeout: float = 90) -> bool:
        return self.wait_for("ready.", timeout)

    def shells(self) -> list[int]:
        return group_pids(self.proc.pid, "ccscope-link") if self.proc else []

    def kill(self) -> None:
        self.killed_shells += self.shells()
        super().kill()

    def stop(self, timeout: float = 60) -> None:
        super().stop(timeout)


# ---- counting ----------------------------------------------------------------------------------


def marked_processes(run_id: str) -> list[int]:
    out = []
    needle = f"{RUN_MARK}={run_id}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                out.append(int(d.name))
        except OSError:
            continue
    return out


def netns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def leftovers(run_id: str, killed: list[int], root_ns: str | None) -> dict[str, Any]:
    survivors = [p for p in marked_processes(run_id) if p != os.getpid()]
    namespaces = {n for n in (netns_of(p) for p in survivors) if n and n != root_ns}
    tables = sh("nft", "list", "tables", check=False).stdout.split()
    killed_set = set(killed)
    # Per-shell tables of older builds (ccscope_<index>_<pid>); the shared ccscope_shells
    # table is static plumbing, never a leak.
    leaked_tables = [
        t for t in tables if re.fullmatch(r"ccscope_\d+_\d+", t) and int(t.rsplit("_", 1)[-1]) in killed_set
    ]
    locks, devices = [], []
    for lock in Path("/run/ccscope/shells").glob("*.lock"):
        try:
            owner = int(lock.read_text().strip() or 0)
        except (OSError, ValueError):
            continue
        if owner in killed_set:
            locks.append(lock.name)
            idx = lock.stem
            for dev in (f"ccs{idx}o", f"ccs{idx}i"):
                if Path(f"/sys/class/net/{dev}").exists():
                    devices.append(dev)

    def describe(pid: int) -> dict[str, Any]:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{pid}/stat").read_text()
            f = stat[stat.rindex(")") + 2 :].split()
            return {"pid": pid, "ppid": int(f[1]), "pgid": int(f[2]), "cmd": cmd[:200]}
        except (OSError, ValueError, IndexError):
            return {"pid": pid, "cmd": None}

    return {
        "surviving_processes": [describe(p) for p in survivors],
        "leaked_namespaces": len(namespaces),
        "leaked_nft_tables": len(leaked_tables),
        "leaked_tun_devices": len(devices),
        "leaked_shell_locks": len(locks),
        "detail": {"tables": leaked_tables, "devices": devices, "locks": locks},
    }


def count_outcomes(store: Any, campaign_id: int) -> dict[str, Any]:
    from sqlalchemy import func, select

    from ccscope.store.models import CensusCount, Measurement, TraceFile, VerdictRow

    with store.sessions() as s:
        rows = s.execute(
            select(Measurement.id, Measurement.state, Measurement.failure_reason, Measurement.attempts).where(
                Measurement.campaign_id == campaign_id
            )
        ).all()
        dup_keys = s.execute(
            select(Measurement.idempotency_key).group_by(Measurement.idempotency_key).having(func.count() > 1)
        ).all()
        dup_verdicts = s.execute(
            select(VerdictRow.measurement_id).group_by(VerdictRow.measurement_id).having(func.count() > 1)
        ).all()
        dup_traces = s.execute(
            select(TraceFile.measurement_id, TraceFile.profile, TraceFile.media_type)
            .group_by(TraceFile.measurement_id, TraceFile.profile, TraceFile.media_type)
            .having(func.count() > 1)
        ).all()
        verdicts = s.execute(select(func.count()).select_from(VerdictRow)).scalar_one()
        census_total = int(s.execute(select(func.coalesce(func.sum(CensusCount.n), 0))).scalar_one())
    states: dict[str, int] = {}
    for r in rows:
        states[r.state] = states.get(r.state, 0) + 1
    reasons: dict[str, int] = {}
    for r in rows:
        if r.state == "failed":
            key = (r.failure_reason or "")[:120]
            reasons[key] = reasons.get(key, 0) + 1
    return {
        "measurements": len(rows),
        "states": states,
        "lost": sum(r.state != "classified" for r in rows),
        "failure_reasons": reasons,
        "attempts_total": sum(r.attempts or 0 for r in rows),
        "rerun_measurements": sum((r.attempts or 0) > 1 for r in rows),
        "duplicated": len(dup_keys)
        + len(dup_verdicts)
        + len(dup_traces)
        + abs(int(census_total) - int(verdicts)),
        "duplicate_detail": {
            "rows_per_key": len(dup_keys),
            "verdicts_per_measurement": len(dup_verdicts),
            "trace_sets": len(dup_traces),
            "census_counts_minus_verdicts": int(census_total) - int(verdicts),
        },
    }


def unfinished(store: Any, campaign_id: int, broker_url: str) -> list[dict[str, Any]]:
    """Each row not finished when the bench stopped waiting: its state, attempts, how long since
    it last changed or beat, and whether the broker still held a message for it."""
    from sqlalchemy import select

    from ccscope.store.models import Measurement, VantagePoint, utcnow
    from ccscope.workers.celery_app import app, broker_measurement_ids

    with store.sessions() as s:
        rows = s.execute(
            select(
                Measurement.id,
                Measurement.state,
                Measurement.attempts,
                Measurement.updated_at,
                Measurement.heartbeat_at,
                VantagePoint.name,
            )
            .join(VantagePoint, VantagePoint.id == Measurement.vantage_id)
            .where(
                Measurement.campaign_id == campaign_id,
                Measurement.state.in_(("queued", "running", "captured")),
            )
        ).all()
    if not rows:
        return []
    app.conf.broker_url = broker_url
    try:
        held = broker_measurement_ids(sorted({r.name for r in rows}), 100_000) or set()
    except Exception as e:  # the broker may be the thing that failed: say so, keep the rest
        log(f"could not read the broker: {e}")
        held = set()
    now = utcnow()

    def age(t: Any) -> float | None:
        return round((now - t.replace(tzinfo=now.tzinfo)).total_seconds(), 1) if t else None

    return [
        {
            "id": r.id,
            "vantage": r.name,
            "state": r.state,
            "attempts": r.attempts,
            "since_update_s": age(r.updated_at),
            "since_heartbeat_s": age(r.heartbeat_at),
            "message_in_broker": r.id in held,
        }
        for r in rows
    ]


def log_counts(workers: list[Worker], work: Path) -> dict[str, Any]:
    """What the workers' and beat's logs say about failures the counts above cannot show."""
    marks = {
        "task_raised_unexpected": "raised unexpected",
        "broker_connection_lost": "Connection to broker lost",
        "celery_restarted_by_supervisor": "restarting in",
        "orphans_redispatched": "queued without a message in the broker",
        "dead_runs_rerun": "its worker died mid-run",
        "heartbeat_failed": "heartbeat failed",
    }
    out: dict[str, Any] = {}
    texts = {w.vantage: w.log.read_text(errors="replace") for w in workers}
    for key, needle in marks.items():
        out[key] = {v: t.count(needle) for v, t in texts.items()}
    unexpected = [
        line.strip()[:300] for t in texts.values() for line in t.splitlines() if "raised unexpected" in line
    ]
    out["unexpected_examples"] = sorted(set(unexpected))[:10]
    return out


def store_sizes(store: Any) -> dict[str, Any]:
    """Rows and bytes per table (PostgreSQL's own accounting, indexes and TOAST included) and
    the traces' bytes: the per-measurement figures deploy/SCALE.md scales up."""
    from sqlalchemy import text

    out: dict[str, Any] = {}
    with store.sessions() as s:
        for table in ("measurements", "verdicts", "traces", "census_counts"):
            rows = s.execute(text(f"select count(*) from {table}")).scalar_one()
            size = s.execute(text(f"select pg_total_relation_size('{table}')")).scalar_one()
            out[table] = {"rows": rows, "bytes": size, "bytes_per_row": round(size / rows) if rows else None}
        out["trace_bytes_total"] = int(
            s.execute(text("select coalesce(sum(size), 0) from traces")).scalar_one()
        )
        out["database_bytes"] = s.execute(text("select pg_database_size(current_database())")).scalar_one()
    return out


# ---- the run -----------------------------------------------------------------------------------


def weekly_cron_next_minute() -> tuple[str, dt.datetime]:
    """A weekly schedule whose next tick is the coming minute (at least 20 s away)."""
    now = dt.datetime.now(dt.UTC)
    fire = (now + dt.timedelta(seconds=80)).replace(second=0, microsecond=0)
    return f"{fire.minute} {fire.hour} * * {fire.isoweekday() % 7}", fire


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/chaos.json")
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--sites", type=int, default=60, help="sites in the campaign's list (x3 vantage points)")
    ap.add_argument("--object-bytes", type=int, default=12_000)
    ap.add_argument("--work-dir", default="/var/tmp/ccscope-bench-chaos")
    ap.add_argument("--finish-timeout", type=float, default=900)
    args = ap.parse_args()
    if os.geteuid() != 0:
        log("bench/chaos needs root (namespaces)")
        return 2
    from ccscope.lab.lab import Lab, LabParams
    from ccscope.store.core import Store
    from ccscope.store.pgcluster import running_cluster

    run_id = uuid.uuid4().hex[:12]
    os.environ[RUN_MARK] = run_id
    work = Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    root_ns = netns_of(os.getpid())
    t_start = time.monotonic()
    result: dict[str, Any] = {
        "kills_planned": args.kills,
        "sites": args.sites,
        "object_bytes": args.object_bytes,
    }
    events: list[dict[str, Any]] = []
    workers: list[Worker] = []
    sites = [(f"c{i:03d}.lab.test", ("cubic", "reno", "bbr")[i % 3]) for i in range(args.sites)]
    with contextlib.ExitStack() as stack:
        stack.enter_context(services_address())
        stack.enter_context(unreachable_guard())
        pg = stack.enter_context(running_cluster([f"listen_addresses='127.0.0.1,{SVC_ADDR}'", *PG_SETTINGS]))
        # The workers connect from their namespaces' own addresses (100.64/10: local delivery,
        # no NAT on the way in) and the bench from the services address.
        with (pg.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {SVC_ADDR}/32 trust\nhost all all 100.64.0.0/10 trust\n")
        pg._run("pg_ctl", "-D", str(pg.data), "reload")
        pg_url = f"postgresql+psycopg://postgres@{SVC_ADDR}:{pg.port}/ccscope"
        pg._create("ccscope", None)
        # Durable (append-only, fsync always): the restarted broker keeps every queued and every
        # unacknowledged message. A dead worker's connections go after ~10 s of keepalive, not 300.
        redis = RedisServer(
            work / "redis",
            host=SVC_ADDR,
            bind=f"127.0.0.1 {SVC_ADDR}",
            extra=("--tcp-keepalive", "10", "--protected-mode", "no"),
            timeout=15,
        )
        redis.start()
        stack.callback(redis.stop)
        moto = Moto(work)
        moto.start()
        stack.callback(moto.stop)
        os.environ.update(CREDENTIALS)
        os.environ["CCSCOPE_S3_ENDPOINT"] = moto.url
        import boto3

        boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1").create_bucket(Bucket="traces")
        trace_dir = "s3://traces/chaos"
        lab = Lab(LAB_DIR)
        lab.up(
            LabParams(
                ccas=("cubic", "reno", "bbr"),
                delay_ms=5.0,
                sites=tuple(sites),
                instance=LAB_INSTANCE,
            )
        )
        stack.callback(lab.down)
        store = Store(pg_url, trace_dir)
        store.migrate()
        stack.callback(store.close)
        store.import_list("chaos", dt.date.today(), [(i + 1, h) for i, (h, _) in enumerate(sites)], "tranco")
        for h, _ in sites:
            store.cache_object(
                h,
                f"https://{h}/obj/{args.object_bytes}",
                args.object_bytes,
                {"source": "chaos"},
                ttl_seconds=86400,
            )
        for v, a in VANTAGES:
            store.add_vantage(v, f"chaos: own namespace behind {a}")
        schedule, fire = weekly_cron_next_minute()
        camp = store.create_campaign(
            "chaos-weekly", "chaos", args.sites, ["tcp"], ["default"], [v for v, _ in VANTAGES], schedule
        )
        result["campaign"] = {"id": camp.id, "schedule": schedule, "first_tick": fire.isoformat()}
        env = {
            **os.environ,
            "CCSCOPE_DB_URL": pg_url,
            "CCSCOPE_TRACE_DIR": trace_dir,
            "CCSCOPE_BROKER_URL": redis.url,
            "CCSCOPE_RESULT_URL": redis.url,
            "CCSCOPE_LAB_DIR": LAB_DIR,
            "CCSCOPE_LAB": "1",
            "CCSCOPE_DB_POOL": "6",
            "CCSCOPE_WORKER_DIR": str(work / "scratch"),
            "CCSCOPE_WORKER_TIMEOUT": "40",
            # Short windows so a killed run is redelivered and taken for dead in seconds; each
            # stays longer than one measurement (a few seconds), so live runs are left alone.
            "CCSCOPE_VISIBILITY_TIMEOUT": "45",
            "CCSCOPE_RESTORE_INTERVAL": "2",
            "CCSCOPE_WORKER_STALE_AFTER": "15",
            "CCSCOPE_WORKER_HEARTBEAT": "2",
            "CCSCOPE_WORKER_LEASE": "15",
            "CCSCOPE_WORKER_MIN_GAP": "0",
            "CCSCOPE_WORKER_RETRY_BASE": "1",
            "CCSCOPE_WORKER_RETRY_CAP": "5",
            "CCSCOPE_WORKER_MAX_RETRIES": "200",
            # Beat's sweep for dead runs and lost messages every 30 s (the deployment's 300 s
            # would let a lost message hold the campaign's end for minutes).
            "CCSCOPE_SWEEP_INTERVAL": "30",
        }
        beat = subprocess.Popen(
            [
                CELERY,
                "-A",
                "ccscope.workers.celery_app",
                "beat",
                "-S",
                "ccscope.workers.celery_app:CampaignScheduler",
                "--schedule",
                str(work / "beat-schedule"),
                "--loglevel",
                "INFO",
            ],
            env=env,
            stdout=(work / "beat.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stack.callback(lambda: (beat.terminate(), beat.wait(15)))
        workers = [Worker(v, a, env, work, control=(i == 0)) for i, (v, a) in enumerate(VANTAGES)]
        for w in workers:
            w.start()
        stack.callback(lambda: [w.stop() for w in workers])
        for w in workers:
            if not w.ready():
                raise SystemExit(f"worker {w.vantage} did not start: {w.log.read_text()[-2000:]}")
        log(f"3 workers up in their namespaces; campaign {camp.id} '{schedule}' fires at {fire:%H:%M:%S}")
        # Beat plans the first slot at its tick.
        deadline = time.monotonic() + 150
        while not store.list_measurements(limit=1):
            if time.monotonic() > deadline or beat.poll() is not None:
                raise SystemExit(f"beat did not plan the campaign: {(work / 'beat.log').read_text()[-2000:]}")
            time.sleep(1)
        t_planned = time.monotonic()
        result["beat_planned_after_s"] = round(t_planned - t_start, 1)
        log(f"beat planned slot 1 ({len(store.list_measurements(limit=10000))} rows)")

        kills = 0
        slots = 1
        lock = threading.Lock()
        stop = threading.Event()
        restarts = {"postgresql": 0, "redis": 0}

        def chaos_loop(w: Worker) -> None:
            nonlocal kills
            rng = random.Random(hash(w.vantage))
            while not stop.is_set():
                # Wait until a download is running: a profile's shell nested inside the vantage
                # point's own shell.
                deadline = time.monotonic() + 60
                while len(w.shells()) < 2 and time.monotonic() < deadline and not stop.is_set():
                    time.sleep(0.1)
                if stop.is_set():
                    return
                time.sleep(rng.uniform(0.2, 1.5))  # somewhere mid-download
                with lock:
                    if kills >= args.kills:
                        stop.set()
                        return
                    kills += 1
                    n = kills
                busy = len(w.shells())
                w.kill()
                events.append(
                    {
                        "t": round(time.monotonic() - t_start, 1),
                        "kill": n,
                        "vantage": w.vantage,
                        "shells_in_flight": busy,
                    }
                )
                w.start()
                if not w.ready():
                    log(f"{w.vantage} did not come back: {w.log.read_text()[-1500:]}")
                    stop.set()
                    return

        threads = [threading.Thread(target=chaos_loop, args=(w,), daemon=True) for w in workers]
        for t in threads:
            t.start()
        from ccscope.workers.celery_app import app, plan_campaign_task

        app.conf.broker_url = redis.url
        app.conf.result_backend = redis.url
        while not stop.is_set():
            time.sleep(1)
            with lock:
                k = kills
            if k >= args.kills // 3 and not restarts["postgresql"]:
                log(f"after kill {k}: restarting PostgreSQL")
                t0 = time.monotonic()
                pg.restart("immediate")  # a crash: no checkpoint, connections cut
                restarts["postgresql"] = 1
                events.append(
                    {
                        "t": round(t0 - t_start, 1),
                        "restart": "postgresql",
                        "down_s": round(time.monotonic() - t0, 2),
                    }
                )
            if k >= 2 * args.kills // 3 and not restarts["redis"]:
                log(f"after kill {k}: restarting Redis")
                t0 = time.monotonic()
                redis.stop()
                time.sleep(1)
                redis.start()
                restarts["redis"] = 1
                events.append(
                    {
                        "t": round(t0 - t_start, 1),
                        "restart": "redis",
                        "down_s": round(time.monotonic() - t0, 2),
                    }
                )
            # Keep measurements coming until the kills are done: a further slot, run now.
            states = store.measurement_states()
            if states.get("queued", 0) + states.get("running", 0) < 6 and k < args.kills:
                slots += 1
                plan_campaign_task.apply_async((camp.id, f"chaos-extra-{slots}"), queue="ccscope.control")
                log(f"kill {k}: slot {slots} planned through the run-now path")
                time.sleep(5)
            if int(time.monotonic() - t_start) % 30 == 0:
                log(f"kills {k}/{args.kills}; states {states}")
        for t in threads:
            t.join(120)
        result["kills"] = kills
        log(f"{kills} kills done; letting the campaign finish")
        # Finish: every planned row must end; rows that the broker lost would stay queued, so
        # none is re-dispatched by hand here.
        t_kills_done = time.monotonic()
        deadline = t_kills_done + args.finish_timeout
        last_log = 0.0
        while time.monotonic() < deadline:
            st = store.measurement_states()
            if not st.get("queued") and not st.get("running") and not st.get("captured"):
                break
            if time.monotonic() - last_log > 30:
                log(f"finishing: {st}")
                last_log = time.monotonic()
            time.sleep(3)
        result["finish_s"] = round(time.monotonic() - t_start, 1)
        result["drain_after_kills_s"] = round(time.monotonic() - t_kills_done, 1)
        result["slots"] = slots
        result["restarts"] = restarts
        result.update(count_outcomes(store, camp.id))
        result["unfinished"] = unfinished(store, camp.id, redis.url)
        for w in workers:
            w.stop()
        beat.terminate()
        beat.wait(15)
        result["scratch_dirs_left"] = (
            sum(1 for p in (work / "scratch").rglob("m*") if p.is_dir()) if (work / "scratch").exists() else 0
        )
        result["store_sizes"] = store_sizes(store)
        result["worker_logs"] = log_counts(workers, work)
    # Everything this run started is stopped now (workers, beat, services, the lab): whatever
    # of it still runs, or was left in the kernel by a killed shell, is a leak.
    time.sleep(2)
    killed = [p for w in workers for p in w.killed_shells]
    result["killed_shells"] = len(killed)
    result.update(leftovers(run_id, killed, root_ns))
    result["events"] = events
    result["seconds"] = round(time.monotonic() - t_start, 1)
    result["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    result["host"] = {"cpus": os.cpu_count(), "load": [round(x, 2) for x in os.getloadavg()]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n")
    log(
        json.dumps(
            {
                k: result.get(k)
                for k in (
                    "kills",
                    "measurements",
                    "lost",
                    "duplicated",
                    "leaked_namespaces",
                    "leaked_nft_tables",
                    "leaked_tun_devices",
                )
            }
        )
    )
    return 0 if result.get("lost") == 0 and result.get("duplicated") == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
