#!/usr/bin/env python3
"""Benchmark of ccscope-link (the userspace link emulator shell).

Measures, on this machine: one-way delay accuracy (externally with ping and
internally from the emulator's lateness histogram), achieved vs configured
rate under a saturating TCP download, drop-tail buffer behaviour, CPU per
packet, and how many concurrent 200 kbit/s shells keep per-packet lateness
p99 under 1 ms. Needs root. Traffic stays on this host: servers listen in
the root namespace and clients run inside shells (100.64.0.0/10 TUNs).

usage: python bench/emulator/run.py --out bench/results/emulator.json
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ccscope.settings import settings

REPO = Path(__file__).resolve().parents[2]
BIN = str(settings().link or REPO / "capture/link/target/release/ccscope-link")
TMP = Path(tempfile.mkdtemp(prefix="ccscope-emu-bench-"))

# Client run inside a shell: read a TCP stream until EOF, report goodput.
CLIENT = r"""
import socket, sys, time
host, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection((host, port))
s.settimeout(1.0)
got = 0; first = last = None
end = time.monotonic() + secs
while time.monotonic() < end:
    try:
        d = s.recv(65536)
    except socket.timeout:
        continue
    if not d: break
    now = time.monotonic()
    if first is None: first = now
    last = now; got += len(d)
