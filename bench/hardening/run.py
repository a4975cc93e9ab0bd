#!/usr/bin/env python3
"""Hardening bench: the attacks of the outside review (issue 18), tried for real on this tree.

    .venv/bin/python bench/hardening/run.py --out bench/results/hardening.json

Needs root (namespaces, ccscope-link, a lab on instance 20), like the netns tests: run it under
the shared lock (`flock /tmp/ccscope-netns.lock make bench NAME=hardening`). Every attack runs
against real components, built with tests/hardening/kit.py:

* ssrf: a hostile lab host in a namespace of our own redirects to listeners on loopback,
  private, link-local and CGNAT addresses there; the download client, the crawler client and a
  lab-mode API run inside the namespace. An attack holds when no internal listener logs it.
* privileges: the command of a ccscope shell, read from its own /proc/self/status and environ,
  with secrets in the caller's environment.
* orphans: kill -9 of a ccscope-link's parent (the link and its command must go, with their
  namespace, TUN device and nft table); the scratch of a killed run (swept by the next worker);
  a lab host whose port refuses connections (failed for good after a few attempts).
* api: schedules beat cannot run and an unknown profile (422, not 201/202), a poisoned row in
  the database (beat schedules the other campaigns).
* input: hostile and oversized files, each loaded in its own process under `prlimit --as`, with
  its peak RSS (rejected ones must stay <= 300 MB); 50 mutated pcaps; a 1e6-row CSV accepted
  within 4x its size.
* lab_ca: a leaf for a name outside lab.test signed by the lab CA's key.

Output: attacks [{name, category, outcome, passed}], passed {count, total, all},
max_rss_mb_rejected_input, rss_mb {input: MB}, csv_1e6 {rows, size_mb, rss_mb, ratio}, seconds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.hardening.kit import (  # noqa: E402
    INTERNAL,
    LISTEN_PORT,
    PCAP_HEADER,
    REJECT_MB,
    SPARSE_INPUTS,
    HostileNet,
    gzip_bomb,
    hostile_net,
    load_cmd,
    million_row_csv,
    peak_rss,
    sparse,
)

PY = sys.executable
LAB_INSTANCE = 20
SECRETS = {
    "CCSCOPE_API_TOKEN": "s3cret",
    "CCSCOPE_DB_URL": "postgresql://u:pw@db/x",
    "PYTHONPATH": "/tmp/evil",
}


@dataclass
class Attack:
    name: str
    category: str
    outcome: str
    passed: bool


def log(msg: str) -> None:
    print(f"[hardening] {msg}", file=sys.stderr, flush=True)


# ---- ssrf ---------------------------------------------------------------------------------------

_IN_NS = """
import json, subprocess, sys
from ccscope.capture.fetch import fetch
from ccscope.crawler.http import SafeClient
from ccscope.errors import CCScopeError, TargetRefused
args = json.loads(sys.argv[1])
out = {}
for name, url in args["fetch_cli"].items():
    p = subprocess.run([sys.executable, "-m", "ccscope.capture.fetch", "--lab", url],
                       capture_output=True, text=True, timeout=60)
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    out[name] = f"exit {p.returncode}, {doc.get('error_kind') or 'status ' + str(doc.get('status'))}"
for name, url in args["crawler"].items():
    with SafeClient(lab=True) as c:
        try:
            r = c.request("GET", url)
            out[name] = f"followed: HTTP {r.status}"
        except TargetRefused as e:
            out[name] = "refused"
for name, (url, lab) in args["direct"].items():
    try:
        r = fetch(url, lab=lab, timeout=5)
        out[name] = f"fetched: HTTP {r.status}"
    except TargetRefused:
        out[name] = "refused"
    except (CCScopeError, OSError) as e:
        out[name] = type(e).__name__
from fastapi.testclient import TestClient
from ccscope.api.app import create_app
from ccscope.store import Store
st = Store("sqlite:///" + args["db"], args["traces"])
st.migrate()
st.add_vantage("paris")
auth = {"Authorization": "Bearer t"}
with TestClient(create_app(st, token="t", lab=True)) as c:
    for name, url in args["api"].items():
        r = c.post("/v1/measurements", json={"target": url, "vantage": "paris"}, headers=auth)
        out[name] = f"HTTP {r.status_code} {r.json().get('error') or ''}".strip()
