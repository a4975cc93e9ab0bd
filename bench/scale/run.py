#!/usr/bin/env python3
"""Scale: profiles at the same time, measurements per worker, and what one costs in CPU.

Three parts, each writing its own keys of bench/results/scale.json (the other keys are kept, so
the compose test and the adaptive-stopping study can add theirs):

* `profiles`: do profiles A and B disturb each other when measured at the same time? The same
  lab sites are measured with the profiles one after another and side by side (rounds
  alternate the order), and each profile's BiF error against the server's TCP_INFO, its shape
  figures and the verdict are compared. The lab path has no shared bottleneck (each profile
  has its own shell and 200 kbit/s link; the lab's Internet path has no rate limit).
* `sweep`: one worker (the census pipeline: store, crawler, embedded pool of K, classifier) runs
  K measurements at once, profiles concurrent, for each K; the emulator's lateness p99 over
  every shell tells where timing breaks on this 2-core VM with the lab's servers on the same
  cores. The measuring side runs in a child process, so its CPU time (itself and every process
  it waited for: shells, download clients; capture -> trace and classification run in it)
  comes from wait4's rusage, apart from the lab's servers (in the parent's lab process group).
* `projection`: sites per hour for a 2-core host that only measures, derived from the sweep's
  CPU seconds per measurement (the derivation is written into the JSON).
* `ttv`: time to verdict, live: every zoo CCA's lab site measured the way workers measure
  (profiles side by side, adaptive stopping with the default rule or --rule, the crawler's
  least object size, 420 KB, and the workers' 60 s cap); the wall time from the start of the
  measurement to the verdict on its stored traces, p50 and p90.
* `stopping`: recall with adaptive stopping beside full length, on the reference set's unseen
  draws (the robustness bench's headline set): `classifier.stopping.simulate` replays each
  measurement's recorded traces cut at every check (what a live run would have read then),
  so both recalls come from the same transfers.

usage: python bench/scale/run.py --out bench/results/scale.json [--part profiles|sweep|ttv|stopping|all]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gzip
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.workers.kit import proc_stats  # noqa: E402  (the benches share the tests' process kit)

INSTANCE = 70  # lab instances 70-79 belong to this bench and the chaos bench
STATE_DIR = "/run/ccscope/lab-bench-scale"
PROFILE_CCAS = ("reno", "cubic", "bbr", "htcp")
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
LEAD_KEYS = ("time_to_verdict_s_p50", "time_to_verdict_s_p90", "recall_adaptive", "recall_full")
# The zoo's lab sites: the kernel's CCAs and the BPF zoo's, one site each (every trained class).
TTV_CCAS = (
    "reno", "cubic", "bbr", "bbr2", "bbr3", "dctcp", "bic", "highspeed", "htcp", "hybla", "illinois",
    "lp", "nv", "scalable", "vegas", "veno", "westwood", "yeah", "cdg",
)  # fmt: skip


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def host() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "kernel": platform.release(),
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def _lab_up(
    ccas: tuple[str, ...],
    sites: tuple[tuple[str, str], ...] = (),
    large: int = 420_000,
    sample_ms: float = 1.0,
) -> Any:
    from ccscope.lab import ccas as zoo
    from ccscope.lab.lab import Lab, LabParams

    zoo.ensure_loaded([c for c in ccas if c not in zoo.kernel_available()])
    os.environ["CCSCOPE_LAB"] = "1"
    os.environ["CCSCOPE_LAB_DIR"] = STATE_DIR
    lab = Lab(STATE_DIR)
    lab.up(
        LabParams(
            ccas=ccas,
            delay_ms=10.0,
            sites=sites,
            large_bytes=large,
            instance=INSTANCE,
            sample_interval_ms=sample_ms,
        )
    )
    return lab


# ---- part 1: profiles side by side ------------------------------------------------------------


def _one_site(cca: str, size: int, concurrent: bool, work: Path) -> dict[str, Any]:
    from ccscope.capture.measure import bif_errors, measure
    from ccscope.classifier import classify
    from ccscope.trace import Trace

    url = f"https://{cca}.lab.test/obj/{size}"
    out = work / f"{cca}-{'conc' if concurrent else 'seq'}-{time.monotonic_ns()}"
    t0 = time.monotonic()
    m = measure(url, ("A", "B"), out, lab=True, timeout=120, concurrent=concurrent)
    wall = time.monotonic() - t0
    row: dict[str, Any] = {
        "cca": cca,
        "mode": "concurrent" if concurrent else "sequential",
        "wall_s": round(wall, 2),
    }
    traces = []
    for r in m.runs:
        cap, snd, strict = bif_errors(r.groundtruth)
        row[r.profile] = {
            "ok": r.ok,
            "error": r.error,
            "duration_s": r.duration_s,
            "bytes": r.bytes,
            "max_bif": r.max_bif,
            "retransmits": r.retransmits,
            "base_rtt_ms": r.base_rtt_ms,
            "bif_err_pct_bdp_sender_resolved": snd,
            "bif_err_pct_bdp_sender_strict": strict,
            "bif_err_pct_bdp_capture_resolved": cap,
        }
        if r.sender_trace_file:
            traces.append(Trace.load(Path(r.sender_trace_file)))
    try:
        v = classify(traces)
        row["verdict"] = {
            "label": v.label,
            "kind": v.kind,
            "confidence": round(v.confidence, 3),
            "display": v.display,
        }
    except Exception as e:  # a failed download leaves too little to classify: record why
        row["verdict"] = {"label": None, "kind": "error", "display": str(e)[:200]}
    shutil.rmtree(out, ignore_errors=True)
    return row


def part_profiles(args: argparse.Namespace) -> dict[str, Any]:
    from ccscope.classifier.dataset import label_of

    lab = _lab_up(PROFILE_CCAS)
    work = Path(args.work_dir) / "profiles"
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for rnd in range(args.rounds):
            order = (False, True) if rnd % 2 == 0 else (True, False)
            for conc in order:
                log(f"profiles: round {rnd + 1}/{args.rounds}, {'concurrent' if conc else 'sequential'} ...")
                # Different sites never share anything on the lab path; they run side by side.
                with ThreadPoolExecutor(len(PROFILE_CCAS)) as pool:
                    got = list(
                        pool.map(lambda c, conc=conc: _one_site(c, args.size, conc, work), PROFILE_CCAS)
                    )
                for g in got:
                    g["round"] = rnd
                rows += got
    finally:
        lab.down()

    def agg(mode: str, prof: str, key: str) -> float | None:
        xs = [r[prof][key] for r in rows if r["mode"] == mode and prof in r and r[prof].get(key) is not None]
        return round(statistics.mean(xs), 3) if xs else None

    summary: dict[str, Any] = {}
    for mode in ("sequential", "concurrent"):
        mine = [r for r in rows if r["mode"] == mode]
        summary[mode] = {
            "measurements": len(mine),
            "wall_s_mean": round(statistics.mean(r["wall_s"] for r in mine), 2),
            "verdicts_right": sum(r["verdict"].get("label") == label_of(r["cca"]) for r in mine),
            **{
                f"{p}_{k}_mean": agg(mode, p, k)
                for p in ("A", "B")
                for k in (
                    "bif_err_pct_bdp_sender_strict",
                    "bif_err_pct_bdp_sender_resolved",
                    "duration_s",
                    "retransmits",
                    "max_bif",
                )
            },
        }
    # Like for like: per (cca, round) pair, the concurrent figure minus the sequential one.
    diffs: dict[str, list[float]] = {}
    for r in rows:
        if r["mode"] != "concurrent":
            continue
        s = next(
            (
                x
                for x in rows
                if x["mode"] == "sequential" and x["cca"] == r["cca"] and x["round"] == r["round"]
            ),
            None,
        )
        if s is None:
            continue
        for p in ("A", "B"):
            for k in ("bif_err_pct_bdp_sender_strict", "duration_s", "max_bif", "retransmits"):
                a, b = r.get(p, {}).get(k), s.get(p, {}).get(k)
                if a is not None and b is not None:
                    diffs.setdefault(f"{p}_{k}", []).append(a - b)
    same_verdict = sum(
        1
        for r in rows
        if r["mode"] == "concurrent"
        for s in rows
        if s["mode"] == "sequential"
        and s["cca"] == r["cca"]
        and s["round"] == r["round"]
        and s["verdict"].get("display") == r["verdict"].get("display")
    )
    return {
        "profiles_concurrent": {
            "object_bytes": args.size,
            "ccas": list(PROFILE_CCAS),
            "rounds": args.rounds,
            "summary": summary,
            "paired_difference_concurrent_minus_sequential_mean": {
                k: round(statistics.mean(v), 3) for k, v in diffs.items()
            },
            "paired_difference_abs_max": {k: round(max(abs(x) for x in v), 3) for k, v in diffs.items()},
            "same_verdict_pairs": same_verdict,
            "pairs": sum(r["mode"] == "concurrent" for r in rows),
            "runs": rows,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "host": host(),
        }
    }


# ---- part 2: the concurrency sweep -----------------------------------------------------------


def _census_child(args: argparse.Namespace) -> int:
    """In a child process: one census of the first K sites from one vantage point, and its
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
    sites = [f"s{i:03d}.lab.test" for i in range(k)]
    store = Store(args.store_url or f"sqlite:///{work}/census.db", f"{work}/traces")
    store.migrate()
    name, _ = import_list_file(store, write_list(work / f"scale_{dt.date.today().isoformat()}.csv", sites))
    # This process's start-up (interpreter, imports, store, lab truth, the classifier's model,
    # which a worker loads once) is a worker's one-off, not a measurement's: its CPU so far is
    # reported apart.
    from ccscope.classifier.core import _load_model

    _load_model(None)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    rc0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rep = run_census(
        store,
        name,
        k,
        [VantageSpec("scale")],
        lab=True,
        concurrency=k,
        truth=lab_truth(STATE_DIR),
        campaign_name=f"scale-k{k}",
        worker_overrides={"min_gap_seconds": 0.0, "concurrent_profiles": True},
        progress=False,
    )
    # The census's CPU, read as soon as it ends: what follows (this bench's own figures) is not
    # the measuring side's. Every shell has been waited for, so RUSAGE_CHILDREN holds them all.
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    rc1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    late: list[float] = []
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
            for d in ("up", "down"):
                p99 = ((stats.get(d) or {}).get("lateness_us") or {}).get("p99")
                if p99 is not None:
                    late.append(float(p99) / 1000)
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
    if args.probe:
        cpu["stages"] = cpuprobe.snapshot()
    print(
        json.dumps(
            {
                "cpu": cpu,
                "concurrency": k,
                "measurements": len(rep.results),
                "classified": sum(r.state == "classified" for r in rep.results),
                "seconds": round(rep.seconds, 1),
                "download_s_median": round(statistics.median(durations), 1) if durations else None,
                "lateness_p99_ms_max": round(max(late), 3) if late else None,
                "lateness_p99_ms_median": round(statistics.median(late), 3) if late else None,
                "shell_directions_over_1ms": sum(x >= 1.0 for x in late),
                "shell_directions": len(late),
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
    k: int, args: argparse.Namespace, *, probe: bool = False, store_url: str | None = None
) -> dict[str, Any]:
    """One census of K sites at once in a child process; its figures, with the CPU of the
    child's whole process tree from wait4 (less the child's own start-up, a worker's one-off)."""
    lab_cpu0 = _lab_cpu_s()
    t0 = time.monotonic()
    argv = [sys.executable, __file__, "--census-child", str(k), "--work-dir", args.work_dir]
    if probe:
        argv.append("--probe")
    if store_url:
        argv += ["--store-url", store_url]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    lab_cpu = _lab_cpu_s() - lab_cpu0
    if status != 0:
        raise SystemExit(f"census child for K={k} failed (status {status})")
    row: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
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
            "p99_under_1ms": (row["lateness_p99_ms_max"] or 0) < 1.0,
            "load_after": [round(x, 2) for x in os.getloadavg()],
        }
    )
    return row


