"""The download client against real local HTTP servers (on loopback, allowed explicitly)."""

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import ClassVar

import pytest

from ccscope.capture.fetch import MAX_REDIRECTS, FetchError, fetch
from ccscope.errors import TargetRefused
from ccscope.targets import TargetPolicy

# Neither public nor lab mode reaches loopback: these local servers are let in by name.
LOOPBACK = TargetPolicy.public().widened("127.0.0.0/8")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen_headers: ClassVar[dict] = {}
    slow_started: ClassVar[threading.Event] = threading.Event()

    def log_message(self, *a):
        pass

    def do_GET(self):
        Handler.seen_headers = dict(self.headers)
        if self.path.startswith("/obj/"):
            n = int(self.path.split("/")[2])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            self.wfile.write(b"x" * n)
        elif self.path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/to-obj":
            self.send_response(301)
            self.send_header("Location", "/obj/1000")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/endless":
            self.send_response(200)
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"y" * 65536)
            except OSError:
                pass
        elif self.path == "/short":
            # declares 100 kB, sends 10 kB and closes: a server that gave up mid-transfer
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"s" * 10000)
            self.close_connection = True
        elif self.path == "/slow":
            # 10 MB declared, 2 KB every 20 ms: a download still running when it is stopped
            self.send_response(200)
            self.send_header("Content-Length", str(10_000_000))
            self.end_headers()
            Handler.slow_started.set()
            try:
                for _ in range(5000):
                    self.wfile.write(b"w" * 2048)
                    self.wfile.flush()
                    time.sleep(0.02)
            except OSError:
                pass
        elif self.path == "/trickle":
            # 3,000 bytes of 100,000, then silence: fewer than the client's low-water mark
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"t" * 3000)
            self.wfile.flush()
            time.sleep(3.0)
            self.close_connection = True
        elif self.path == "/hugeheaders":
            self.send_response(200)
            for i in range(2000):
                self.send_header(f"X-Pad-{i}", "z" * 60)
            self.end_headers()
        else:
            self.send_error(404)


@pytest.fixture(scope="module")
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_downloads_exact_bytes_and_identifies_itself(server):
    r = fetch(f"{server}/obj/123456", policy=LOOPBACK, run_id="abc")
    assert (r.status, r.bytes, r.truncated) == (200, 123456, False)
    assert r.local_port > 0 and r.remote == "127.0.0.1"
    assert Handler.seen_headers["X-CCScope-Run"] == "abc"
    assert Handler.seen_headers["User-Agent"].startswith("ccscope/")


def test_follows_redirects_but_not_forever(server):
    r = fetch(f"{server}/to-obj", policy=LOOPBACK)
    assert r.bytes == 1000 and r.final_url.endswith("/obj/1000")
    with pytest.raises(FetchError, match=f"more than {MAX_REDIRECTS} redirects"):
        fetch(f"{server}/loop", policy=LOOPBACK)


def test_endless_body_is_bounded(server):
    r = fetch(f"{server}/endless", policy=LOOPBACK, max_bytes=1_000_000)
    assert r.truncated and 1_000_000 <= r.bytes < 1_200_000


def test_body_ending_before_its_content_length_is_marked_truncated(server):
    r = fetch(f"{server}/short", policy=LOOPBACK)
    assert (r.status, r.bytes, r.truncated) == (200, 10000, True)


def test_huge_headers_refused(server):
    with pytest.raises(FetchError, match="64 KiB"):
        fetch(f"{server}/hugeheaders", policy=LOOPBACK)


def test_private_target_refused_outside_lab_mode(server):
    with pytest.raises(TargetRefused):
        fetch(f"{server}/obj/10")