dt = (last - first) if first is not None and last > first else 0
print("GOODPUT", got, dt, flush=True)
"""


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class BulkServer:
    """Threaded TCP server in the root namespace: each connection gets
    `seconds` worth of continuous data (or `nbytes`), then EOF."""

    def __init__(self, seconds=None, nbytes=None):
        # seconds=None, nbytes=None: stream until the client closes.
        self.seconds, self.nbytes = seconds, nbytes
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        buf = b"\0" * 65536
        end = time.monotonic() + self.seconds if self.seconds else None
        left = self.nbytes
        try:
            c.settimeout(30)
            while True:
                if end is not None and time.monotonic() >= end:
                    break
                if left is not None:
                    if left <= 0:
                        break
                    n = c.send(buf[: min(left, len(buf))])
                    left -= n
                else:
                    c.sendall(buf)
        except OSError:
            pass
        try:
            c.shutdown(socket.SHUT_WR)
            c.settimeout(2)
            c.recv(1)
        except OSError:
            pass
        c.close()

    def close(self):
        self.stop = True
        self.sock.close()


def shell(args, cmd, stats=None, pcap=None, timeout=120, capture=True):
    full = [BIN, "--quiet"]
    if stats:
        full += ["--stats", str(stats)]
    if pcap:
        full += ["--pcap", str(pcap)]
    full += [*list(args), "--", *list(cmd)]
    for attempt in range(3):
        r = subprocess.run(full, capture_output=capture, text=True, timeout=timeout)
        # Another tool on a shared machine may delete a ccs* device by name
        # (names are reused across shells); that run is void, so retry it.
        if r.returncode == 2 and "TUN device error" in (r.stderr or "") and attempt < 2:
            log("  (shell device removed externally; retrying)")
            continue
        break
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(full)} -> {r.returncode}: {r.stderr}")
    return r


def load(p):
    with open(p) as f:
        return json.load(f)


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[i]


def ping_rtts(args, count=100, interval=0.01):
    st = TMP / "ping.json"
    # ping needs CAP_NET_RAW (a file capability), which a shell's command no longer has.
    cmd = ["sh", "-c", f"ping -n -c {count} -i {interval} $CCSCOPE_SHELL_OUTER_ADDR"]
    r = shell([*args, "--keep-root"], cmd, stats=st)
    rtts = [float(m) for m in re.findall(r"time=([\d.]+) ms", r.stdout)]
    return rtts, load(st)


def lateness(st):
    return {d: st[d]["lateness_us"] for d in ("down", "up")}


def bench_delay():
    log("== delay accuracy")
    base, _ = ping_rtts([], count=100)
    base_med = statistics.median(base)
    lo = subprocess.run(["ping", "-n", "-c", "50", "-i", "0.01", "127.0.0.1"], capture_output=True, text=True)
    loop_rtts = [float(m) for m in re.findall(r"time=([\d.]+) ms", lo.stdout)]
    errs = []
    per = []
    emu_p50, emu_p99 = [], []
    for d in (5, 25, 100):
        rtts, st = ping_rtts(["--delay", str(d)], count=100)
        one_way = [(r - base_med) / 2 for r in rtts]
        e = [abs(x - d) for x in one_way]
        errs += e
        lat = lateness(st)
        for k in ("down", "up"):
            emu_p50.append(lat[k]["p50"])
            emu_p99.append(lat[k]["p99"])
        per.append(
            {
                "delay_ms": d,
                "rtt_median_ms": statistics.median(rtts),
                "rtt_p99_ms": pct(rtts, 0.99),
                "one_way_err_p50_ms": pct(e, 0.5),
                "one_way_err_p99_ms": pct(e, 0.99),
                "emulator_lateness_us": lat,
                "received": len(rtts),
            }
        )
        log(f"  delay {d} ms: rtt median {statistics.median(rtts):.3f} ms, err p99 {pct(e, 0.99):.3f} ms")
    return {
        "delay_err_p50_ms": pct(errs, 0.5),
        "delay_err_p99_ms": pct(errs, 0.99),
        "delay_err_method": (
            "ping RTT through --delay D minus median RTT through a --delay 0 shell, halved, vs D"
        ),
        "emulator_lateness_p50_us_max": max(emu_p50),
        "emulator_lateness_p99_us_max": max(emu_p99),
        "delay_err_from_lateness_p99_ms": max(emu_p99) / 1000.0,
        "baseline_rtt_shell_delay0_ms": base_med,
        "baseline_rtt_loopback_ms": statistics.median(loop_rtts) if loop_rtts else None,
        "delay_detail": per,
    }


def download(args, seconds, tag, pcap=False):
    srv = BulkServer()
    st = TMP / f"{tag}.json"
    pc = TMP / f"{tag}.pcap" if pcap else None
    try:
        r = shell(
            args,
            ["sh", "-c", f'python3 -c "$0" $CCSCOPE_SHELL_OUTER_ADDR {srv.port} {seconds}', CLIENT],
            stats=st,
            pcap=pc,
            timeout=seconds + 60,
        )
    finally:
        srv.close()
    m = re.search(r"GOODPUT (\d+) ([\d.e-]+)", r.stdout)
    goodput = int(m.group(1)) * 8 / float(m.group(2)) if m and float(m.group(2)) > 0 else None
    return load(st), goodput


def bench_rate():
    log("== rate accuracy")
    out = {}
    ratios = []
    for rate, bps, secs in (("200kbit", 200e3, 15), ("20mbit", 20e6, 10)):
        st, goodput = download(
            ["--rate", rate, "--delay", "10", "--buffer", "20p" if rate == "200kbit" else "2bdp"],
            secs,
            f"rate_{rate}",
        )
        d = st["down"]
        ratio = d["achieved_rate_bps"] / bps if d["achieved_rate_bps"] else None
        ratios.append(ratio)
        cpu = st["cpu"]["loop_user_us"] + st["cpu"]["loop_sys_us"]
        cpu_user = st["cpu"]["loop_user_us"]
        pk = st["down"]["packets_in"] + st["up"]["packets_in"]
        out[rate] = {
            "configured_bps": bps,
            "achieved_rate_bps": d["achieved_rate_bps"],
            "rate_ratio": ratio,
            # IP-level goodput seen by the client app (TCP payload only, so < 1).
            "client_goodput_bps": goodput,
            "client_goodput_ratio": goodput / bps if goodput else None,
            "busy_s": d["busy_s"],
            "drops_queue": d["drops_queue"],
            "lateness_us": lateness(st),
            "cpu_us": cpu,
            "packets": pk,
            "cpu_us_per_packet": cpu / pk if pk else None,
            # sys time includes the kernel TCP/IP work of both endpoints that
            # runs inside the emulator's TUN read/write calls.
            "cpu_user_us_per_packet": cpu_user / pk if pk else None,
        }
        log(
            f"  {rate}: achieved {d['achieved_rate_bps']} bps (ratio {ratio}), client goodput {goodput}, "
            f"cpu {cpu / max(pk, 1):.1f} us/pkt, lateness p99 {d['lateness_us']['p99']} us"
        )
    return out, ratios


def udp_burst(buffer_args, n, size, rate="1mbit"):
    """Blast n UDP datagrams at a sink inside the shell; count arrivals."""
    st = TMP / "burst.json"
    _ready_r, _ready_w = os.pipe()
    sink = (
        "import socket,sys,time\n"
        "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(('0.0.0.0',19999));s.settimeout(3)\n"
        "print('up',flush=True);n=0\n"
        "try:\n"
        "  while True: s.recv(65535); n+=1\n"
        "except socket.timeout: pass\n"
        "print('GOT',n,flush=True)\n"
    )
    p = subprocess.Popen(
        [BIN, "--quiet", "--stats", str(st), "--rate", rate, *buffer_args, "--", "python3", "-c", sink],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    assert line.strip() == "up", line
    # Inner address is deterministic from the shell's env; read it from the stats later.
    time.sleep(0.2)
    inner = None
    addrs = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    for line in addrs.splitlines():
        m = re.search(r"ccs(\d+)o\s+inet (\S+)/30", line)
        if m:
            a = m.group(2).split(".")
            inner_c = ".".join([*a[:3], str(int(a[3]) + 1)])
            inner = inner_c  # last one wins; bench runs a single shell here
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = b"x" * (size - 28)
    for _ in range(n):
        s.sendto(payload, (inner, 19999))
    out, _ = p.communicate(timeout=30)
    got = int(re.search(r"GOT (\d+)", out).group(1))
    return got, load(st)


def bench_droptail():
    log("== drop-tail")
    res = {}
    ok = True
    # Packet buffer: a back-to-back burst of 50 x 1000 B into 10p at 1 Mbit/s
    # (8 ms per packet) must deliver exactly the buffer (+1 if one finishes
    # serializing during the burst) and drop the rest at the tail.
    got, st = udp_burst(["--buffer", "10p"], 50, 1000)
    d = st["down"]
    c1 = 10 <= got <= 11 and d["drops_queue"] == 50 - got and d["max_queue_packets"] <= 10
    res["burst_10p"] = {
        "sent": 50,
        "delivered": got,
        "drops_queue": d["drops_queue"],
        "max_queue_packets": d["max_queue_packets"],
        "ok": c1,
    }
    got, st = udp_burst(["--buffer", "5000B"], 50, 1000)
    d = st["down"]
    c2 = 5 <= got <= 6 and d["max_queue_bytes"] <= 5000 and d["drops_queue"] == 50 - got
    res["burst_5000B"] = {
        "sent": 50,
        "delivered": got,
        "drops_queue": d["drops_queue"],
        "max_queue_bytes": d["max_queue_bytes"],
        "ok": c2,
    }
    # TCP against a small buffer: queue never above limit; drops only happen once it fills.
    st, _ = download(["--rate", "1mbit", "--delay", "10", "--buffer", "10p"], 8, "dt_tcp")
    d = st["down"]
    c3 = d["max_queue_packets"] <= 10 and (d["drops_queue"] == 0 or d["max_queue_packets"] == 10)
    res["tcp_10p"] = {"max_queue_packets": d["max_queue_packets"], "drops_queue": d["drops_queue"], "ok": c3}
    # Same with no buffer limit: no queue drops at all.
    st, _ = download(["--rate", "1mbit", "--delay", "10", "--buffer", "inf"], 5, "dt_inf")
    c4 = st["down"]["drops_queue"] == 0
    res["tcp_inf"] = {
        "max_queue_packets": st["down"]["max_queue_packets"],
        "drops_queue": st["down"]["drops_queue"],
        "ok": c4,
    }
    ok = c1 and c2 and c3 and c4
    log(f"  drop-tail checks: {'ok' if ok else 'FAILED'} {res}")
    return ok, res


def ramp(ns, seconds, mtu, label=""):
    log(f"== concurrent shells (mtu {mtu}{label})")
    table = []
    best = 0
    best_all = 0
    all_ok = True
    for n in ns:
        srv = BulkServer()
        procs = []
        stats = []
        t0 = time.monotonic()
        os.times()
        for i in range(n):
            st = TMP / f"ramp_{mtu}_{n}_{i}.json"
            stats.append(st)
            cmd = [
                BIN,
                "--quiet",
                "--stats",
                str(st),
                "--rate",
                "200kbit",
                "--delay",
                "20",
                "--buffer",
                "20p",
                "--mtu",
                str(mtu),
                "--",
                "bash",
                "-c",
                f"exec 3<>/dev/tcp/$CCSCOPE_SHELL_OUTER_ADDR/{srv.port} && "
                f"timeout {seconds} cat <&3 >/dev/null; exit 0",
            ]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        fails = 0
        for p in procs:
            try:
                _, err = p.communicate(timeout=seconds + 90)
                if p.returncode != 0:
                    fails += 1
                    log("  shell failed:", err.strip()[:300])
            except subprocess.TimeoutExpired:
                p.kill()
                fails += 1
        wall = time.monotonic() - t0
        srv.close()
        p99s, ratios, cpu, pk = [], [], 0, 0
        for st in stats:
            try:
                j = load(st)
            except (OSError, ValueError):
                continue
            p99s.append(max(j["down"]["lateness_us"]["p99"], j["up"]["lateness_us"]["p99"]))
            if j["down"]["achieved_rate_bps"]:
                ratios.append(j["down"]["achieved_rate_bps"] / 200e3)
            cpu += j["cpu"]["loop_user_us"] + j["cpu"]["loop_sys_us"]
            pk += j["down"]["packets_in"] + j["up"]["packets_in"]
        worst = max(p99s) if p99s else None
        row = {
            "n": n,
            "mtu": mtu,
            "failed": fails,
            "reported": len(p99s),
            "worst_p99_lateness_us": worst,
            "median_p99_lateness_us": statistics.median(p99s) if p99s else None,
            "min_rate_ratio": min(ratios) if ratios else None,
            "median_rate_ratio": statistics.median(ratios) if ratios else None,
            "emulator_cpu_s_total": cpu / 1e6,
            "emulator_cpu_pct_of_2_cores": 100 * cpu / 1e6 / (2 * wall),
            "packets_total": pk,
            "cpu_us_per_packet": cpu / pk if pk else None,
            "wall_s": wall,
        }
        table.append(row)
        log(
            f"  N={n}: worst p99 {worst} us, median p99 {row['median_p99_lateness_us']} us, "
            f"min rate ratio {row['min_rate_ratio']}, "
            f"cpu {row['emulator_cpu_pct_of_2_cores']:.1f}% fails {fails}"
        )
        passed = fails == 0 and worst is not None and worst < 1000 and len(p99s) == n
        row["p99_under_1ms"] = passed
        if passed:
            best = n
        all_ok = all_ok and passed
        if all_ok:
            best_all = n
        time.sleep(1)
    return best, best_all, table


def leftovers():
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    return [ln.split(":")[1].strip() for ln in links.splitlines() if re.search(r"^\d+: ccs", ln)], [
        t for t in tables.splitlines() if "ccscope_" in t
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "bench/results/emulator.json"))
    ap.add_argument("--quick", action="store_true", help="fewer/shorter steps (smoke run)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    if not os.access(BIN, os.X_OK):
        sys.exit(f"binary not found: {BIN} (cargo build --release in capture/link)")
    if not shutil.which("ping"):
        sys.exit("ping (iputils-ping) is required")
    t_start = time.monotonic()
    res = {"binary": BIN, "host": {"nproc": os.cpu_count(), "kernel": os.uname().release}}
    res.update(bench_delay())
    rate, ratios = bench_rate()
    res["rate"] = rate
    res["rate_ratio"] = ratios[0]
    res["rate_ratio_200kbit"] = ratios[0]
    res["rate_ratio_20mbit"] = ratios[1]
    res["cpu_us_per_packet"] = rate["20mbit"]["cpu_us_per_packet"]
    res["cpu_user_us_per_packet"] = rate["20mbit"]["cpu_user_us_per_packet"]
    res["cpu_us_per_packet_200kbit"] = rate["200kbit"]["cpu_us_per_packet"]
    ok, dt = bench_droptail()
    res["droptail_ok"] = ok
    res["droptail"] = dt
    ns = [8, 16, 32] if a.quick else [8, 16, 32, 48, 64]
    secs = 5 if a.quick else 10
    res["load_avg_before_ramp"] = os.getloadavg()
    # The headline uses the standard profiles' packet size (MTU 100: ~250 pkt/s per shell at
    # 200 kbit/s) and is strict: every N up to it must pass. MTU 1500 is reported beside it.
    best, best_all, table = ramp(ns, secs, 100)
    res["max_shells_p99_under_1ms"] = best_all
    res["max_shells_p99_under_1ms_largest_passing_n"] = best
    res["shells_table"] = table
    best, best_all, table = ramp(ns, secs, 1500)
    res["max_shells_p99_under_1ms_mtu1500"] = best_all
    res["max_shells_p99_under_1ms_mtu1500_largest_passing_n"] = best
    res["shells_table_mtu1500"] = table
    res["load_avg_after_ramp"] = os.getloadavg()
    res["shell_workload"] = (
        "each shell: --rate 200kbit --delay 20 --buffer 20p --mtu 100 (headline) or 1500, one "
        "saturating TCP download "
        f"from a server in the root namespace for {secs}s; p99 = max(down,up) lateness p99 per shell"
    )
    dev, tab = leftovers()
    res["leftover_devices"] = dev
    res["leftover_nft_tables"] = tab
    res["bench_wall_s"] = time.monotonic() - t_start
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    log(f"wrote {a.out} in {res['bench_wall_s']:.0f}s")
    shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
