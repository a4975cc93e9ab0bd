"""Part `split`: the measuring side's CPU per measurement with the lab on a CPU of its own.

On one host the kernel's per-packet work (forwarding, NAT, each end's TCP) runs in softirq in
the context of whatever process or CPU is at hand, so rusage splits it between the measuring
side and the lab by chance, and softirq work done on an otherwise idle CPU is in no process's
account at all (`shell_cpu_profile`). This part draws the line two hosts would draw:

* every process of the lab (its Internet-path shell and its servers) runs on CPU 1, and so
  does this bench's own process;
* the census (the workers' pipeline, its shells and download clients) runs on CPU 0;
* the packets the lab's shell hands to the host (its outer TUN's receive queue) are steered
  to CPU 0 by RPS, so forwarding and NAT toward the measuring shells, which a measuring host
  does for its own shells, run there; the lab shell's writes into its servers' namespace (the
  servers' TCP) stay on CPU 1.

CPU 0's busy time (the wall clock less its idle time in /proc/stat, which the kernel keeps
exactly; the tick-sampled busy fields miss short bursts and are kept beside it), less its rate
while the lab sat idle just before, divided by the measurements, is then the measuring side's
cost with every softirq it caused and nothing the lab caused. What it leaves out is a NIC driver's work, which
a TUN does not have.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

from census import MIX, _census_run
from common import STATE_DIR, _commit, _lab_up, host, log
from cpu import breakdown

from ccscope.capture.host import busy_between, cpu_busy_by_cpu
from tests.workers.kit import proc_stats

MEASURING_CPU = 0
LAB_CPU = 1
BASELINE_S = 15.0
SYS_NET = Path("/sys/class/net")


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def pin_group(pgid: int, cpu: int) -> int:
    """Every thread of every process in the process group onto `cpu`; how many threads."""
    n = 0
    for pid, _name, f in proc_stats():
        if int(f[2]) != pgid:
            continue
        for tid in _threads(pid):
            try:
                os.sched_setaffinity(tid, {cpu})
                n += 1
            except OSError:  # gone meanwhile
                pass
    return n


def outer_tuns(pgid: int) -> list[str]:
    """The outer devices (ccs<idx>o) of the shells in the process group: the TUNs their open
    files name (/proc/PID/fdinfo's `iff`), so no other shell on the host is touched."""
    out: set[str] = set()
    for pid, name, f in proc_stats():
        if int(f[2]) != pgid or name != "ccscope-link":
            continue
        try:
            infos = list(Path(f"/proc/{pid}/fdinfo").iterdir())
        except OSError:
            continue
        for info in infos:
            try:
                for line in info.read_text().splitlines():
                    dev = line.removeprefix("iff:").strip()
                    if line.startswith("iff:") and dev.startswith("ccs") and dev.endswith("o"):
                        out.add(dev)
            except OSError:
                continue
    return sorted(out)


def set_rps(dev: str, cpus: set[int]) -> str:
    """Steer the device's received packets to `cpus` (RPS); the mask it had before."""
    f = SYS_NET / dev / "queues" / "rx-0" / "rps_cpus"
    old = f.read_text().strip()
    f.write_text(format(sum(1 << c for c in cpus), "x"))
    return old


def part_split(args: argparse.Namespace) -> dict[str, Any]:
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("split: needs two CPUs (one for the measuring side, one for the lab)")
    ks = sorted({int(k) for k in args.split_k.split(",") if k.strip()})
    # The download client the census runs first, then its peer on the same lab (side by side):
    # the first (the default client) gives the figures, the other's rows stand beside them.
    clients = [c.strip() for c in args.split_clients.split(",") if c.strip()]
    if not clients or any(c not in ("compiled", "python") for c in clients):
        raise SystemExit("split: --split-clients takes compiled and/or python")
    if "compiled" in clients:
        from ccscope.capture.transports.tcp import tcp_get_built

        if tcp_get_built() is None:
            raise SystemExit("split: ccscope-tcp-get is not built (make setup)")
    sites = tuple((f"s{i:03d}.lab.test", MIX[i % len(MIX)]) for i in range(max(ks) * args.sites_per_k))
    me = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {LAB_CPU})
    # No TCP_INFO sampling: it is ground truth the census does not keep, and on one CPU the
    # servers' 1 ms samplers would starve the servers themselves.
    lab = _lab_up(tuple(dict.fromkeys(c for _, c in sites)), sites, sample_ms=0.0)
    rps: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    try:
        pgid = _lab_pgid()
        threads = pin_group(pgid, LAB_CPU)
        for dev in outer_tuns(pgid):
            rps[dev] = set_rps(dev, {MEASURING_CPU})
        log(f"split: lab pgid {pgid} ({threads} threads) on CPU {LAB_CPU}; RPS of {sorted(rps)} to CPU 0")
        a = cpu_busy_by_cpu()
        time.sleep(BASELINE_S)
        idle = busy_between(a, cpu_busy_by_cpu())
        for k in ks:
            n = k * args.sites_per_k
            for client in clients:
                log(f"split: K={k}, {n} sites, {client} client, census on CPU {MEASURING_CPU} ...")
                row = _census_run(
                    k, args, probe=True, sites=n, cpus={MEASURING_CPU},
                    env={"CCSCOPE_TCP_CLIENT": client},
                )  # fmt: skip
                row["tcp_client"] = client
                parts = ("cpu_s_per_measurement", "parts_cpu_s")
                row["cpu_breakdown"] = {k2: v for k2, v in breakdown(row).items() if k2 in parts}
                rows.append(_figures(row, idle))
                keys = ("concurrency", "tcp_client", "measurements", "cpu_s_per_measurement_measuring_cpu")
                log(str({x: rows[-1][x] for x in keys} | {"misses": rows[-1].get("misses")}))
    finally:
        for dev, old in rps.items():
            try:
                mask = int(old.replace(",", ""), 16)
                set_rps(dev, {c for c in range(64) if mask >> c & 1})
            except OSError:
                pass  # the device went down with the lab
        lab.down()
        os.sched_setaffinity(0, me)
    main = clients[0]
    return {
        "split": [r for r in rows if r["tcp_client"] == main],
        **{f"split_{c}_client": [r for r in rows if r["tcp_client"] == c] for c in clients if c != main},
        "split_host": host(),
        "split_date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "split_commit": _commit(),
        "split_how": __doc__.split("\n\n", 1)[1].strip(),
        "split_idle_baseline": {str(c): {k: round(v, 3) for k, v in x.items()} for c, x in idle.items()},
    }


