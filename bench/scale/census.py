"""One census of K lab sites at once, run in a child process, and what it cost in CPU.

The measuring side (the census pipeline: store, crawler, embedded pool of K, classifier) runs in
a child process, run.py again with --census-child, so its CPU time (itself and every process it
waited for: shells, download clients; capture -> trace and classification run in it) comes from
wait4's rusage, apart from the lab's servers (in the parent's lab process group). Parts `sweep`
and `cpu` are made of such runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import STATE_DIR  # first: it puts the repository on sys.path for `tests`
from stealwatch import StealWatch, attribute

from ccscope.capture.host import busy_between, cpu_busy_by_cpu, cpu_times, steal_between
from tests.workers.kit import proc_stats  # the benches share the tests' process kit

# The child is the bench's own script: run.py dispatches --census-child to _census_child.
RUN_PY = Path(__file__).with_name("run.py")

# The CCAs the lab sites of parts sweep and cpu take in turn (site i runs MIX[i % len(MIX)]).
MIX = (
    "cubic",
    "bbr",
    "reno",
    "bic",
    "htcp",
    "vegas",
    "westwood",
    "illinois",
    "scalable",
    "highspeed",
    "hybla",
    "veno",
)


def _lateness(stats: dict[str, Any], d: str) -> dict[str, Any] | None:
    """One direction's `lateness_us` from an emulator's stats, when it has a p99."""
    lat = (stats.get(d) or {}).get("lateness_us") or {}
    return lat if isinstance(lat.get("p99"), int | float) else None


def _shell_lateness(scratch: Path) -> list[dict[str, Any]]:
    """Each shell direction's release lateness (ms) and packet count, from every emulator stats
    file the census's runs left under `scratch`."""
    out: list[dict[str, Any]] = []
    for f in sorted(scratch.rglob("*.stats.json")):
        try:
            stats = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(stats, dict):
            continue
        for d in ("up", "down"):
            if (lat := _lateness(stats, d)) is not None:
                out.append(
                    {
                        "run": f"{f.parent.name.split('-')[0]}/{f.name.split('.')[0]}/{d}",
                        "p99_ms": float(lat["p99"]) / 1000,
                        "max_ms": float(lat.get("max") or 0) / 1000,
                        "packets": int(lat.get("count") or 0),
                        # absent from an emulator built before 2026-11-29: unknown, not zero
                        "at_least_1ms": lat.get("at_least_1ms"),
                        "duration_s": round(float(stats.get("duration_s") or 0), 1),
                        "exit": stats.get("exit"),
                        # the hypervisor's steal over the run (run_in_shell adds it): a freeze
                        # delays every shell at once, through no fault of the emulator
                        "steal_s": (stats.get("host") or {}).get("steal_s"),
                        # when its first late packets left, and how late (ms): see stealwatch.py
                        "late_marks": lat.get("late_1ms_marks") or [],
                    }
                )
    return out


def _late_share(directions: list[dict[str, Any]]) -> float | None:
    """Packets released 1 ms late or more over all packets, every shell direction pooled; None
    when an emulator did not count them."""
    if not directions or any(x["at_least_1ms"] is None for x in directions):
        return None
    total = sum(x["packets"] for x in directions)
    return round(sum(x["at_least_1ms"] for x in directions) / total, 6) if total else 0.0


def _timing_kept(row: dict[str, Any]) -> bool:
    """The emulators kept their timing: under 1 % of all their packets 1 ms late or more (the
    pooled p99 under 1 ms) and no direction of 100 packets or more with its p99 over 1 ms. A
    row from an emulator that did not count late packets is judged on every direction's p99."""
    share = row.get("late_1ms_packet_share")
    if share is None:
        return (row["lateness_p99_ms_max"] or 0) < 1.0
    return share < 0.01 and row.get("shell_directions_over_1ms_of_100_packets", 0) == 0


