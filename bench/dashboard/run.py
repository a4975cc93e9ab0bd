#!/usr/bin/env python3
"""Benchmark of the dashboard over 100,000 verdicts in PostgreSQL, and of `ccscope check`.

Pages (all real, all on this machine, torn down at the end):

* a throwaway PostgreSQL cluster with the API benchmark's data set (bench/api/run.py `load`:
  20,000 domains, 2 vantage points, 2 campaigns, 100,000 verdicts by COPY, then the Unknown
  family column filled as `record_verdict` would and `Store.rebuild_census()`), plus 40 domains
  measured the way the service records them: real lab traces (tests/fixtures) classified by the
  shipped model, stored through the store's calls, so their pages draw real BiF plots;
* the API as deployed (`python -m ccscope.api.server`, one uvicorn worker: the page time of one
  process), the dashboard mounted in it;
* `page_p95_ms`: server time per page, from sequential requests over keep-alive loopback (one
  client, no concurrency: a request's wall time is the server's time plus a loopback round trip
  of ~0.1 ms). Census page (all
  campaigns, and one campaign; rendered afresh each time: the census version is bumped before
  each request, as a recorded verdict does, so the page cache misses; `census_page_cached_*`
  are the hits), domain pages with traces (40 distinct domains, 3 rounds: the
  first round draws every trace cold, `domain_cold_p95_ms`) and bulk domains (no traces);
* `chromium_load_ms`: headless Chromium (Debian's, Selenium) from navigation start to the load
  event, when every inline SVG chart is drawn (the charts are part of the HTML, no script draws
  them); checked by counting the charts' series. Median and p95 of 10 loads per page.

`check_s` (optional, needs root and `--lab-instance N`): a lab with one CUBIC server comes up on
instance N; `ccscope check --lab cubic.lab.test` runs end to end (crawl, both profiles, classify,
plot), then the same by hand: `ccscope crawl`, `ccscope measure --lab URL --out D`, `ccscope
classify D/A.sender.trace.json D/B.sender.trace.json`, each timed.

usage: python bench/dashboard/run.py --out bench/results/dashboard.json [--lab-instance 40]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from ccscope.store import Store
from ccscope.store.pgcluster import free_port, running_cluster

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _api_bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_api", ROOT / "bench" / "api" / "run.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def seed_traced(store: Store, n: int) -> list[str]:
    """n domains measured as the service records them, with real traces."""
    from tests.dashboard.seed import traces_of

    ccas = ["cubic", "bbr", "reno", "bic", "vegas-a6", "veno", "bbr2", "lp"]
    store.add_vantage("lab")
    domains = []
    for i in range(n):
        d = f"traced{i:03d}.example"
        blobs, verdict = traces_of(ccas[i % len(ccas)])
        m, _ = store.enqueue_measurement(d, "lab", "tcp", f"bench-{i}")
        store.transition(m.id, "running")
        for prof, blob in zip("AB", blobs, strict=True):
            store.add_trace(m.id, blob, profile=prof)
        store.transition(m.id, "captured")
        store.record_verdict(m.id, verdict)
        domains.append(d)
    return domains


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def timed_gets(c: httpx.Client, paths: list[str]) -> list[float]:
    out = []
    for p in paths:
        t0 = time.perf_counter()
        r = c.get(p)
        out.append((time.perf_counter() - t0) * 1000)
        if r.status_code != 200:
            raise RuntimeError(f"{p}: HTTP {r.status_code}")
    return out


def chromium_loads(base: str, paths: list[str], rounds: int) -> dict[str, Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    os.environ.setdefault("SE_OFFLINE", "true")
    profile = tempfile.mkdtemp(prefix="ccscope-bench-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--window-size=1280,1600"]  # fmt: skip
    for a in [*flags, f"--user-data-dir={profile}"]:
        opts.add_argument(a)
    drv = webdriver.Chrome(
        service=Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=opts
    )
    out: dict[str, Any] = {}
    try:
        for p in paths:
            times = []
            for _ in range(rounds):
                drv.get(base + p)
                nav = drv.execute_script(
                    "const n = performance.getEntriesByType('navigation')[0];"
                    "return [n.loadEventEnd, n.responseStart - n.requestStart];"
                )
                charts = drv.find_elements(By.CSS_SELECTOR, "svg.chart g.series")
                if not charts:
                    raise RuntimeError(f"{p}: no chart series drawn")
                times.append(float(nav[0]))
            out[p] = {"median_ms": round(statistics.median(times), 1), "p95_ms": round(pct(times, 95), 1)}
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return out


def bench_pages(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    api = _api_bench()
    res: dict[str, Any] = {"pages_loadavg_1m": [round(os.getloadavg()[0], 2)]}
    with running_cluster() as pg:
        url = pg.new_database()
        store = Store(url, str(tmp / "traces"))
        store.migrate()
        t = time.monotonic()
        data = api.load(store, args.domains, args.per_domain, args.seed)
        with store.engine.begin() as c:  # what record_verdict fills; COPY went around it
            c.execute(text("UPDATE verdicts SET nearest = evidence->>'nearest' WHERE kind = 'unknown'"))
        traced = seed_traced(store, args.traced)
        store.rebuild_census()
        with store.engine.connect() as c:
            res["verdicts"] = int(c.execute(text("SELECT count(*) FROM verdicts")).scalar() or 0)
        res["load_s"] = round(time.monotonic() - t, 1)
        log(f"loaded {res['verdicts']} verdicts in {res['load_s']} s")
        port = free_port()
        env = {**os.environ, "CCSCOPE_DB_URL": url, "CCSCOPE_TRACE_DIR": str(tmp / "traces")}
        env.pop("CCSCOPE_BROKER_URL", None)
        srv = subprocess.Popen(
            [sys.executable, "-m", "ccscope.api.server", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, timeout=60) as c:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        if c.get("/health").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if time.monotonic() > deadline or srv.poll() is not None:
                        raise RuntimeError("the API did not come up")
                    time.sleep(0.2)
                campaign = data["campaigns"][0]
                census_paths = ["/", f"/?campaign_id={campaign}"]
                timed_gets(c, census_paths * 3)  # warm-up: imports, templates
                # Rendered census pages are cached under the census version (every recorded
                # verdict bumps it): bumped before each timed request, every request renders
                # the page from the store (the figure that counts); then cache hits.
                census = []
                for p in census_paths * args.requests:
                    with store.engine.begin() as conn:
                        conn.execute(text("UPDATE census_version SET version = version + 1"))
                    census += timed_gets(c, [p])
                census_hit = timed_gets(c, census_paths * args.requests)
                cold = timed_gets(c, [f"/domains/{d}" for d in traced])
                warm = timed_gets(c, [f"/domains/{d}" for d in traced] * 2)
                bulk_domains = data["domains"][:: max(1, len(data["domains"]) // 100)][:100]
                bulk = timed_gets(c, [f"/domains/{d}" for d in bulk_domains])
                others = timed_gets(c, ["/unknown", "/accuracy"] * 10)
            domain = cold + warm
            res.update(
                {
                    "census_page_p50_ms": round(pct(census, 50), 1),
                    "census_page_p95_ms": round(pct(census, 95), 1),
                    "census_page_cached_p95_ms": round(pct(census_hit, 95), 1),
                    "domain_page_p50_ms": round(pct(domain, 50), 1),
                    "domain_page_p95_ms": round(pct(domain, 95), 1),
                    "domain_cold_p95_ms": round(pct(cold, 95), 1),
                    "domain_no_trace_p95_ms": round(pct(bulk, 95), 1),
                    "unknown_accuracy_p95_ms": round(pct(others, 95), 1),
                    "requests": len(census) + len(census_hit) + len(domain) + len(bulk) + len(others),
                }
            )
            res["page_p95_ms"] = {"census": res["census_page_p95_ms"], "domain": res["domain_page_p95_ms"]}
            log(f"pages: {res['page_p95_ms']}")
            res["chromium"] = chromium_loads(base, ["/", f"/domains/{traced[0]}"], args.browser_rounds)
            res["chromium_load_ms"] = {
                "census": res["chromium"]["/"]["median_ms"],
                "domain": res["chromium"][f"/domains/{traced[0]}"]["median_ms"],
            }
            log(f"chromium: {res['chromium_load_ms']}")
            res["pages_loadavg_1m"].append(round(os.getloadavg()[0], 2))  # other work competing
        finally:
            srv.terminate()
            srv.wait(timeout=30)
            store.close()
    return res


def _run(
    cmd: list[str], env: dict[str, str], timeout: float
) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return time.monotonic() - t0, r


def bench_check(instance: int, tmp: Path) -> dict[str, Any]:
    """`ccscope check` against a lab CUBIC site, beside the same steps by hand."""
    ccscope = [sys.executable, "-m", "ccscope.cli"]
    state = tmp / "lab"
    env = {**os.environ, "CCSCOPE_LAB_DIR": str(state)}
    up = subprocess.run(
        [*ccscope, "lab", "up", "--instance", str(instance), "--ccas", "cubic", "--delay", "10"],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    if up.returncode != 0:
        raise RuntimeError(f"lab up failed: {up.stderr.strip()[-400:]}")
    try:
        out: dict[str, Any] = {"lab_instance": instance, "check_loadavg_1m": [round(os.getloadavg()[0], 2)]}
        secs, r = _run(
            [*ccscope, "check", "--lab", "--json", "--out", str(tmp / "check"), "cubic.lab.test"], env, 600
        )
        doc = json.loads(r.stdout) if r.stdout.strip() else {}
        out["check_s"] = round(secs, 1)
        out["check_exit"] = r.returncode
        out["check_verdict"] = ((doc.get("verdict") or {}).get("display")) or r.stderr.strip()[-300:]
        out["check_steps_s"] = doc.get("seconds")
        out["check_object"] = {"url": doc.get("url"), "bytes": doc.get("object_bytes")}
        url = doc.get("url")
        secs, r = _run(
            [*ccscope, "crawl", "--lab", "--db", f"sqlite:///{tmp / 'crawl.db'}", "cubic.lab.test"], env, 300
        )
        out["hand_crawl_s"] = round(secs, 1)
        url = url or json.loads(r.stdout or "{}").get("url")
        secs, r = _run([*ccscope, "measure", "--lab", "--out", str(tmp / "hand"), str(url)], env, 600)
        out["hand_measure_s"] = round(secs, 1)
        files = [str(tmp / "hand" / f"{p}.sender.trace.json") for p in "AB"]
        secs, r = _run([*ccscope, "classify", "--json", *files], env, 300)
        out["hand_classify_s"] = round(secs, 1)
        hand = json.loads(r.stdout)["verdicts"][0]["verdict"] if r.stdout.strip() else {}
        out["hand_verdict"] = hand.get("display")
        out["hand_total_s"] = round(out["hand_crawl_s"] + out["hand_measure_s"] + out["hand_classify_s"], 1)
        out["check_loadavg_1m"].append(round(os.getloadavg()[0], 2))
        return out
    finally:
        subprocess.run([*ccscope, "lab", "down"], env=env, capture_output=True, timeout=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/dashboard.json")
    ap.add_argument("--domains", type=int, default=20_000)
    ap.add_argument("--per-domain", type=int, default=5)
    ap.add_argument("--traced", type=int, default=40, help="domains with real traces (BiF plots)")
    ap.add_argument("--requests", type=int, default=50, help="rounds over the census pages")
    ap.add_argument("--browser-rounds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--lab-instance", type=int, help="also time `ccscope check` on this lab instance")
    ap.add_argument("--skip-pages", action="store_true", help="only the check figures")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ccscope-bench-dash-"))
    out: dict[str, Any] = {"date": dt.date.today().isoformat()}
    try:
        if not args.skip_pages:
            out.update(bench_pages(args, tmp))
        if args.lab_instance is not None:
            out.update(bench_check(args.lab_instance, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["targets"] = {"page_p95_ms": "< 300 (census and domain page)", "chromium_load_ms": "< 1500"}
    py = platform.python_version()
    out["host"] = f"vm: {os.cpu_count()} CPUs, Linux {platform.release()}, Python {py}"
    old = {}
    if Path(args.out).exists() and (args.skip_pages or args.lab_instance is None):
        old = json.loads(Path(args.out).read_text())  # keep the half this run did not redo
    Path(args.out).write_text(json.dumps({**old, **out}, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