def split_projection(
    rows: list[dict[str, Any]], cores: int = 2, headroom: float = 0.7
) -> dict[str, Any] | None:
    """Sites per hour for a host that only measures, its measuring CPUs run at `headroom`: the
    cost per measurement at that load, interpolated between the two split rows whose measuring
    CPU ran either side of it, else the nearest row's. The cost rises with the load (more at
    once, more switching, checks that wait longer so downloads run longer), so a lightly
    loaded row would flatter a host run at 70 %. Rows whose emulators lost their timing are not
    used. The nearest row's figure (the only one before 2026-11-29) and the heaviest row's
    measured throughput stay beside it."""
    ok = [r for r in rows if r.get("p99_under_1ms")]
    if not ok:
        return None

    def load(r: dict[str, Any]) -> float:
        return float(r["per_cpu"][str(MEASURING_CPU)]["utilisation"])

    def per_hour(cost: float) -> int:
        return round(cores * headroom * 3600 / cost)

    row = min(ok, key=lambda r: abs(load(r) - headroom))
    nearest = row["cpu_s_per_measurement_measuring_cpu"]
    below = [r for r in ok if load(r) <= headroom]
    above = [r for r in ok if load(r) > headroom]
    cpu, between = nearest, None
    if below and above:
        lo, hi = max(below, key=load), min(above, key=load)
        f = (headroom - load(lo)) / (load(hi) - load(lo))
        c_lo, c_hi = lo["cpu_s_per_measurement_measuring_cpu"], hi["cpu_s_per_measurement_measuring_cpu"]
        cpu, between = round(c_lo + f * (c_hi - c_lo), 3), (lo, hi)
    heaviest = max(ok, key=load)
    return {
        "formula": "cores x headroom x 3600 s / cpu_s_per_measurement_measuring_cpu",
        "cores": cores,
        "headroom": headroom,
        "cpu_s_per_measurement_measuring_cpu": cpu,
        "from": (
            f"split K = {between[0]['concurrency']} and {between[1]['concurrency']} (the census alone on "
            f"CPU {MEASURING_CPU}, {load(between[0]):.0%} and {load(between[1]):.0%} busy, costs "
            f"{between[0]['cpu_s_per_measurement_measuring_cpu']} and "
            f"{between[1]['cpu_s_per_measurement_measuring_cpu']}): the cost at {headroom:.0%}, "
            "linearly between them"
            if between
            else f"split K = {row['concurrency']}: the census alone on CPU {MEASURING_CPU}, "
            f"{load(row):.0%} busy, lateness p99 {row['lateness_p99_ms_max']} ms, "
            f"{row['sites_per_hour']} sites per hour on that one CPU"
        ),
        "row_chosen_why": "the cost at the load the projection runs a host at: between the rows either "
        "side of it where there are both, else the nearest row's",
        "sites_per_hour": per_hour(cpu),
        "nearest_row": {
            "concurrency": row["concurrency"],
            "load": load(row),
            "cpu_s_per_measurement_measuring_cpu": nearest,
            "sites_per_hour": per_hour(nearest),
        },
        "heaviest_row_kept_timing": {
            "concurrency": heaviest["concurrency"],
            "load": load(heaviest),
            "sites_per_hour_one_cpu": heaviest["sites_per_hour"],
            "sites_per_hour_all_cores": round(cores * heaviest["sites_per_hour"]),
            "why": "measured, not projected: the census's own rate with its CPU that busy, once per core",
        },
        # Little's law on the row itself: K open measurements over its rate
        "seconds_per_measurement": round(row["concurrency"] * 3600 / row["sites_per_hour"], 1),
    }