def _census_child(args: argparse.Namespace) -> int:
    """In a child process: one census of the first N sites (`--census-sites`, default K), K at a
    time, from one vantage point, and its
    figures as JSON on stdout. The parent reads this process tree's CPU time from wait4."""
    from ccscope.store.core import Store
    from ccscope.trace import Trace
    from ccscope.workers.census import VantageSpec, import_list_file, lab_truth, run_census, write_list

    k = args.census_child
    work = Path(args.work_dir) / f"sweep-k{k}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if args.probe:
        import cpuprobe  # bench/scale/cpuprobe.py, beside this file

        cpuprobe.install()
    n_sites = args.census_sites or k
    sites = [f"s{i:03d}.lab.test" for i in range(n_sites)]
    store = Store(args.store_url or f"sqlite:///{work}/census.db", f"{work}/traces")
    store.migrate()
    name, _ = import_list_file(store, write_list(work / f"scale_{dt.date.today().isoformat()}.csv", sites))
    # This process's start-up (interpreter, imports, store, lab truth, the classifier's model,
    # which a worker loads once) is a worker's one-off, not a measurement's: its CPU so far is
    # reported apart.
    from ccscope.classifier.core import _load_model

    _load_model(None)
    from ccscope.capture import measure

    if args.check_slots:
        measure.CHECKS = measure.CheckGate(args.check_slots)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    rc0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    pc0 = cpu_busy_by_cpu()
    rep = run_census(
        store,
        name,
        n_sites,
        [VantageSpec("scale")],
        lab=True,
        concurrency=k,
        truth=lab_truth(STATE_DIR),
        campaign_name=f"scale-k{k}",
        # Every run's scratch is kept (and removed below, after the CPU is read) so the timing
        # counts every shell that ran: a run that left no trace (a failed connection, a requeued
        # measurement's first attempt) stores no link stats, and its shells would go uncounted.
        worker_overrides={
            "min_gap_seconds": 0.0,
            "concurrent_profiles": True,
            "out_root": work / "scratch",
            "keep_files": True,
        },
        progress=False,
    )
    # The census's CPU, read as soon as it ends: what follows (this bench's own figures) is not
    # the measuring side's. Every shell has been waited for, so RUSAGE_CHILDREN holds them all.
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    rc1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The stages too, before this bench reads the store back for its own figures below (those
    # reads are not the census's).
    probed = (cpuprobe.snapshot(), cpuprobe.store_methods()) if args.probe else None
    # Each CPU's busy time over the same span (bench/scale/split.py pins the census to one)
    per_cpu = {str(c): v for c, v in busy_between(pc0, cpu_busy_by_cpu()).items()}
    directions = _shell_lateness(work / "scratch")
    late = [x["p99_ms"] for x in directions]
    shutil.rmtree(work / "scratch", ignore_errors=True)
    late_stored: list[float] = []
    durations: list[float] = []
    trace_bytes: list[int] = []
    wire_bytes: list[int] = []  # both directions through every profile's bottleneck
    gz_ratio: list[float] = []
    evidence_bytes: list[int] = []  # the verdict's evidence document, as stored (JSON)
    for r in rep.results:
        stored = store.get_measurement(r.measurement_id).traces
        trace_bytes.append(sum(t.size for t in stored))
        wire = 0
        for t in stored:
            raw = store.read_trace(t.sha256)
            gz_ratio.append(len(raw) / max(1, len(gzip.compress(raw, 6))))
            tr = Trace.from_dict(json.loads(raw))
            durations.append(tr.duration)
            stats = tr.extra.get("link_stats") or {}
            wire += sum(int((stats.get(d) or {}).get("bytes_in") or 0) for d in ("up", "down"))
            late_stored += [float(lat["p99"]) / 1000 for d in ("up", "down") if (lat := _lateness(stats, d))]
        wire_bytes.append(wire)
        v = store.get_verdict(r.measurement_id)
        if v is not None:
            evidence_bytes.append(len(json.dumps(v.evidence, default=str)))
    acc = rep.to_dict()["scores"].get("all")
    cpu: dict[str, Any] = {
        "process_start_s": round(ru0.ru_utime + ru0.ru_stime, 3),
        "process_s": round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 3),
        "children_s": round(rc1.ru_utime + rc1.ru_stime - rc0.ru_utime - rc0.ru_stime, 3),
        **_child_cpu(store, [r.measurement_id for r in rep.results]),
    }
    if probed is not None:
        cpu["stages"], cpu["store_methods"] = probed
    print(
        json.dumps(
            {
                "cpu": cpu,
                "per_cpu": per_cpu,
                "concurrency": k,
                "sites": n_sites,
                "measurements": len(rep.results),
                "classified": sum(r.state == "classified" for r in rep.results),
                "seconds": round(rep.seconds, 1),
                "download_s_median": round(statistics.median(durations), 1) if durations else None,
                "lateness_p99_ms_max": round(max(late), 3) if late else None,
                "lateness_p99_ms_median": round(statistics.median(late), 3) if late else None,
                "shell_directions_over_1ms": sum(x >= 1.0 for x in late),
                "shell_directions": len(late),
                # The emulator's packets pooled over every shell: the share released 1 ms late
                # or more (the pooled p99 is under 1 ms while it is under 1 %), and the
                # directions over 1 ms among those with 100 packets or more, where a p99 is a
                # percentile; below 100 packets a direction's p99 is its single latest packet.
                "late_1ms_packet_share": _late_share(directions),
                "shell_directions_over_1ms_of_100_packets": sum(
                    x["p99_ms"] >= 1.0 for x in directions if x["packets"] >= 100
                ),
                # The directions whose measurement stored a trace (this count alone until
                # 2026-11-29: it missed the shells of runs that left no trace).
                "shell_directions_stored": len(late_stored),
                # The directions over 1 ms, each named by its measurement, profile and direction.
                "shell_directions_late": [
                    {k2: v for k2, v in x.items() if k2 != "late_marks"}
                    for x in directions
                    if x["p99_ms"] >= 1.0
                ],
                # every late packet a shell remembered (at most 32 each), for the parent to set
                # beside the hypervisor's steal (stealwatch.py)
                "late_marks": [[*m[:2], x["run"]] for x in directions for m in x["late_marks"]],
                "shell_directions_over_1ms_stored": sum(x >= 1.0 for x in late_stored),
                "wire_bytes_per_measurement_median": int(statistics.median(wire_bytes))
                if wire_bytes
                else None,
                "trace_bytes_per_measurement_median": int(statistics.median(trace_bytes))
                if trace_bytes
                else None,
                "trace_gzip_ratio_median": round(statistics.median(gz_ratio), 2) if gz_ratio else None,
                "verdict_evidence_bytes_median": int(statistics.median(evidence_bytes))
                if evidence_bytes
                else None,
                "accuracy": acc,
                # Which sites were not named right, and what they were named: a change in the
                # count between runs is then a change one can look at.
                "misses": [
                    {"domain": r.domain, "truth": r.truth, "verdict": r.display, "outcome": r.outcome}
                    for r in rep.results
                    if r.outcome != "correct"
                ],
                # Adaptive stopping's checks: granted in turn, how long they waited for a slot.
                "checks": measure.CHECKS.stats(),
            }
        )
    )
    store.close()
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _child_cpu(store: Any, ids: list[int]) -> dict[str, float]:
    """CPU the measurements' own processes report in their stored traces: every shell's
    emulator (its stats file: getrusage of ccscope-link, set-up included, teardown not) and
    every download client (its report's cpu_s, interpreter start-up included)."""
    from ccscope.trace import Trace

    link = client = 0.0
    shells = clients = 0
    for mid in ids:
        for t in store.get_measurement(mid).traces:
            if t.media_type != "application/json":
                continue
            extra = Trace.from_bytes(store.read_trace(t.sha256)).extra
            c = ((extra.get("link_stats") or {}).get("cpu")) or {}
            if c:
                link += (int(c.get("user_us") or 0) + int(c.get("sys_us") or 0)) / 1e6
                shells += 1
            f = (extra.get("fetch") or {}).get("cpu_s")
            if f is not None:
                client += float(f)
                clients += 1
    return {"link_s": round(link, 3), "shells": shells, "client_s": round(client, 3), "clients": clients}