# The embedded census store is SQLite up to this K; from it on, PostgreSQL (SQLite's single
# writer gave 'database is locked' on heartbeats at K = 32 under load).
PG_FROM_K = 32


def part_sweep(args: argparse.Namespace) -> dict[str, Any]:
    from ccscope.store.pgcluster import running_cluster

    ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
    sites = tuple((f"s{i:03d}.lab.test", MIX[i % len(MIX)]) for i in range(max(ks)))
    lab = _lab_up(tuple(dict.fromkeys(c for _, c in sites)), sites, sample_ms=args.lab_sample_ms)
    rows = []
    try:
        with contextlib.ExitStack() as stack:
            pg = None
            if max(ks) >= args.pg_from:
                # K workers' threads each hold a connection at times: room for all of them.
                pg = stack.enter_context(running_cluster(("max_connections=400",)))
            for k in ks:
                log(f"sweep: K={k} measurements at once (profiles concurrent) ...")
                url = pg.new_database() if pg is not None and k >= args.pg_from else None
                pg0 = _pg_cpu_s(pg) if url else 0.0
                row = _census_run(k, args, probe=True, store_url=url)
                row["lab_sample_interval_ms"] = args.lab_sample_ms
                if url:
                    row["store_server_cpu_s"] = round(_pg_cpu_s(pg) - pg0, 1)
                row["cpu_breakdown"] = {
                    k2: v
                    for k2, v in breakdown(row).items()
                    if k2 in ("cpu_s_per_measurement", "parts_cpu_s")
                }
                rows.append(row)
                log(json.dumps(row))
    finally:
        lab.down()
    return {"sweep": rows}