def _lab_pgid() -> int:
    st = json.loads((Path(STATE_DIR) / "state.json").read_text())
    return int(st.get("pgid") or st.get("pid"))


def _figures(row: dict[str, Any], idle: dict[int, dict[str, float]]) -> dict[str, Any]:
    """The row with each CPU's busy time less its idle rate over the same span, per measurement."""
    n = max(1, row["measurements"])
    per: dict[str, Any] = {}
    for cpu, x in row.pop("per_cpu").items():  # the census child's reading, over the census alone
        base = idle.get(int(cpu))
        rate = base["busy_s"] / base["span_s"] if base and base["span_s"] else 0.0
        net = x["busy_s"] - rate * x["span_s"]
        per[cpu] = {
            "busy_s": round(x["busy_s"], 2),
            "ticked_busy_s": round(x["ticked_busy_s"], 2),
            "idle_rate_s": round(rate * x["span_s"], 2),
            "net_busy_s": round(net, 2),
            "utilisation": round(x["busy_s"] / x["span_s"], 3) if x["span_s"] else None,
            "steal_s": round(x["steal_s"], 2),
            "per_measurement_s": round(net / n, 3),
        }
    row["per_cpu"] = per
    row["cpu_s_per_measurement_measuring_cpu"] = per[str(MEASURING_CPU)]["per_measurement_s"]
    row["cpu_s_per_measurement_lab_cpu"] = per[str(LAB_CPU)]["per_measurement_s"]
    return row
