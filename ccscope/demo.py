"""The main job on embedded defaults: a census of lab sites through the service.

1. The lab comes up with web sites whose servers run a mix of CCAs (kernel reno/cubic/bbr and
   BPF zoo CCAs, loaded on demand) behind an emulated Internet path.
2. A census campaign over those sites runs through the service on its embedded defaults (the
   SQLite store and trace directory, the campaign planner, the worker pipeline with the crawler
   finding each site's largest object, the classifier) from two emulated vantage points: each
   vantage point's downloads cross their own access path (a shell around the profile's shell).
3. The census table (CCA shares per vantage point) is printed with each site's verdict beside
   the CCA its server really runs, and the accuracy. A second census runs over QUIC against the
   lab's HTTP/3 sites (lab/quic: quiche, aioquic, quic-go with their CCAs), whatever of them
   runs here.
4. The API is left serving the store, so the census can be browsed (Ctrl-C stops it).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable

from ccscope.lab.lab import Lab, LabParams
from ccscope.store.core import Store, default_data_dir
from ccscope.workers.census import (
    CensusReport,
    VantageSpec,
    import_list_file,
    lab_truth,
    model_has_quic_classes,
    run_census,
    write_list,
)

# A small web: several sites per popular CCA, as on the Internet, and one each of a few others.
DEMO_SITES: tuple[tuple[str, str], ...] = (
    ("search.lab.test", "bbr"),
    ("video.lab.test", "bbr"),
    ("shop.lab.test", "cubic"),
    ("news.lab.test", "cubic"),
    ("wiki.lab.test", "cubic"),
    ("mail.lab.test", "reno"),
    ("blog.lab.test", "bic"),
    ("maps.lab.test", "htcp"),
    ("bank.lab.test", "vegas"),
    ("cdn.lab.test", "westwood"),
    ("games.lab.test", "illinois"),
    ("docs.lab.test", "scalable"),
)
# Two "locations" of the measuring side: the same lab reached over different access paths.
DEMO_VANTAGES: tuple[VantageSpec, ...] = (
    VantageSpec("lab-near", ("--delay", "5"), "emulated vantage point: +5 ms one-way access path"),
    VantageSpec(
        "lab-far", ("--delay", "60", "--jitter", "1"), "emulated vantage point: +60 ms one-way, 1 ms jitter"
    ),
)
DEMO_LIST = "lab-demo"
# HTTP/3 sites: one per lab QUIC stack x CCA that runs here (lab/quic). Their QUIC servers sit on
# addresses that also serve HTTPS over TCP, so the crawler finds their object as on any site and
# the worker finds HTTP/3 there by a probe (they send no Alt-Svc).
DEMO_QUIC_LIST = "lab-demo-quic"


def demo_ccas(sites: tuple[tuple[str, str], ...] = DEMO_SITES) -> tuple[str, ...]:
    return tuple(dict.fromkeys(cca for _, cca in sites))


def run_demo(
    *,
    serve: bool = True,
    host: str = "127.0.0.1",
    port: int = 8080,
    concurrency: int = 16,
    keep_lab: bool = False,
    db_url: str | None = None,
    trace_dir: str | None = None,
    sites: tuple[tuple[str, str], ...] = DEMO_SITES,
    vantages: tuple[VantageSpec, ...] = DEMO_VANTAGES,
    profiles: tuple[str, ...] = ("A", "B"),
    with_quic: bool = True,
    as_json: bool = False,
) -> int:
    from ccscope.lab import ccas as zoo

    ccas = demo_ccas(sites)
    from ccscope.lab.quic.lab import resolve_servers

    quic = resolve_servers(("all",)) if with_quic else ()
    zoo_needed = [c for c in ccas if c not in zoo.kernel_available()]
    if zoo_needed:
        zoo.ensure_loaded(zoo_needed)
    store = Store(db_url, trace_dir)
    store.migrate()
    say = _say(as_json)
    say(f"ccscope demo: store {store.engine.url.render_as_string(hide_password=True)}")
    lab = Lab()
    say(
        f"lab: {len(sites)} sites on {len(ccas)} CCAs ({', '.join(ccas)}) behind a 10 ms one-way "
        "Internet path"
    )
    # Just above the crawler's 400 KiB preference, so it is the pick: 17 s at 200 kbit/s.
    # The census keeps no lab ground truth (the verdicts are scored against the sites' CCAs),
    # so the servers skip their 1 ms TCP_INFO samples: CPU the measurements need on 2 cores.
    lab.up(LabParams(ccas=ccas, delay_ms=10.0, sites=sites, large_bytes=420_000, quic=quic,
                     sample_interval_ms=0))  # fmt: skip
    try:
        # A list per day: the demo re-run on one day reuses it, its campaigns stay apart.
        lst = write_list(
            default_data_dir() / f"{DEMO_LIST}_{dt.date.today().isoformat()}.csv", [h for h, _ in sites]
        )
        list_name, _ = import_list_file(store, lst, DEMO_LIST)
        say(
            f"census of {len(sites)} sites from {len(vantages)} vantage points "
            f"({'; '.join(f'{v.name}: {v.description}' for v in vantages)}), "
            f"profiles {'+'.join(profiles)}, up to {concurrency} concurrent measurements each ..."
        )
        rep = run_census(
            store,
            list_name,
            len(sites),
            vantages,
            profiles=profiles,
            lab=True,
            concurrency=concurrency,
            truth=lab_truth(),
        )
        qrep = None
        qsites = [q["hostname"] for q in (lab.state() or {}).get("quic_servers") or []]
        if qsites:
            qlst = write_list(
                default_data_dir() / f"{DEMO_QUIC_LIST}_{dt.date.today().isoformat()}.csv", qsites
            )
            qname, _ = import_list_file(store, qlst, DEMO_QUIC_LIST)
            say(f"census of {len(qsites)} HTTP/3 sites over QUIC (profiles A-quic+B-quic) ...")
            qrep = run_census(
                store,
                qname,
                len(qsites),
                vantages,
                profiles=profiles,
                lab=True,
                concurrency=concurrency,
                truth=lab_truth(),
                transports=("quic",),
            )
    finally:
        if not keep_lab:
            lab.down()
    if as_json:
        doc = rep.to_dict()
        if qrep is not None:
            doc["quic"] = qrep.to_dict()
        print(json.dumps(doc, indent=2, default=str), flush=True)
    else:
        print()
        print(rep.format())
        if qrep is not None:
            print()
            print(qrep.format())
            if model_has_quic_classes():
                print("QUIC truth = the stack's own CCA class (the model has QUIC classes)")
            else:
                print("QUIC truth = the TCP family the stack's CCA implements (no QUIC classes are trained)")
    ok = bool(rep.results) and all(r.state == "classified" for r in rep.results)
    if not ok:
        print("\nsome measurements failed; see the reasons above", file=sys.stderr)
    if serve:
        _serve(store, rep, host, port, say)
    return 0 if ok else 1


def _say(to_stderr: bool) -> Callable[[str], None]:
    """Progress lines: stdout normally, stderr when stdout carries the JSON report."""

    def say(msg: str) -> None:
        print(msg, file=sys.stderr if to_stderr else sys.stdout, flush=True)

    return say


def _free_port(host: str, port: int) -> int:
    """`port`, or the next free one: a second demo must not fail because the first still serves."""
    import socket

    for p in range(port, port + 50):
        with socket.socket() as s:
            try:
                s.bind((host, p))
            except OSError:
                continue
            return p
    return port


def _serve(store: Store, rep: CensusReport, host: str, port: int, say: Callable[[str], None]) -> None:
    import logging

    import uvicorn

    from ccscope.api.app import create_app

    port = _free_port(host, port)
    base = f"http://{host}:{port}"
    say(
        f"\nDashboard: {base}/   (the census beside the 2001-2023 published history; Ctrl-C stops it)\n"
        f"API serving the store at {base}/v1 (docs: {base}/docs). Try:\n"
        f"  curl -s '{base}/v1/census?campaign_id={rep.campaign_id}'\n"
        f"  curl -s {base}/v1/domains/{rep.sites[0]}\n"
        f"  curl -s '{base}/v1/census.csv?campaign_id={rep.campaign_id}'"
    )
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    uvicorn.run(create_app(store), host=host, port=port, log_level="warning")