def breakdown(row: dict[str, Any]) -> dict[str, Any]:
    """CPU seconds per measurement by where they go, from a probed census run's row: the
    census process's stages (thread CPU, exclusive of nested stages), the rest of that process,
    each shell's emulator, each download client, and the helpers the emulators run (ip, nft:
    the children's CPU beyond the emulators' and clients' own accounts)."""
    import cpuprobe

    c = row["cpu"]
    n = max(1, row["measurements"])
    stages = cpuprobe.group(c.get("stages") or {})
    per = {k: v / n for k, v in stages.items()}
    per["census_process_other"] = (c["process_s"] - sum(stages.values())) / n
    per["shells_ccscope_link"] = c["link_s"] / n
    per["download_clients"] = c["client_s"] / n
    per["shell_helpers_ip_nft"] = (c["children_s"] - c["link_s"] - c["client_s"]) / n
    total = (c["process_s"] + c["children_s"]) / n
    return {
        "cpu_s_per_measurement": round(total, 3),
        "parts_cpu_s": {k: round(v, 3) for k, v in sorted(per.items(), key=lambda kv: -kv[1])},
        "parts_share": {k: round(v / total, 3) for k, v in sorted(per.items(), key=lambda kv: -kv[1])}
        if total > 0
        else {},
        "measurements": row["measurements"],
        "concurrency": row["concurrency"],
        "shells": c["shells"],
        "clients": c["clients"],
        "census_process_start_s": c["process_start_s"],
        "stages": c.get("stages"),
        "download_s_median": row["download_s_median"],
        "checks_per_measurement": round(
            ((c.get("stages") or {}).get("check_classify") or {}).get("calls", 0) / n, 2
        ),
    }