def test_cli_prints_one_json_line_and_exit_codes(server):
    ok = subprocess.run(
        [sys.executable, "-m", "ccscope.capture.fetch", f"{server}/obj/10", "--allow", "127.0.0.1/32"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ok.returncode == 0 and json.loads(ok.stdout)["bytes"] == 10
    # its own CPU (start-up included), which bench/scale's CPU breakdown adds up
    assert 0 < json.loads(ok.stdout)["cpu_s"] < 30
    refused = subprocess.run(
        [sys.executable, "-m", "ccscope.capture.fetch", f"{server}/obj/10"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 3 and "refused" in json.loads(refused.stdout)["error"]
    base = [sys.executable, "-m", "ccscope.capture.fetch", f"{server}/obj/10", "--allow", "127.0.0.1/32"]
    for bad in (["--cap-rtts", "0"], ["--cap-rtts", "nan"], ["--cap-rtts", "5", "--cap-min-s", "-1"]):
        r = subprocess.run(
            [*base, *bad],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 2 and "--cap-" in r.stderr, bad


@pytest.mark.parametrize("client", ["python", "compiled"])
def test_sigterm_mid_body_ends_as_a_stopped_download(server, client):
    # Adaptive stopping ends a download with SIGTERM once the verdict has settled: either client
    # reports what it has as a cut but successful download (exit 0), not as a failure, after
    # lingering for the reset to cross the shell.
    from ccscope.capture.transports.tcp import tcp_get_built

    binary = tcp_get_built()
    if client == "compiled" and binary is None:
        pytest.skip("ccscope-tcp-get is not built (make setup)")
    argv = [str(binary)] if client == "compiled" else [sys.executable, "-m", "ccscope.capture.fetch"]
    Handler.slow_started.clear()
    p = subprocess.Popen(
        [*argv, f"{server}/slow", "--allow", "127.0.0.1/32"], stdout=subprocess.PIPE, text=True
    )
    # Mid-body: the response has begun (the client is past its start-up and in the body loop).
    assert Handler.slow_started.wait(30)
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=10)
    r = json.loads(out)
    assert p.returncode == 0, out
    assert r["stopped"] and r["truncated"] and r["status"] == 200 and r["error"] is None
    assert 10_000 < r["bytes"] < 10_000_000
    assert 1.0 <= time.monotonic() - t0 < 3.0


def test_client_start_up_does_not_load_the_settings() -> None:
    # The settings (pydantic) cost the client more CPU than a whole download: the client decides
    # lab mode from --lab, or from CCSCOPE_LAB only when that is set.
    code = "import sys, ccscope.capture.fetch; print(sorted(m for m in sys.modules if 'pydantic' in m))"
    env = {k: v for k, v in os.environ.items() if k.upper() != "CCSCOPE_LAB"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out


def test_lab_mode_from_the_environment_still_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    from ccscope.targets import lab_mode_enabled

    monkeypatch.delenv("CCSCOPE_LAB", raising=False)
    assert not lab_mode_enabled() and lab_mode_enabled(True)
    monkeypatch.setenv("CCSCOPE_LAB", "")  # empty is unset (the settings ignore empty values)
    assert not lab_mode_enabled()
    monkeypatch.setenv("CCSCOPE_LAB", "1")
    assert lab_mode_enabled()
    monkeypatch.setenv("CCSCOPE_LAB", "0")
    assert not lab_mode_enabled()


def test_the_evidence_cap_ends_a_download_at_its_floor_on_a_short_path(server):
    # On loopback 120 RTTs are a few milliseconds: the floor (cap_min_s) decides.
    t0 = time.monotonic()
    r = fetch(f"{server}/slow", policy=LOOPBACK, timeout=30, cap_rtts=120, cap_min_s=1.0)
    took = time.monotonic() - t0
    assert r.status == 200 and r.truncated and not r.stopped
    assert r.rtt_ms is not None and 0 < r.rtt_ms < 50
    assert r.cap_s == 1.0
    assert 1.0 <= took < 3.0 and 0 < r.bytes < 10_000_000


def test_bytes_under_the_low_water_mark_are_counted_at_the_deadline(server):
    # The client wakes for the body only once BODY_LOWAT bytes are queued; what came before a
    # deadline in a smaller amount is still read and counted, not left in the socket.
    from ccscope.capture.fetch import BODY_LOWAT

    assert BODY_LOWAT > 3000
    t0 = time.monotonic()
    r = fetch(f"{server}/trickle", policy=LOOPBACK, timeout=1.0)
    assert time.monotonic() - t0 < 2.5
    assert r.status == 200 and r.truncated and r.bytes == 3000
