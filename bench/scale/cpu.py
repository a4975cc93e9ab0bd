"""Part `cpu`: where the measuring side's CPU per measurement goes, by stage (cpuprobe.py)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
from typing import Any

from census import MIX, _census_run
from common import _commit, _lab_up


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