def part_cpu(args: argparse.Namespace) -> dict[str, Any]:
    """The measuring side's CPU per measurement, by stage: a census of K sites with every stage
    timed (bench/scale/cpuprobe.py). CPU seconds from rusage are fair on a busy machine (wall
    times are not): the load average is recorded beside them."""
    k = args.cpu_k
    sites = tuple((f"s{i:03d}.lab.test", MIX[i % len(MIX)]) for i in range(k))
    lab = _lab_up(tuple(dict.fromkeys(c for _, c in sites)), sites, sample_ms=args.lab_sample_ms)
    try:
        load0 = [round(x, 2) for x in os.getloadavg()]
        row = _census_run(k, args, probe=True)
    finally:
        lab.down()
    out = breakdown(row)
    out.update(
        {
            "how": "one census of K lab sites at once (profiles side by side, adaptive stopping, "
            "the workers' pipeline, SQLite store) with every stage of the census process timed "
            "by its thread CPU (bench/scale/cpuprobe.py); shells from their stats files, "
            "clients from their reports, ip/nft helpers as the rest of wait4's children. "
            "Per measurement; the census process's own start-up is apart (a worker's one-off)",
            "accuracy": row["accuracy"],
            "lab_sample_interval_ms": args.lab_sample_ms,
            "lab_servers_cpu_s_per_measurement": round(
                row["lab_servers_cpu_s"] / max(1, row["measurements"]), 3
            ),
            "load_before": load0,
            "load_after": row["load_after"],
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "commit": _commit(),
        }
    )
    return out


def _commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def unstarved(doc: dict[str, Any], cores: int = 2, headroom: float = 0.7) -> dict[str, Any] | None:
    """The projection again from `--part cpu`'s figure (a few sites at once, the lab servers
    with CPU to spare), beside the sweep's: on this VM the sweep's lab servers share the cores,
    fall behind, and their slower, distorted downloads settle later, so every measurement
    downloads, checks and emulates longer. A host that only measures has no servers to starve;
    which of the two it meets depends on how its targets answer."""
    cb = doc.get("cpu_breakdown")
    if not cb or not cb.get("cpu_s_per_measurement"):
        return None
    cpu = cb["cpu_s_per_measurement"]
    return {
        "cpu_s_per_measurement": cpu,
        "sites_per_hour": round(cores * headroom * 3600 / cpu),
        "from": f"cpu_breakdown: K = {cb.get('concurrency')}, downloads {cb.get('download_s_median')} s "
        f"median, load {cb.get('load_before')} -> {cb.get('load_after')}",
        "why_not_the_headline": "a few sites at once (the lab servers not starved), not a sweep: the "
        "headline keeps the sweep's figure, the conservative one",
    }