out["queued"] = len(st.list_measurements())
print(json.dumps(out))
"""


def ssrf(tmp: Path) -> list[Attack]:
    with hostile_net(tmp) as net:
        return _ssrf_in(net, tmp)


def _ssrf_in(net: HostileNet, tmp: Path) -> list[Attack]:
    kinds = sorted(INTERNAL)
    fetch_cli = {f"fetch --lab: redirect to {k}": net.url(f"/to/{k}/fetch-{k}") for k in kinds}
    crawler = {f"crawler client (lab): redirect to {k}": net.url(f"/to/{k}/crawl-{k}") for k in kinds}
    direct: dict[str, tuple[str, bool]] = {
        f"lab-mode target {a} ({k})": (f"http://{a}:{LISTEN_PORT}/direct-{k}", True)
        for k, a in INTERNAL.items()
    }
    for a, what in (
        ("::1", "loopback"),
        ("fec0::2", "site-local"),
        ("2002:7f00:1::", "6to4 of 127.0.0.1"),
        ("64:ff9b::7f00:1", "NAT64 of 127.0.0.1"),
    ):
        direct[f"lab-mode target [{a}] ({what})"] = (f"http://[{a}]:{LISTEN_PORT}/direct-v6", True)
    for form in ("2130706433", "0177.0.0.1", "0x7f.1", "[::ffff:127.0.0.1]"):
        direct[f"public-mode target {form} (loopback)"] = (f"http://{form}:{LISTEN_PORT}/direct-pub", False)
    api = {
        f"lab-mode API measurement of {k} target": f"http://{a}:{LISTEN_PORT}/obj"
        for k, a in INTERNAL.items()
    }
    api["lab-mode API robots.txt redirect to loopback"] = net.url("/obj")
    args = {
        "fetch_cli": fetch_cli,
        "crawler": crawler,
        "direct": direct,
        "api": api,
        "db": str(tmp / "api.db"),
        "traces": str(tmp / "traces"),
    }
    res = json.loads(_run_ns_script(net, args).strip().splitlines()[-1])
    hits = net.internal_hits()
    log(f"ssrf: {len(hits)} internal requests in all")

    def reached(token: str) -> list[dict[str, str]]:
        return [h for h in hits if token in h["path"]]

    out = []
    for name, url in fetch_cli.items():
        got = reached(url.rsplit("/", 1)[1])
        out.append(
            Attack(
                name,
                "ssrf",
                f"{res[name]}; internal requests: {len(got)}",
                res[name].startswith("exit 3, target_refused") and not got,
            )
        )
    for name, url in crawler.items():
        got = reached(url.rsplit("/", 1)[1])
        out.append(
            Attack(
                name,
                "ssrf",
                f"{res[name]}; internal requests: {len(got)}",
                res[name] == "refused" and not got,
            )
        )
    for name, (url, _lab) in direct.items():
        got = reached(url.rsplit("/", 1)[1])
        out.append(
            Attack(
                name,
                "ssrf",
                f"{res[name]}; internal requests: {len(got)}",
                res[name] == "refused" and not got,
            )
        )
    api_hits = [h for h in hits if h["path"] in ("/robots.txt", "/obj")]
    for name in api:
        want = "HTTP 422 robots_disallowed" if "robots" in name else "HTTP 422 target_refused"
        out.append(
            Attack(
                name,
                "ssrf",
                f"{res[name]}; internal requests: {len(api_hits)}",
                res[name] == want and not api_hits,
            )
        )
    out.append(
        Attack(
            "lab-mode API: anything queued by the attempts above",
            "ssrf",
            f"{res['queued']} measurements queued",
            res["queued"] == 0,
        )
    )
    return out


def _run_ns_script(net: HostileNet, args: dict[str, Any]) -> str:
    argv = ["ip", "netns", "exec", net.name, PY, "-c", _IN_NS, json.dumps(args)]
    env = {**os.environ, "CCSCOPE_LAB": ""}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"in-namespace attacks failed ({p.returncode}): {p.stderr[-2000:]}")
    return p.stdout


# ---- privileges and orphans ---------------------------------------------------------------------

_SELF = (
    "import json, os; s = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l);"
    "print(json.dumps({'status': {k: v.strip() for k, v in s.items()}, 'env': sorted(os.environ)}))"
)


def privileges() -> list[Attack]:
    from ccscope.capture.shell import link_binary

    p = subprocess.run(
        [str(link_binary()), "--quiet", "--", PY, "-c", _SELF],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **SECRETS},
    )
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    st, env = doc["status"], doc["env"]
    caps = {c: int(st[c], 16) for c in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    leaked = sorted(set(SECRETS) & set(env))
    uid, gid = st["Uid"].split(), st["Gid"].split()
    ok = (
        "0" not in uid
        and "0" not in gid
        and not any(caps.values())
        and st["NoNewPrivs"] == "1"
        and not leaked
    )
    outcome = (
        f"uid {uid[0]} gid {gid[0]}, capabilities all zero: {not any(caps.values())}, "
        f"NoNewPrivs {st['NoNewPrivs']}, secrets visible: {leaked or 'none'}"
    )
    return [Attack("root and the caller's secrets into a shell's command", "privileges", outcome, ok)]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] not in ("Z", "X")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    try:
        return [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _wait_for(fn: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.1)


def orphans(tmp: Path) -> list[Attack]:
    from ccscope.capture.shell import link_binary
    from tests.netutil import leftovers_of

    out = []
    parent = subprocess.Popen(
        [
            PY,
            "-c",
            "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(600)",
            str(link_binary()),
            "--quiet",
            "--",
            "sleep",
            "300",
        ],
        start_new_session=True,
    )
    link = _wait_for(lambda: next(iter(_children(parent.pid)), None), 20)
    # The command (not an `ip` the link runs while it sets up): the first child named sleep.
    inner = (
        _wait_for(lambda: next((c for c in _children(link) if _comm(c) == "sleep"), None), 20)
        if link
        else None
    )
    idx = None
    for lock in Path("/run/ccscope/shells").glob("*.lock"):
        try:
            if int(lock.read_text().split()[0]) == link:
                idx = int(lock.stem)
        except (OSError, ValueError, IndexError):
            continue
    t0 = time.monotonic()
    os.kill(parent.pid, signal.SIGKILL)  # the parent only: nothing signals its children
    parent.wait()
    gone = _wait_for(lambda: not any(_alive(p) for p in (link, inner) if p), 20)
    took = time.monotonic() - t0
    left = (
        leftovers_of({"shell": {"index": idx, "pid": link, "outer_dev": f"ccs{idx}o"}})
        if idx is not None
        else ["?"]
    )
    for p in (link, inner):
        if p and _alive(p):
            os.kill(p, signal.SIGKILL)
    out.append(
        Attack(
            "kill -9 of a ccscope-link's parent mid-run",
            "orphans",
            f"link and its command {f'gone after {took:.1f} s' if gone else 'still running'}; "
            f"left behind: {left or 'nothing'}",
            bool(link and inner and gone and not left),
        )
    )

    # A run killed with its worker leaves its scratch; the next worker start sweeps it.
    from ccscope.workers.tasks import WorkerConfig, run_dir, sweep_scratch

    root = tmp / "work"
    code = (
        "import sys, time; from pathlib import Path\n"
        "from ccscope.workers.tasks import WorkerConfig, run_dir\n"
        f"d = run_dir(WorkerConfig(vantage='paris', out_root=Path({str(root)!r})), 7)\n"
        "d.mkdir(parents=True); (d / 'A.pcap').write_bytes(b'x' * 100000)\n"
        "print(d, flush=True); time.sleep(600)\n"
    )
    victim = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    assert victim.stdout is not None
    dead_dir = Path(victim.stdout.readline().strip())
    victim.kill()
    victim.wait()
    live_dir = run_dir(WorkerConfig(vantage="paris", out_root=root), 8)
    live_dir.mkdir(parents=True)
    swept = sweep_scratch(root)
    ok = swept == [dead_dir] and not dead_dir.exists() and live_dir.exists()
    out.append(
        Attack(
            "scratch (pcap) of a run killed with its worker",
            "orphans",
            f"the sweep a worker runs at start removed {len(swept)} dir(s); killed run's gone: "
            f"{not dead_dir.exists()}; "
            f"live run's kept: {live_dir.exists()}",
            ok,
        )
    )
    out.append(_refused_target(tmp))
    return out


def _refused_target(tmp: Path) -> Attack:
    """A lab host whose port refuses every connection, measured by an embedded worker."""
    from ccscope.lab.lab import LabParams
    from ccscope.store.core import Store
    from ccscope.workers.embedded import EmbeddedWorkers
    from ccscope.workers.tasks import CONNECTION_REFUSED_ATTEMPTS, WorkerConfig
    from tests.lab.lab_testkit import running_lab

    with running_lab(tmp / "lab", LabParams(ccas=("cubic",), delay_ms=5, instance=LAB_INSTANCE)):
        store = Store(f"sqlite:///{tmp / 'refused.db'}", str(tmp / "traces"))
        store.migrate()
        store.add_vantage("paris")
        m, _ = store.enqueue_measurement(
            "cubic.lab.test", "paris", "tcp", "refused", url="https://cubic.lab.test:9/obj/1000"
        )
        cfg = WorkerConfig(
            vantage="paris",
            profiles=("A",),
            lab=True,
            out_root=tmp / "work-refused",
            timeout=15.0,
            min_gap_seconds=0.0,
        )
        with EmbeddedWorkers(store, [cfg], concurrency=1, retry_base=0.05, retry_cap=0.2, max_retries=8) as w:
            w.submit(m.id).result(timeout=300)
        done = store.get_measurement(m.id)
        store.close()
    ok = done.state == "failed" and done.attempts == CONNECTION_REFUSED_ATTEMPTS
    return Attack(
        "a target that refuses connections, measured again and again",
        "orphans",
        f"{done.state} after {done.attempts} attempts of 9 allowed: {done.failure_reason}",
        ok,
    )


# ---- api ----------------------------------------------------------------------------------------


def api(tmp: Path) -> list[Attack]:
    from fastapi.testclient import TestClient
    from sqlalchemy import update

    from ccscope.api.app import create_app
    from ccscope.store import Store
    from ccscope.store.models import Campaign
    from ccscope.workers.celery_app import beat_schedule

    st = Store(f"sqlite:///{tmp / 'api-abuse.db'}", str(tmp / "traces"))
    st.migrate()
    st.add_vantage("paris")
    st.import_list("tranco", dt.date(2026, 11, 1), [(1, "public-site.com")], "tranco")
    auth = {"Authorization": "Bearer tok"}

    def camp(name: str, schedule: str, profiles: list[str] | None = None) -> dict[str, Any]:
        return {
            "name": name,
            "list_name": "tranco",
            "top_n": 1,
            "transports": ["tcp"],
            "vantages": ["paris"],
            "schedule": schedule,
            "profiles": profiles or ["default"],
        }

    out = []
    with TestClient(create_app(st, token="tok")) as c:
        good = c.post("/v1/campaigns", json=camp("good", "0 3 * * 1"), headers=auth).json()["id"]
        for i, sched in enumerate(("0 3 30 2 *", "*/0 * * * *", "61 25 32 13 8")):
            r = c.post("/v1/campaigns", json=camp(f"bad{i}", sched), headers=auth)
            why = str(r.json().get("detail", ""))[:90] if r.status_code == 422 else ""
            got = f"HTTP {r.status_code} {why}".strip()
            out.append(Attack(f"campaign schedule {sched!r} (POST)", "api", got, r.status_code == 422))
            r = c.patch(f"/v1/campaigns/{good}", json={"schedule": sched}, headers=auth)
            out.append(
                Attack(
                    f"campaign schedule {sched!r} (PATCH)",
                    "api",
                    f"HTTP {r.status_code}",
                    r.status_code == 422,
                )
            )
        zzz = {"target": "public-site.com", "vantage": "paris", "profile": "zzz"}
        r = c.post("/v1/measurements", json=zzz, headers=auth)
        out.append(
            Attack("measurement with profile 'zzz'", "api", f"HTTP {r.status_code}", r.status_code == 422)
        )
        r = c.post("/v1/measurements", json={"target": "public-site.com", "vantage": "paris"})
        out.append(
            Attack("measurement without a token", "api", f"HTTP {r.status_code}", r.status_code == 401)
        )
    bad = st.create_campaign("poisoned", "tranco", 1, ["tcp"], ["default"], ["paris"], "0 4 * * 1")
    with st.sessions.begin() as s:
        s.execute(update(Campaign).where(Campaign.id == bad.id).values(schedule="0 3 30 2 *"))
    sched = beat_schedule(st)
    ok = f"campaign-{good}" in sched and f"campaign-{bad.id}" not in sched
    out.append(
        Attack(
            "campaign row with schedule '0 3 30 2 *' written past the API",
            "api",
            f"beat schedules the good campaign: {f'campaign-{good}' in sched}, the poisoned one: "
            f"{f'campaign-{bad.id}' in sched}",
            ok,
        )
    )
    argv = [PY, "-m", "ccscope.cli", "campaign", "run", str(bad.id), "--embedded", "--db", st.url]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    clean = p.returncode != 0 and "Traceback" not in p.stderr
    out.append(
        Attack(
            "campaign run --embedded of the poisoned row",
            "api",
            f"exit {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1][:100]}",
            clean,
        )
    )
    st.close()
    return out


# ---- inputs -------------------------------------------------------------------------------------


def _hostile_inputs(tmp: Path) -> list[tuple[str, str, Path]]:
    out = [(kind, what, sparse(tmp / name, head)) for kind, name, head, what in SPARSE_INPUTS]
    rec = struct.pack("<IIII", 0, 0, 0x7FFFFFFF, 0x7FFFFFFF)  # a record claiming 2 GB
    (tmp / "claim.pcap").write_bytes(PCAP_HEADER + rec + b"\x45" * 64)
    out.append(("pcap", "pcap record claiming 2 GB", tmp / "claim.pcap"))
    bomb = gzip_bomb(tmp / "bomb.trace.json.gz")
    out.append(("trace", f"gzip bomb ({bomb.stat().st_size / 1e6:.1f} MB inflating to 250 MB)", bomb))
    return out


_MUTATE = """
import json, random, sys
sys.path.insert(0, sys.argv[1])
from ccscope.capture.tcp_bif import flows_from_pcap
from ccscope.errors import CCScopeError
from tests.capture.synth import seed_pcaps
rng = random.Random(18)
seeds = seed_pcaps()
res = {"ok": 0, "clean_error": 0, "crash": []}
for i in range(50):
    b = bytearray(rng.choice(seeds))
    for _ in range(rng.randint(1, 12)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    if rng.random() < 0.3:
        b = b[: rng.randrange(24, len(b))]
    try:
        flows_from_pcap(bytes(b))
        res["ok"] += 1
    except CCScopeError:
        res["clean_error"] += 1
    except Exception as e:
        res["crash"].append(f"{type(e).__name__}: {e}"[:120])
print(json.dumps(res))
"""


def inputs(tmp: Path, figures: dict[str, Any]) -> list[Attack]:
    out = []
    rss: dict[str, float] = {}
    for kind, name, path in _hostile_inputs(tmp):
        code, mb, err = peak_rss(load_cmd(kind, path))
        rss[name] = round(mb, 1)
        why = err.strip().splitlines()[-1][:100] if err.strip() else ""
        log(f"input {name}: exit {code}, {mb:.0f} MB")
        out.append(
            Attack(name, "input", f"exit {code} ({why}); peak RSS {mb:.0f} MB", code == 3 and mb <= REJECT_MB)
        )
        path.unlink()
    figures["rss_mb"] = rss
    figures["max_rss_mb_rejected_input"] = max(rss.values())

    p = subprocess.run([PY, "-c", _MUTATE, str(REPO)], capture_output=True, text=True, timeout=600)
    res = json.loads(p.stdout.strip().splitlines()[-1])
    out.append(
        Attack(
            "50 mutated pcaps",
            "input",
            f"{res['ok']} parsed, {res['clean_error']} clean errors, {len(res['crash'])} crashes "
            f"{res['crash'][:3]}",
            not res["crash"],
        )
    )

    csv = million_row_csv(tmp / "long.csv")
    size_mb = csv.stat().st_size / 1e6
    code = (
        "from ccscope.capture.nebby_csv import traces_from_csv\n"
        f"r = traces_from_csv({str(csv)!r})\nassert len(r.traces) == 1 and len(r.traces[0].t) > 999_000\n"
    )
    rc, mb, err = peak_rss([PY, "-c", code])
    csv.unlink()
    figures["csv_1e6"] = {
        "rows": 1_000_000,
        "size_mb": round(size_mb, 1),
        "rss_mb": round(mb, 1),
        "ratio": round(mb / size_mb, 2),
    }
    log(f"1e6-row CSV: {size_mb:.0f} MB, {mb:.0f} MB RSS")
    out.append(
        Attack(
            "1e6-row CSV (one real flow)",
            "input",
            f"accepted: exit {rc}; peak RSS {mb:.0f} MB for {size_mb:.0f} MB ({mb / size_mb:.1f}x)",
            rc == 0 and mb <= 4 * size_mb,
        )
    )
    return out


# ---- lab CA -------------------------------------------------------------------------------------


def lab_ca(tmp: Path) -> list[Attack]:
    from tests.hardening.test_lab_ca import test_lab_ca_is_name_constrained_and_its_leaves_verify as check

    try:
        check(tmp)
        return [
            Attack(
                "lab CA key signs a leaf for bank.example",
                "lab_ca",
                "name constraints (lab.test, 198.18.0.0/16): the client refuses it "
                "(permitted subtree violation)",
                True,
            )
        ]
    except AssertionError as e:
        return [Attack("lab CA key signs a leaf for bank.example", "lab_ca", f"accepted: {e}"[:200], False)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/hardening.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/hardening needs root (namespaces, ccscope-link)", file=sys.stderr)
        return 2
    os.environ.pop("CCSCOPE_LAB", None)
    t0 = time.monotonic()
    figures: dict[str, Any] = {}
    attacks: list[Attack] = []
    with tempfile.TemporaryDirectory(prefix="ccscope-bench-hardening-", dir="/var/tmp") as d:
        tmp = Path(d)
        steps: list[tuple[str, Callable[[Path], list[Attack]]]] = [
            ("ssrf", ssrf),
            ("privileges", lambda _t: privileges()),
            ("orphans", orphans),
            ("api", api),
            ("input", lambda t: inputs(t, figures)),
            ("lab_ca", lab_ca),
        ]
        for name, step in steps:
            log(f"{name} ...")
            sub = tmp / name
            sub.mkdir()
            got = step(sub)
            attacks += got
            log(f"{name}: {sum(a.passed for a in got)}/{len(got)} held")
    held = sum(a.passed for a in attacks)
    res = {
        "bench": "hardening",
        "attacks": [asdict(a) for a in attacks],
        "passed": {"count": held, "total": len(attacks), "all": held == len(attacks)},
        **figures,
        "seconds": round(time.monotonic() - t0, 1),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    for a in attacks:
        if not a.passed:
            log(f"FAILED {a.category}/{a.name}: {a.outcome}")
    worst = figures["max_rss_mb_rejected_input"]
    log(f"{held}/{len(attacks)} attacks held; max RSS of a rejected input {worst} MB")
    return 0 if held == len(attacks) else 1


if __name__ == "__main__":
    sys.exit(main())
