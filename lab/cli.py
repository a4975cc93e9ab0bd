"""`ccscope lab up|down|status`.

`register(subparsers)` adds the `lab` command to the main parser; every handler returns an exit
code. `python -m ccscope.lab.cli ...` runs the same commands stand-alone.

Exit codes: 0 done / healthy; 1 failure or unhealthy lab; 3 (`status`) the lab is not up.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ccscope.errors import CCScopeError
from ccscope.lab.lab import Lab, LabParams, LabStatus
from ccscope.lab.registry import DEFAULT_CCAS, REGISTRY

EXIT_NOT_UP = 3


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "lab",
        help="lab servers with known CCAs behind an emulated Internet path (ground truth)",
        description="Run web servers with known congestion controls (one address per CCA, "
        "<cca>.lab.test, HTTP and HTTPS with a lab CA) behind an emulated Internet path, and "
        "record their TCP_INFO as ground truth.",
    )
    sub = p.add_subparsers(dest="lab_cmd", required=True, metavar="{up,down,status,ccas,validate}")

    q = sub.add_parser("up", help="start the lab (no-op if already up with the same settings)")
    _state_dir_arg(q)
    q.add_argument("--delay", type=float, default=10.0, metavar="MS",
                   help="one-way delay of the Internet path (default 10)")  # fmt: skip
    q.add_argument("--jitter", type=float, default=0.0, metavar="MS")
    q.add_argument("--loss", type=float, default=0.0, metavar="P", help="loss probability")
    q.add_argument("--rate", default="inf", metavar="KBIT|inf",
                   help="path rate in kbit/s (or a ccscope-link rate spec); default inf")  # fmt: skip
    q.add_argument("--buffer", metavar="SPEC", help="path buffer (5000B, 50p, 2bdp, inf)")
    q.add_argument("--cross-traffic", type=float, default=0.0, metavar="KBIT",
                   help="constant-rate UDP traffic sharing the path (default none)")  # fmt: skip
    q.add_argument("--ccas", default=",".join(DEFAULT_CCAS),
                   help=f"comma-separated (default {','.join(DEFAULT_CCAS)}; known: "
                   f"{','.join(c.name for c in REGISTRY)})")  # fmt: skip
    q.add_argument("--mtu", type=int, default=1500)
    q.add_argument(
        "--initcwnd", type=int, metavar="SEGS", help="servers' initial window (default: kernel's 10)"
    )
    q.add_argument("--gso", choices=("on", "off"), help="GSO on the servers' device (default: kernel's, on)")
    q.add_argument("--mss", type=int, metavar="BYTES", help="TCP_MAXSEG of every listener")
    q.add_argument("--nginx", action="store_true", help="also serve every CCA with nginx on :8080 (HTTP)")
    q.add_argument("--cross-sources", action="store_true",
                   help="run TCP (reno/cubic/bbr) and UDP cross-traffic sources on 198.18.N.2")  # fmt: skip
    q.add_argument(
        "--quic",
        nargs="?",
        const="all",
        metavar="LABELS",
        help="also run the QUIC servers (lab/quic: quiche, aioquic, quic-go with their CCAs, "
        "<cca>.<stack>.lab.test): all that can run here, or comma-separated labels like quiche:cubic",
    )
    q.add_argument(
        "--instance",
        type=int,
        default=0,
        metavar="N",
        help="run beside other labs: this lab's servers live in 198.18.N.0/24 (default 0)",
    )
    q.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for health")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_up)

    q = sub.add_parser("down", help="stop the lab and check nothing is left behind")
    _state_dir_arg(q)
    q.add_argument("--purge", action="store_true", help="also delete ground truth and certs")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_down)

    q = sub.add_parser("status", help="what is up, with a live health check")
    _state_dir_arg(q)
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_status)

    from ccscope.lab.ccas.cli import register as register_ccas

    register_ccas(sub)
    from ccscope.lab.validate import register as register_validate

    register_validate(sub)
    return p


def _state_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", help="lab state directory (default $CCSCOPE_LAB_DIR or "
                   "/run/ccscope/lab)")  # fmt: skip


def cmd_up(args: argparse.Namespace) -> int:
    params = LabParams(
        delay_ms=args.delay,
        jitter_ms=args.jitter,
        loss=args.loss,
        rate=args.rate,
        buffer=args.buffer,
        cross_traffic_kbit=args.cross_traffic,
        ccas=tuple(c.strip() for c in args.ccas.split(",") if c.strip()),
        mtu=args.mtu,
        instance=args.instance,
        initcwnd=args.initcwnd,
        gso=None if args.gso is None else args.gso == "on",
        mss=args.mss,
        nginx=args.nginx,
        cross_sources=args.cross_sources,
        quic=tuple(q.strip() for q in (args.quic or "").split(",") if q.strip()),
    )
    lab = Lab(args.state_dir)
    st = lab.up(params, timeout=args.timeout)
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    verb = "started" if st.get("changed") else "already up (unchanged)"
    print(f"lab {verb}: {_path_summary(st['params'])}")
    for s in st["servers"]:
        extra = f"  http://{s['hostname']}:{s['nginx_port']}/ (nginx)" if s.get("nginx_port") else ""
        print(f"  {s['cca']:>8}  {s['addr']:<14} {s['https_url']}{extra}")
    for q in st.get("quic_servers") or []:
        print(f"  {q['label']:>16}  {q['addr']:<14} {q['https_url']} (HTTP/3)")
    print(f"hosts file: {st['hosts_file']}\nCA:         {st['ca_file']}")
    print(f"ground truth: {st['groundtruth_dir']}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    rep = Lab(args.state_dir).down(purge=args.purge)
    if args.json:
        print(json.dumps(rep, indent=2))
    elif rep["was_up"]:
        print("lab stopped" + (" (ground truth and certificates deleted)" if args.purge else ""))
    else:
        print("lab was not up")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    s = Lab(args.state_dir).status()
    if args.json:
        print(json.dumps(s.to_dict(), indent=2))
    else:
        print(_status_text(s))
    if not s.up:
        return EXIT_NOT_UP
    return 0 if s.healthy else 1


def _path_summary(p: dict[str, Any]) -> str:
    parts = [f"delay {p['delay_ms']:g} ms one way", f"rate {p['rate']}"]
    if p.get("jitter_ms"):
        parts.append(f"jitter {p['jitter_ms']:g} ms")
    if p.get("loss"):
        parts.append(f"loss {p['loss']:g}")
    if p.get("buffer"):
        parts.append(f"buffer {p['buffer']}")
    if p.get("cross_traffic_kbit"):
        parts.append(f"cross traffic {p['cross_traffic_kbit']:g} kbit/s")
    return ", ".join(parts)


def _status_text(s: LabStatus) -> str:
    if not s.up:
        return f"lab is not up (state dir {s.state_dir})"
    st = s.state or {}
    lines = [
        f"lab is up ({'healthy' if s.healthy else 'UNHEALTHY'}), state dir {s.state_dir}",
        f"path: {_path_summary(st.get('params', {}))}",
    ]
    dev = st.get("link", {}).get("device")
    if dev:
        lines.append(f"path device: {dev} (outer address {st['link'].get('outer_addr')})")
    for srv in s.servers:
        mark = "ok " if srv.get("ok") else "BAD"
        detail = (f"uptime {srv.get('uptime_s')} s, {srv.get('records_written')} records"
                  if srv.get("ok") else srv.get("error"))  # fmt: skip
        lines.append(f"  [{mark}] {srv['cca']:>8}  {srv['addr']:<14} {detail}")
    if s.cross_traffic is not None:
        lines.append(f"cross traffic: {json.dumps(s.cross_traffic)}")
    lines.append(f"ground truth: {st.get('groundtruth_dir')}")
    for p in s.problems:
        lines.append(f"problem: {p}")
    if s.log_tail:
        lines.append("server log (tail):")
        lines += ["  " + ln for ln in s.log_tail.splitlines()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccscope.lab.cli")
    sub = ap.add_subparsers(dest="cmd", required=True)
    register(sub)
    args = ap.parse_args(argv)
    try:
        return int(args.func(args))
    except CCScopeError as e:
        print(f"ccscope: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