def projection(sweep: list[dict[str, Any]], cores: int = 2, headroom: float = 0.7) -> dict[str, Any]:
    passing = [r for r in sweep if r["p99_under_1ms"]]
    best = max(passing or sweep, key=lambda r: r["sites_per_hour"])
    # CPU per measurement: the median over the K run, so one noisy K does not decide it.
    cpu = statistics.median(r["cpu_s_per_measurement_measuring_side"] for r in sweep)
    per_site_wall = statistics.median(r["seconds"] for r in sweep)  # one batch: every site at once
    cpu_bound = cores * headroom * 3600 / cpu
    return {
        "max_concurrency_p99_under_1ms": max((r["concurrency"] for r in passing), default=None),
        "cpu_s_per_measurement_measuring_side": round(cpu, 2),
        "sites_per_hour_measured": best["sites_per_hour"],
        "sites_per_hour_measured_at_k": best["concurrency"],
        "sites_per_hour_projected": round(cpu_bound),
        "projection_derivation": {
            "formula": "cores x headroom x 3600 s / cpu_s_per_measurement_measuring_side",
            "cores": cores,
            "headroom": headroom,
            "headroom_why": "the emulator's loop needs idle CPU to wake on time; the sweep shows where "
            "lateness breaks as load rises, so the projection keeps 30 % spare",
            "cpu_s_per_measurement_measuring_side": round(cpu, 2),
            "cpu_s_source": "rusage of the child running the census while it ran (RUSAGE_SELF: "
            "capture -> trace, adaptive stopping's checks, classification, crawl, store client) "
            "plus every process it waited for (RUSAGE_CHILDREN: shells, download clients, the "
            "shells' ip/nft helpers), divided by its measurements; the child's start-up (a "
            "worker's one-off: imports, the model) and the bench's own figures are outside it, "
            "and so are the lab servers and PostgreSQL (the store's host in a deployment; its "
            "CPU is in the sweep rows as store_server_cpu_s). Kernel TCP work done in softirq is "
            "charged to whichever process was running, so a share of the servers' sending may "
            "land on either side. Per stage: each row's cpu_breakdown",
            "concurrency_needed": round(cpu_bound * per_site_wall / 3600),
            "concurrency_needed_why": "sites per hour x seconds per measurement / 3600 (Little's law): "
            "measurements open at once to reach the projection, with the measured seconds per batch",
            "seconds_per_measurement_measured": per_site_wall,
        },
    }


# ---- part 4: time to verdict, live -------------------------------------------------------------


def _model(path: str | None) -> Any:
    from ccscope.classifier.model import Model

    return Model.load(Path(path) if path else None)


def _rule(args: argparse.Namespace) -> Any:
    """The default StoppingRule, with --rule's overrides (e.g. 'stable=4,min_p=0')."""
    from ccscope.classifier.stopping import StoppingRule

    kw: dict[str, Any] = {}
    for item in filter(None, (args.rule or "").split(",")):
        k, _, v = item.partition("=")
        kw[k.strip()] = int(v) if k.strip() == "stable" else float(v)
    return StoppingRule(**kw)


def _ttv_one(cca: str, args: argparse.Namespace, model: Any, work: Path) -> dict[str, Any]:
    from ccscope.capture.measure import measure
    from ccscope.classifier import classify
    from ccscope.classifier.dataset import label_of
    from ccscope.trace import Trace

    def cls(traces: Any) -> Any:
        return classify(traces, model)

    out = work / f"{cca}-{time.monotonic_ns()}"
    t0 = time.monotonic()
    m = measure(
        f"https://{cca}.lab.test/obj/{args.ttv_bytes}",
        ("A", "B"),
        out,
        lab=True,
        timeout=args.ttv_cap,
        stopping=_rule(args),
        classify=cls,
    )
    traces = [Trace.load(Path(r.sender_trace_file)) for r in m.runs if r.sender_trace_file]
    try:
        v = cls(traces)
        verdict = {"display": v.display, "label": v.label if v.kind == "cca" else v.kind}
    except Exception as e:  # a failed download leaves nothing to classify: record why
        verdict = {"display": f"error: {e}"[:200], "label": "error"}
    ttv = time.monotonic() - t0
    st = m.stopping or {}
    shutil.rmtree(out, ignore_errors=True)
    return {
        "cca": cca,
        "label": label_of(cca),
        "time_to_verdict_s": round(ttv, 2),
        "settled": bool(st.get("settled")),
        "stopped_at_s": st.get("stopped_at_s"),
        "checks": len(st.get("checks") or []),
        "verdict_at_stop": st.get("verdict"),
        "verdict": verdict["display"],
        "right": verdict["label"] == label_of(cca),
        "bytes": {r.profile: r.bytes for r in m.runs},
        "errors": {r.profile: r.error for r in m.runs if r.error},
    }