def _pg_cpu_s(pg: Any) -> float:
    """CPU seconds so far of a PostgreSQL cluster: the postmaster with its reaped backends, and
    the backends still running."""
    try:
        pid = int((Path(pg.data) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p, _name, f in proc_stats():
        if p == pid:
            total += sum(int(x) for x in f[11:15]) / tick
        elif int(f[1]) == pid:
            total += (int(f[11]) + int(f[12])) / tick
    return total


def _lab_cpu_s() -> float:
    """CPU seconds so far of the lab's processes (its shell and servers: the lab's pgid)."""
    st = json.loads((Path(STATE_DIR) / "state.json").read_text())
    pgid = int(st.get("pgid") or st.get("pid"))
    tick = os.sysconf("SC_CLK_TCK")
    return sum(sum(int(x) for x in f[11:15]) for _, _, f in proc_stats() if int(f[2]) == pgid) / tick


def _census_run(
    k: int, args: argparse.Namespace, *, probe: bool = False, store_url: str | None = None,
    sites: int | None = None, cpus: set[int] | None = None, env: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One census of `sites` sites (default K), K at a time, in a child process; its figures,
    with the CPU of the child's whole process tree from wait4 (less the child's own start-up,
    a worker's one-off). With `cpus`, the child and everything it starts run on those CPUs;
    `env` is added to its environment (CCSCOPE_* settings)."""
    lab_cpu0 = _lab_cpu_s()
    host0 = cpu_times()
    t0 = time.monotonic()
    argv = [sys.executable, str(RUN_PY), "--census-child", str(k), "--work-dir", args.work_dir]
    if probe:
        argv.append("--probe")
    if store_url:
        argv += ["--store-url", store_url]
    if sites:
        argv += ["--census-sites", str(sites)]
    if args.check_slots:
        argv += ["--check-slots", str(args.check_slots)]
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    child_env = {**os.environ, **env} if env else None
    with StealWatch() as watch:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, preexec_fn=pin, env=child_env)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    lab_cpu = _lab_cpu_s() - lab_cpu0
    # The hypervisor's share of the run (capture/host.py): its ~100 ms vCPU freezes, not the
    # emulator, are what a lateness p99 in the tens of ms on this VM is made of.
    host = steal_between(host0, cpu_times())
    if status != 0:
        raise SystemExit(f"census child for K={k} failed (status {status})")
    row: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    # Which late packets a hypervisor freeze explains: set beside the steal spans, then dropped
    # (a large run remembers thousands).
    row["late_vs_steal"] = attribute(row.pop("late_marks", []), watch.spans, t0, 1 / watch.tick)
    tree = ru.ru_utime + ru.ru_stime
    # The measuring side: the census process while the census ran, and every process it waited
    # for (shells, clients, their helpers); wait4's whole tree (with this bench's own figures
    # and the child's start-up) is kept beside it as a check.
    cpu = row["cpu"]["process_s"] + row["cpu"]["children_s"]
    row["cpu"]["tree_s"] = round(tree, 3)
    row.update(
        {
            "store": "postgresql" if store_url else "sqlite",
            "wall_s": round(wall, 1),
            "measuring_side_cpu_s": round(cpu, 1),
            "cpu_s_per_measurement_measuring_side": round(cpu / max(1, row["measurements"]), 2),
            "lab_servers_cpu_s": round(lab_cpu, 1),
            "sites_per_hour": round(row["measurements"] * 3600 / row["seconds"], 1),
            "p99_under_1ms": _timing_kept(row),
            # the stricter reading, every direction's p99 whatever its size (the only one
            # before 2026-11-29)
            "p99_under_1ms_every_direction": (row["lateness_p99_ms_max"] or 0) < 1.0,
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "host_steal": host,
        }
    )
    return row
