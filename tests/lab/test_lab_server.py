"""The lab server on real kernel TCP, in a scratch namespace with a rate-limited loopback."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ccscope.lab.certs import ensure_certs
from ccscope.lab.content import object_bytes
from ccscope.lab.groundtruth import find_record, list_records, load_record
from ccscope.lab.lab import http_get
from ccscope.lab.registry import lab_cca
from ccscope.lab.server import ListenerSpec, ServerConfig
from tests.lab.lab_testkit import (
    needs_root,
    netns,
    run_in_netns,
    start_server,
    stop_server,
)

pytestmark = [needs_root, pytest.mark.netns]
CCAS = ("reno", "cubic", "bbr")
LARGE = 500_000


@pytest.fixture(scope="module")
def lab_ns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    d = tmp_path_factory.mktemp("labserver")
    specs = [lab_cca(c) for c in CCAS]
    certs = ensure_certs(d / "certs", ["*.lab.test"], [s.addr for s in specs])
    cfg = ServerConfig(
        servers=[ListenerSpec(s.name, s.addr) for s in specs],
        groundtruth_dir=str(d / "gt"),
        cert_file=str(certs.cert),
        key_file=str(certs.key),
        large_bytes=LARGE,
        ack_stall_s=3.0,
    )
    cfg.save(d / "server.json")
    with netns("20mbit") as ns:
        for s in specs:
            subprocess.run(["ip", "-n", ns, "addr", "add", f"{s.addr}/32", "dev", "lo"], check=True)
        srv = start_server(ns, d / "server.json", d / "server.log", d / "gt")
        try:
            yield {"ns": ns, "srv": srv, "gt": d / "gt", "ca": certs.ca_cert, "dir": d}
        finally:
            stop_server(srv)
    log = srv.log_text()
    assert "Traceback" not in log, log


def _get(env: dict[str, Any], cca: str, path: str, *, tls: bool = False,
         run_id: str | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    c = lab_cca(cca)
    ctx = ssl.create_default_context(cafile=str(env["ca"])) if tls else None
    hdrs = {"X-CCScope-Run": run_id} if run_id else None
    port = 443 if tls else 80

    def go() -> tuple[int, dict[str, str], bytes]:
        return http_get(c.addr, port, path, host=c.hostname, tls=ctx, timeout=20, headers=hdrs)

    return run_in_netns(env["ns"], go)


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_serves_exact_bytes(lab_ns: dict[str, Any], tls: bool) -> None:
    for cca in CCAS:
        st, hdrs, body = _get(lab_ns, cca, "/obj/300001", tls=tls)
        assert st == 200
        assert hdrs["content-length"] == "300001"
        assert hdrs["x-ccscope-cca"] == cca
        assert body == object_bytes(300001)


def test_https_rejects_untrusted_clients_view(lab_ns: dict[str, Any]) -> None:
    # Without the lab CA the certificate must not verify: the CA is really what vouches.
    c = lab_cca("cubic")
    ctx = ssl.create_default_context()
    with pytest.raises(ssl.SSLCertVerificationError):
        run_in_netns(lab_ns["ns"], lambda: http_get(c.addr, 443, "/health", host=c.hostname,
                                                    tls=ctx))  # fmt: skip


def test_routes(lab_ns: dict[str, Any]) -> None:
    st, hdrs, body = _get(lab_ns, "reno", "/")
    assert st == 200 and hdrs["content-type"].startswith("text/html")
    assert b'href="/large"' in body and b"/obj/" in body
    st, _, body = _get(lab_ns, "reno", "/large")
    assert st == 200 and body == object_bytes(LARGE)
    st, _, body = _get(lab_ns, "bbr", "/health", tls=True)
    h = json.loads(body)
    assert st == 200 and h["ok"] and h["cca"] == "bbr" and h["scheme"] == "https"
    assert _get(lab_ns, "reno", "/nope")[0] == 404
    assert _get(lab_ns, "reno", "/obj/999999999")[0] == 404  # beyond the 64 MiB cap


def _raw(env: dict[str, Any], cca: str, payload: bytes, read_until_close: bool = True) -> bytes:
    def go() -> bytes:
        with socket.create_connection((lab_cca(cca).addr, 80), timeout=10) as s:
            s.sendall(payload)
            out = bytearray()
            while read_until_close:
                b = s.recv(65536)
                if not b:
                    break
                out += b
            return bytes(out)

    return run_in_netns(env["ns"], go)


def test_methods_and_bad_requests(lab_ns: dict[str, Any]) -> None:
    head = _raw(lab_ns, "reno", b"HEAD /obj/1000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: 1000" in head
    assert head.endswith(b"\r\n\r\n")  # no body for HEAD
    post = _raw(lab_ns, "reno", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert post.startswith(b"HTTP/1.1 405")
    assert _raw(lab_ns, "reno", b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")


def _record_for(env: dict[str, Any], run_id: str) -> Any:
    rec = find_record(run_id, gt_dir=env["gt"], wait_s=10)
    assert rec is not None, f"no ground truth for {run_id}"
    return rec


def test_groundtruth_trajectory(lab_ns: dict[str, Any]) -> None:
    n = 2_000_000
    st, _, body = _get(lab_ns, "cubic", f"/obj/{n}", run_id="gt-traj")
    assert st == 200 and len(body) == n
    rec = _record_for(lab_ns, "gt-traj")
    m = rec.meta
    assert m["cca"] == "cubic" and m["server"] == {"addr": "198.18.0.12", "port": 80}
    assert m["object_path"] == f"/obj/{n}" and m["requests"][0]["acked"]
    assert m["end_reason"] in ("client closed", "server closed")
    tr = rec.to_trace()
    dt = np.diff(tr.t) * 1000.0
    assert len(tr.t) > 300  # 2 MB at 20 Mbit/s: ~0.8 s
    assert 0.9 < float(np.median(dt)) < 1.2
    assert float(np.percentile(dt, 90)) < 2.0
    # Samples cover the whole transfer at ~1 ms (few ticks lost).
    assert len(tr.t) > 0.8 * tr.duration * 1000
    cols = rec.columns()
    assert int(cols["bytes_acked"][-1]) >= n
    assert tr.bif.max() > 10 * 1448  # a real window was in flight
    assert tr.bif[-1] == 0  # all acknowledged before the last sample
    assert np.all(tr.bif <= cols["bytes_sent"])
    # unacked x mss tracks the byte count (it rounds the last partial segment up)
    assert np.all(tr.columns["bif_unacked"] + 1448 >= tr.bif)


def test_client_that_vanishes(lab_ns: dict[str, Any]) -> None:
    before = len(list_records(lab_ns["gt"], cca="bbr"))

    def vanish() -> None:
        s = socket.create_connection((lab_cca("bbr").addr, 80), timeout=10)
        s.sendall(b"GET /obj/20000000 HTTP/1.1\r\nHost: x\r\nX-CCScope-Run: gone-1\r\n\r\n")
        s.recv(100_000)
        # RST instead of FIN: the most abrupt way to disappear mid-download.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()

    run_in_netns(lab_ns["ns"], vanish)
    rec = _record_for(lab_ns, "gone-1")
    assert rec.meta["requests"][0]["status"] == 0  # not delivered
    assert rec.to_trace().partial
    assert len(list_records(lab_ns["gt"], cca="bbr")) == before + 1
    assert _get(lab_ns, "bbr", "/health")[0] == 200  # still serving


def test_keepalive_records_every_request(lab_ns: dict[str, Any]) -> None:
    def two() -> bytes:
        with socket.create_connection((lab_cca("reno").addr, 80), timeout=10) as s:
            out = bytearray()
            for i, last in ((1, False), (2, True)):
                conn = "close" if last else "keep-alive"
                s.sendall(f"GET /obj/100000 HTTP/1.1\r\nHost: x\r\nX-CCScope-Run: ka-{i}\r\n"
                          f"Connection: {conn}\r\n\r\n".encode())  # fmt: skip
                want = len(out) + 100_000
                while len(out) < want or b"\r\n\r\n" not in out:
                    b = s.recv(65536)
                    if not b:
                        break
                    out += b
                time.sleep(0.3)  # idle between requests: not sampled
            while b := s.recv(65536):
                out += b
            return bytes(out)

    body = run_in_netns(lab_ns["ns"], two)
    assert body.count(b"HTTP/1.1 200 OK") == 2
    rec = _record_for(lab_ns, "ka-2")
    assert [r["run_id"] for r in rec.meta["requests"]] == ["ka-1", "ka-2"]
    assert rec.run_id == "ka-1"
    tr = rec.to_trace()
    assert np.diff(tr.t).max() > 0.2  # the idle gap between the two responses


def test_health_checks_are_not_recorded(lab_ns: dict[str, Any]) -> None:
    before = len(list_records(lab_ns["gt"]))
    for _ in range(3):
        _get(lab_ns, "cubic", "/health")
    time.sleep(0.3)
    assert len(list_records(lab_ns["gt"])) == before


def test_records_are_complete_files(lab_ns: dict[str, Any]) -> None:
    for p in list_records(lab_ns["gt"]):
        rec = load_record(p)
        assert rec.csv_path.exists()
        assert rec.meta["samples"] == len(rec.columns()["t_ns"])
    assert not list(Path(lab_ns["gt"]).rglob("*.tmp"))


def test_unavailable_cca_fails_loudly(tmp_path: Path) -> None:
    cfg = ServerConfig(servers=[ListenerSpec("nosuchcca", "127.0.0.1", 0, None)],
                       groundtruth_dir=str(tmp_path))  # fmt: skip
    cfg.save(tmp_path / "c.json")
    r = subprocess.run([sys.executable, "-m", "ccscope.lab.server", "--config",
                        str(tmp_path / "c.json")], capture_output=True, text=True, timeout=20)  # fmt: skip
    assert r.returncode == 2
    assert "cannot set congestion control 'nosuchcca'" in r.stderr