def part_ttv(args: argparse.Namespace) -> dict[str, Any]:
    model = _model(args.model)
    ccas = tuple(c for c in TTV_CCAS if args.ttv_ccas is None or c in args.ttv_ccas.split(","))
    lab = _lab_up(ccas)
    work = Path(args.work_dir) / "ttv"
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for rnd in range(args.ttv_rounds):
            log(f"ttv: round {rnd + 1}/{args.ttv_rounds}, {len(ccas)} sites, {args.ttv_parallel} at once")
            with ThreadPoolExecutor(args.ttv_parallel) as pool:
                for row in pool.map(lambda c: _ttv_one(c, args, model, work), ccas):
                    row["round"] = rnd
                    rows.append(row)
                    log(
                        json.dumps(
                            {k: row[k] for k in ("cca", "time_to_verdict_s", "stopped_at_s", "verdict")}
                        )
                    )
    finally:
        lab.down()
    ttv = sorted(r["time_to_verdict_s"] for r in rows)

    def pct(q: float) -> float:
        # numpy's default (linear) percentile: p90 of 19 values lies between the 17th and 18th
        import numpy as np

        return round(float(np.percentile(ttv, q)), 1)

    return {
        "time_to_verdict_s_p50": pct(50),
        "time_to_verdict_s_p90": pct(90),
        "time_to_verdict": {
            "how": "wall seconds from the start of a measurement (profiles A and B side by side, "
            "adaptive stopping with `rule`) to the verdict on its stored traces; one "
            "site per zoo CCA on the lab (10 ms one way), object "
            f"{args.ttv_bytes} B, cap {args.ttv_cap:g} s as the workers'; {args.ttv_parallel} "
            "measurements at a time",
            "model": model.version,
            "rule": {k: getattr(_rule(args), k) for k in ("every_s", "min_s", "stable", "min_p")},
            "measurements": len(rows),
            "settled": sum(r["settled"] for r in rows),
            "time_to_verdict_s_max": ttv[-1] if ttv else None,
            "verdicts_right": sum(r["right"] for r in rows),
            "runs": rows,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "host": host(),
        },
    }


# ---- part 5: recall with adaptive stopping, replayed ------------------------------------------


def _replay(traces: list[Any], cls: Any, every_s: float) -> list[tuple[float, Any]]:
    """Every check a live run would make on these traces: (seconds held, verdict), as
    classifier.stopping.simulate cuts them (at every_s, 2 every_s, ... below the full length)."""
    end = min(t.duration for t in traces) if traces else 0.0
    out = []
    t = every_s
    while t < end:
        out.append((t, cls([tr.head(t) for tr in traces])))
        t += every_s
    return out


def _apply(rule: Any, checks: list[tuple[float, Any]], full: Any, full_s: float) -> tuple[Any, float, bool]:
    """The verdict `rule` ends with on recorded checks (simulate's logic, without re-classifying):
    where it settles, else the full traces' verdict at full length."""
    history: list[Any] = []
    for t, v in checks:
        history.append(v)
        if rule.settled(history, t):
            return v, t, True
    return full, full_s, False


