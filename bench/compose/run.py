#!/usr/bin/env python3
"""The deployment, brought up for real: docker-compose.yml on this host, and a small lab campaign
run through it (the README's distributed section, command for command).

1. A Docker engine: the one DOCKER_HOST answers on, else Debian's docker.io started here
   (dockerd with no bridge and no iptables rules of its own: every container uses the host's
   network, see docker-compose.yml). docker-compose is Debian's (1.29), or `docker compose`.
2. `deploy/build-base.sh` (debootstrap; skipped when the image exists), then the images.
3. A lab on the host (instance 73): six sites, three CCAs; the workers see it through the
   host's /run/ccscope, as any worker on a lab host would.
4. `docker-compose up -d` with free ports in an env file; compose_up_s is from there to the
   API's /health answering 200 (images already built).
5. Through the containers, as an operator would: the vantage points and the site list with
   `ccscope` in the API container, a weekly campaign by POST /v1/campaigns (bearer token), run
   now by `ccscope campaign run` (beat would run it on Monday at 03:00), then the census read
   from the API until every measurement is in; one trace downloaded through the API (it is in
   the S3 container); Prometheus asked whether it scrapes the API.
6. `docker-compose down -v`, the lab down. compose.json gets every figure; scale.json gets
   compose_up_s and compose_campaign_ok.

usage: python bench/compose/run.py --out bench/results/compose.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
LAB_INSTANCE = 73
LAB_DIR = "/run/ccscope/lab-bench-compose"
OWN_SOCKET = "unix:///run/ccscope-docker.sock"
PROJECT = "ccscope-bench"
SITES = (
    ("shop.lab.test", "cubic"),
    ("news.lab.test", "cubic"),
    ("mail.lab.test", "reno"),
    ("wiki.lab.test", "reno"),
    ("video.lab.test", "bbr"),
    ("search.lab.test", "bbr"),
)


def log(msg: str) -> None:
    print(f"[compose {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], *, check: bool = True, input: str | None = None, timeout: float = 1800) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, input=input, timeout=timeout, cwd=REPO)
    if check and p.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd[:6])} ... failed ({p.returncode}):\n{(p.stderr or p.stdout)[-3000:]}"
        )
    return p.stdout


def engine() -> dict[str, Any]:
    """A Docker engine to talk to: the configured one, or dockerd started here."""
    if subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return {"started_here": False}
    os.environ["DOCKER_HOST"] = OWN_SOCKET
    if subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return {"started_here": False, "socket": OWN_SOCKET}
    need = [
        p
        for p, exe in (
            ("docker.io", "dockerd"),
            ("docker-compose", "docker-compose"),
            ("debootstrap", "debootstrap"),
        )
        if not shutil.which(exe)
    ]
    if need:
        log(f"apt: installing {' '.join(need)}")
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *need])
    log("starting dockerd (no bridge, no iptables rules: containers use the host's network)")
    logf = open("/var/tmp/ccscope-dockerd.log", "ab")  # noqa: SIM115 - dockerd outlives this bench
    subprocess.Popen(
        [
            "dockerd",
            "--iptables=false",
            "--ip6tables=false",
            "--bridge=none",
            "--data-root",
            "/var/lib/ccscope-docker",
            "--exec-root",
            "/run/ccscope-docker",
            "--pidfile",
            "/run/ccscope-docker.pid",
            "-H",
            OWN_SOCKET,
        ],
        stdout=logf,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        if time.monotonic() > deadline:
            raise SystemExit("dockerd did not start: see /var/tmp/ccscope-dockerd.log")
        time.sleep(1)
    return {"started_here": True, "socket": OWN_SOCKET}


def compose_cmd() -> list[str]:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise SystemExit("neither `docker compose` nor docker-compose is installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/compose.json")
    ap.add_argument("--scale-json", default="bench/results/scale.json")
    ap.add_argument("--keep", action="store_true", help="leave the deployment up afterwards")
    ap.add_argument("--timeout", type=float, default=420, help="seconds for the campaign")
    ap.add_argument(
        "--lock",
        help="take this flock before the lab comes up (the shared netns lock): the image builds "
        "before it need no lock",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        log("bench/compose needs root (the engine, the lab)")
        return 2
    link = REPO / "capture/link/target/release/ccscope-link"
    if not link.exists():
        log("ccscope-link is not built: run `make setup` first (the worker image takes it)")
        return 2
    res: dict[str, Any] = {"engine": engine()}
    dc = [*compose_cmd(), "-p", PROJECT, "--env-file"]
    res["compose"] = " ".join(compose_cmd())
    res["engine"]["version"] = run(["docker", "version", "-f", "{{.Server.Version}}"]).strip()
    res["engine"]["storage_driver"] = run(["docker", "info", "-f", "{{.Driver}}"]).strip()

    t0 = time.monotonic()
    run(["deploy/build-base.sh"])
    res["base_image_s"] = round(time.monotonic() - t0, 1)
    ports = {k: free_port() for k in ("PG_PORT", "REDIS_PORT", "S3_PORT", "API_PORT", "PROM_PORT")}
    token = secrets.token_hex(16)
    env_file = Path("/var/tmp/ccscope-bench-compose.env")
    env_file.write_text(
        "".join(f"{k}={v}\n" for k, v in ports.items())
        + f"CCSCOPE_API_TOKEN={token}\nCCSCOPE_LAB=1\nCCSCOPE_LAB_DIR={LAB_DIR}\nWORKER_CONCURRENCY=6\n"
        + "DB_PASSWORD=bench\nNEAR_ACCESS=--delay 5\nFAR_ACCESS=--delay 40 --jitter 1\n"
    )
    dc += [str(env_file)]
    t0 = time.monotonic()
    log("building the images (cached after the first run)")
    run([*dc, "build"])
    res["build_s"] = round(time.monotonic() - t0, 1)

    from ccscope.lab.lab import Lab, LabParams

    if args.lock:
        import fcntl

        lock = open(args.lock, "a")  # noqa: SIM115 - held until the process exits
        log(f"waiting for {args.lock}")
        fcntl.flock(lock, fcntl.LOCK_EX)
    lab = Lab(LAB_DIR)
    lab.up(
        LabParams(
            ccas=("cubic", "reno", "bbr"),
            delay_ms=10.0,
            sites=SITES,
            instance=LAB_INSTANCE,
        )
    )
    api = f"http://127.0.0.1:{ports['API_PORT']}"
    auth = {"Authorization": f"Bearer {token}"}
    ok = False
    try:
        log("docker-compose up -d")
        t0 = time.monotonic()
        run([*dc, "up", "-d"])
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"the API did not come up:\n{run([*dc, 'logs', '--tail', '40'], check=False)}"
                )
            time.sleep(0.5)
        res["compose_up_s"] = round(time.monotonic() - t0, 1)
        log(f"up and healthy in {res['compose_up_s']} s")

        ex = [*dc, "exec", "-T", "api"]
        for v in ("near", "far"):
            run([*ex, "ccscope", "vantage", "add", v])
        csv = "".join(f"{i + 1},{h}\n" for i, (h, _) in enumerate(SITES))
        run([*ex, "sh", "-c", "cat > /tmp/lab_sites.csv"], input=csv)
        run(
            [
                *ex,
                "ccscope",
                "lists",
                "import",
                "/tmp/lab_sites.csv",
                "--name",
                "lab",
                "--date",
                dt.date.today().isoformat(),
            ]
        )
        r = httpx.post(
            f"{api}/v1/campaigns",
            headers=auth,
            timeout=10,
            json={
                "name": "weekly-lab",
                "list_name": "lab",
                "top_n": len(SITES),
                "transports": ["tcp"],
                "vantages": ["near", "far"],
                "schedule": "0 3 * * 1",
            },
        )
        r.raise_for_status()
        cid = r.json()["id"]
        t0 = time.monotonic()
        planned = json.loads(run([*ex, "ccscope", "campaign", "run", str(cid)]).strip().splitlines()[-1])
        res["planned"] = planned
        want = len(SITES) * 2
        done: dict[str, int] = {}
        while time.monotonic() - t0 < args.timeout:
            rows = httpx.get(f"{api}/v1/census", params={"campaign_id": cid}, timeout=10).json()["rows"]
            done = {}
            for row in rows:
                done[row["vantage"]] = done.get(row["vantage"], 0) + row["count"]
            if sum(done.values()) >= want:
                break
            time.sleep(3)
        res["campaign_s"] = round(time.monotonic() - t0, 1)
        res["verdicts_per_vantage"] = done
        res["census"] = rows
        dom = httpx.get(f"{api}/v1/domains/{SITES[0][0]}", timeout=10).json()
        res["domain_example"] = dom
        mids = [v.get("measurement_id") for v in dom.get("latest", []) if v.get("measurement_id")]
        trace_ok = False
        if mids:
            t = httpx.get(f"{api}/v1/measurements/{mids[0]}/trace", timeout=10)
            trace_ok = t.status_code == 200 and b"ccscope-trace" in t.content[:200]
        res["trace_from_s3_via_api"] = trace_ok
        prom = httpx.get(f"http://127.0.0.1:{ports['PROM_PORT']}/api/v1/targets", timeout=10).json()
        res["prometheus_targets"] = [
            {"url": t["scrapeUrl"], "health": t["health"]} for t in prom["data"]["activeTargets"]
        ]
        ok = sum(done.values()) >= want and trace_ok
        res["compose_campaign_ok"] = ok
        res["containers"] = run([*dc, "ps"], check=False).splitlines()
        if not ok:
            res["logs_tail"] = run([*dc, "logs", "--tail", "30"], check=False)[-6000:]
    finally:
        if not args.keep:
            run([*dc, "down", "-v"], check=False)
        lab.down()
    res["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    res["host"] = {"cpus": os.cpu_count(), "load": [round(x, 2) for x in os.getloadavg()]}
    Path(args.out).write_text(json.dumps(res, indent=2, default=str) + "\n")
    sc = Path(args.scale_json)
    doc = json.loads(sc.read_text()) if sc.exists() else {}
    doc.update({"compose_up_s": res.get("compose_up_s"), "compose_campaign_ok": ok})
    sc.write_text(json.dumps(doc, indent=2) + "\n")
    log(
        json.dumps({k: res.get(k) for k in ("compose_up_s", "campaign_s", "verdicts_per_vantage")})
        + f" ok={ok}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