def part_stopping(args: argparse.Namespace) -> dict[str, Any]:
    from ccscope.classifier import classify
    from ccscope.classifier.stopping import MIN_P_WHY, StoppingRule
    from ccscope.classifier.train import load_samples, score
    from ccscope.trace import Trace

    model = _model(args.model)
    rule = _rule(args)
    samples, _ = load_samples(Path(args.root))
    unseen = [s for s in samples if s.set == "unseen" and s.transport == "tcp" and s.paths]
    if not unseen:
        raise SystemExit(f"no unseen draws under {args.root}")

    def cls(traces: Any) -> Any:
        return classify(traces, model)

    def pred(v: Any) -> str:
        return v.label if v.kind == "cca" else ("unknown" if v.kind == "unknown" else "insufficient")

    recorded = []  # per measurement: its checks, its full verdict and length
    for i, s in enumerate(unseen):
        traces = [Trace.load(Path(p)) for p in s.paths]
        full_s = min(t.duration for t in traces)
        recorded.append((s, _replay(traces, cls, rule.every_s), cls(traces), full_s))
        if (i + 1) % 20 == 0:
            log(f"stopping: {i + 1}/{len(unseen)} replayed")

    def evaluate(r: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        rows, stops = [], []
        for s, checks, full, full_s in recorded:
            v, at, settled = _apply(r, checks, full, full_s)
            p = pred(v)
            rows.append({"key": s.key, "label": s.label, "variant": s.variant, "pred": p, "top1": p,
                         "top1_naive_bayes": p})  # fmt: skip
            stops.append({"key": s.key, "label": s.label, "full": full.display, "adaptive": v.display,
                          "settled": settled, "at_s": round(at, 1), "full_s": round(full_s, 1)})  # fmt: skip
        return score(rows, model.classes), stops

    full_rows = [
        {"key": s.key, "label": s.label, "variant": s.variant, "pred": pred(f), "top1": pred(f),
         "top1_naive_bayes": pred(f)}
        for s, _c, f, _s in recorded
    ]  # fmt: skip
    sf = score(full_rows, model.classes)
    sa, stops = evaluate(rule)
    settled = [x for x in stops if x["settled"]]
    # The same recorded checks under neighbouring rules: what each threshold buys and costs.
    grid = []
    for min_s in (10.0, 14.0):
        for stable in (3, 4, 5):
            for min_p in (0.0, 0.3, 0.5, 0.7):
                r = StoppingRule(every_s=rule.every_s, min_s=min_s, stable=stable, min_p=min_p)
                g, st = evaluate(r)
                ats = sorted(x["at_s"] for x in st)
                grid.append(
                    {
                        "min_s": min_s,
                        "stable": stable,
                        "min_p": min_p,
                        "recall": g["mean_recall"],
                        "settled_share": round(sum(x["settled"] for x in st) / len(st), 3),
                        "verdict_changed_by_stopping": sum(x["full"] != x["adaptive"] for x in st),
                        "trace_s_p50": round(statistics.median(ats), 1),
                        "trace_s_p90": round(ats[int(0.9 * (len(ats) - 1))], 1),
                    }
                )
    return {
        "recall_full": sf["mean_recall"],
        "recall_adaptive": sa["mean_recall"],
        "stopping_replay": {
            "how": "the reference set's unseen draws (TCP; the robustness bench's headline set), "
            "each measurement's recorded sender-aligned traces cut at every check (every_s, "
            "2 every_s, ... as classifier.stopping.simulate does) and classified; recall_adaptive "
            "is the mean per-class recall of the verdicts where the default rule stopped (else "
            "the full-length verdict), recall_full that of the full traces. A replay of recorded "
            "downloads, not live ones (their length is the collection's cap, ~25 s): the live "
            "time to verdict is part ttv. `grid`: the same checks under neighbouring rules "
            "(trace_s: seconds of trace each verdict read, the full length where not settled)",
            "rule": {k: getattr(rule, k) for k in ("every_s", "min_s", "stable", "min_p")},
            "min_p_why": MIN_P_WHY,
            "model": model.version,
            "measurements": len(stops),
            "recall_full_ci": sf["mean_recall_ci"],
            "recall_adaptive_ci": sa["mean_recall_ci"],
            "settled": len(settled),
            "verdict_changed_by_stopping": sum(x["full"] != x["adaptive"] for x in stops),
            "stopped_at_s_p50": round(statistics.median(x["at_s"] for x in settled), 1) if settled else None,
            "trace_s_full_p50": round(statistics.median(x["full_s"] for x in stops), 1),
            "grid": grid,
            "rows": stops,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        },
    }


def _write(out: Path, doc: dict[str, Any]) -> None:
    """scale.json, saying which headline figures are still to be measured (null) and how."""
    todo = [
        k
        for k in (*LEAD_KEYS, "sites_per_hour_measured", "max_concurrency_p99_under_1ms")
        if doc.get(k) is None
    ]
    doc.pop("pending_note", None)
    if todo:
        doc["pending_note"] = (
            f"null until measured: {', '.join(todo)} (time_to_verdict: --part ttv; recall_*: "
            "--part stopping; sites_per_hour and concurrency: --part sweep)"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/scale.json")
    ap.add_argument("--part", choices=["profiles", "sweep", "ttv", "stopping", "cpu", "all"], default="all")
    ap.add_argument("--rounds", type=int, default=2, help="profiles: rounds of each order")
    ap.add_argument("--size", type=int, default=200_000, help="profiles: object bytes")
    ap.add_argument("--k", default="32,64,128", help="sweep: concurrency levels")
    ap.add_argument("--work-dir", default="/var/tmp/ccscope-bench-scale")
    ap.add_argument("--ttv-bytes", type=int, default=420_000, help="ttv: object bytes (the crawler's least)")
    ap.add_argument("--ttv-cap", type=float, default=60.0, help="ttv: seconds per download (the workers')")
    ap.add_argument("--ttv-parallel", type=int, default=4, help="ttv: measurements at a time")
    ap.add_argument("--ttv-rounds", type=int, default=1)
    ap.add_argument("--ttv-ccas", help="ttv: only these CCAs (comma-separated)")
    ap.add_argument("--model", help="classifier model file (default: the shipped one)")
    ap.add_argument(
        "--rule", help="ttv, stopping: overrides of the default StoppingRule, e.g. 'stable=4,min_p=0'"
    )
    ap.add_argument("--root", default="/var/tmp/ccscope-draws", help="stopping: the reference set")
    ap.add_argument(
        "--lab-sample-ms",
        type=float,
        default=1.0,
        help="sweep, cpu: the lab servers' TCP_INFO sampling period (ground truth the census does not keep)",
    )
    ap.add_argument("--host-note", help="sweep: what else ran on the host (kept in sweep_host)")
    ap.add_argument("--pg-from", type=int, default=PG_FROM_K, help="sweep: PostgreSQL from this K on")
    ap.add_argument("--cpu-k", type=int, default=8, help="cpu: sites measured at once")
    ap.add_argument("--cpu-label", default="cpu_breakdown", help="cpu: the key the breakdown goes under")
    ap.add_argument("--census-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store-url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.census_child:
        return _census_child(args)
    if args.part == "stopping":  # a replay of recorded traces: no lab, no root
        doc = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
        doc.update(part_stopping(args))
        _write(Path(args.out), doc)
        log(json.dumps({k: doc.get(k) for k in ("recall_full", "recall_adaptive")}))
        return 0
    if os.geteuid() != 0:
        log("bench/scale needs root (lab namespaces)")
        return 2
    out = Path(args.out)
    doc: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    for k in LEAD_KEYS:
        doc.setdefault(k, None)
    if args.part in ("profiles", "all"):
        doc.update(part_profiles(args))
        _write(out, doc)
    if args.part in ("ttv", "all"):
        doc.update(part_ttv(args))
        _write(out, doc)
    if args.part == "cpu":
        doc[args.cpu_label] = part_cpu(args)
        _write(out, doc)
        log(json.dumps({k: doc[args.cpu_label][k] for k in ("cpu_s_per_measurement", "parts_cpu_s")}))
        return 0
    if args.part in ("sweep", "all"):
        load0 = [round(x, 2) for x in os.getloadavg()]
        doc.update(part_sweep(args))
        doc.update(projection(doc["sweep"]))
        doc["projection_derivation"]["unstarved"] = unstarved(doc)
        doc["sweep_host"] = {**host(), "load_before": load0, "note": args.host_note}
        doc["sweep_date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        # Notes written by hand about an earlier sweep no longer apply: say what this one was.
        for stale in ("sweep_note", "max_concurrency_note"):
            doc.pop(stale, None)
        ks = [r["concurrency"] for r in doc["sweep"]]
        doc["sweep_note"] = (
            f"K = {', '.join(map(str, ks))}, one batch each (every site at once), profiles side by "
            "side, adaptive stopping with the default rule, PostgreSQL from "
            f"K = {args.pg_from} (SQLite below), the lab's TCP_INFO sampling every "
            f"{args.lab_sample_ms:g} ms; each row's cpu_breakdown says where its CPU went"
        )
        if doc.get("max_concurrency_p99_under_1ms") == max(ks):
            doc["max_concurrency_note"] = (
                f"a lower bound: every K run held lateness p99 < 1 ms; none above {max(ks)} was run"
            )
    _write(out, doc)
    log(
        json.dumps(
            {
                k: doc.get(k)
                for k in (
                    "max_concurrency_p99_under_1ms",
                    "sites_per_hour_measured",
                    "sites_per_hour_projected",
                )
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
