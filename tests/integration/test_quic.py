"""QUIC end to end: the real quiche client in a real shell, real QUIC servers (the lab's, and
misbehaving ones in a namespace of their own), ground truth from the servers' qlog."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ccscope.capture.measure import measure
from ccscope.capture.quic_get import client_binary
from ccscope.lab.lab import Lab, LabParams
from ccscope.lab.quic.registry import QUICHE_SERVER, available_servers
from ccscope.trace import Trace
from tests.lab.lab_testkit import netns, running_lab
from tests.netutil import CCSCOPE, vm_froze

pytestmark = pytest.mark.netns

INSTANCE = 51  # the QUIC lab; tests/integration's TCP lab is 7


@pytest.fixture(scope="module")
def quic_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    try:
        client_binary()
    except Exception as e:
        pytest.skip(str(e))
    ok, why = available_servers()
    if not any(s.stack == "quiche" for s in ok):
        pytest.skip(f"the quiche lab server is not built: {why}")
    labels = tuple(s.label for s in ok if s.label in ("quiche:cubic", "aioquic:reno", "quicgo:reno"))
    params = LabParams(delay_ms=10, instance=INSTANCE, ccas=("cubic",), quic=labels)
    with running_lab(tmp_path_factory.mktemp("quiclab"), params) as lab:
        yield lab


def test_lab_brings_quic_servers_up_with_names_and_health(quic_lab: Lab) -> None:
    st = quic_lab.state() or {}
    qs = {q["label"]: q for q in st["quic_servers"]}
    assert qs["quiche:cubic"]["hostname"] == "cubic.quiche.lab.test"
    assert qs["quiche:cubic"]["addr"] == f"198.18.{INSTANCE}.151"
    hosts = Path(st["hosts_file"]).read_text()
    assert f"198.18.{INSTANCE}.151\tcubic.quiche.lab.test" in hosts
    s = quic_lab.status()
    assert s.healthy, s.problems


@pytest.mark.parametrize("host", ["cubic.quiche", "reno.aioquic", "reno.quicgo"])
def test_measure_quic_against_each_stack(quic_lab: Lab, tmp_path: Path, host: str) -> None:
    label = {"cubic.quiche": "quiche:cubic", "reno.aioquic": "aioquic:reno", "reno.quicgo": "quicgo:reno"}[
        host
    ]
    if label not in [q["label"] for q in (quic_lab.state() or {})["quic_servers"]]:
        pytest.skip(f"{label} is not available here")
    m = measure(
        f"https://{host}.lab.test/obj/400000", ["A"], tmp_path, lab=True, timeout=60, transport="quic"
    )
    run = m.runs[0]
    assert run.ok, run.error
    assert run.profile == "A-quic" and run.transport == "quic"
    t = Trace.load(run.sender_trace_file)
    assert t.transport == "quic" and t.flow.server_port == 443
    assert t.profile is not None and t.profile["mtu"] == 1280
    assert t.internet_rtt_ms is not None and t.internet_rtt_ms >= 14
    assert run.timing is not None and run.timing["host_steal_s"] >= 0  # so vm_froze can tell
    if not vm_froze(run):  # one handshake sample: a VM freeze lands in it whole
        assert t.internet_rtt_ms == pytest.approx(20, abs=6)
    assert run.estimator is not None and run.estimator["estimator"] == "client"
    assert run.bytes >= 400_000
    g = run.groundtruth
    assert g is not None and g["cca"] == label
    # a loose sanity bound; the accuracy figures are bench/quic's
    assert g["sender_time"]["mae_pct_bdp"] < 15.0, g["sender_time"]
    assert (tmp_path / "A-quic.client.sqlog").is_file()


def test_a_small_object_is_fetched_again_until_long_enough(quic_lab: Lab, tmp_path: Path) -> None:
    """60 KB ends inside slow start; the client asks for it again over the same connection,
    pipelined, until the transfer reaches the evidence cap the TCP client keeps (StoppingRule:
    max(25 s, 120 RTTs) from the start, unless adaptive stopping ends it sooner), and the trace
    then holds congestion avoidance for the classifier. The server's record is found as for
    one fetch."""
    from ccscope.capture.transports.quic import MIN_ROUNDS
    from ccscope.classifier.features import analyse
    from ccscope.classifier.stopping import StoppingRule

    m = measure(
        "https://cubic.quiche.lab.test/obj/60000", ["A"], tmp_path, lab=True, timeout=60, transport="quic"
    )
    run = m.runs[0]
    assert run.ok, run.error
    q = run.fetch["quic"]
    rule = StoppingRule()
    # the lab path's RTT is tens of ms: the cap's floor decides
    assert q["cap_s"] == pytest.approx(rule.cap_min_s, abs=0.01)
    assert q["requests"] > 1 and q["rounds"] >= MIN_ROUNDS
    assert run.bytes > 60_000 * (q["requests"] - 2)
    # the transfer ran until the cap, or until adaptive stopping had seen enough
    assert q["seconds"] >= rule.cap_min_s - 1.0 or run.fetch.get("stopped"), q
    assert run.groundtruth is not None and run.groundtruth["cca"] == "quiche:cubic"
    analyse(Trace.load(run.sender_trace_file))  # raises InsufficientData with its reason


def test_cli_measure_transport_quic(quic_lab: Lab, tmp_path: Path) -> None:
    url = "https://cubic.quiche.lab.test/obj/200000"
    cmd = [
        *CCSCOPE,
        "measure",
        "--lab",
        "--transport",
        "quic",
        "--profile",
        "B",
        "--json",
        "--out",
        str(tmp_path),
    ]
    r = subprocess.run([*cmd, url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["transport"] == "quic" and doc["runs"][0]["profile"] == "B-quic" and doc["ok"]


def test_a_site_without_quic_is_a_failed_run_with_its_reason(quic_lab: Lab, tmp_path: Path) -> None:
    # cubic.lab.test serves TCP only: nothing listens on UDP 443 there
    m = measure("https://cubic.lab.test/obj/10000", ["A"], tmp_path, lab=True, timeout=20, transport="quic")
    run = m.runs[0]
    assert not run.ok
    assert run.fetch.get("error_kind") in ("refused", "handshake_timeout"), run.fetch
    assert run.error


# --- servers that answer QUIC only partly -----------------------------------------------------


@pytest.fixture(scope="module")
def bad_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    if not QUICHE_SERVER.is_file():
        pytest.skip("the quiche lab server is not built")
    from ccscope.lab.certs import ensure_certs

    d = tmp_path_factory.mktemp("badquic")
    certs = ensure_certs(d / "certs", ["*.quiche.lab.test"], [])  # by name only (lab/lab.py)
    with netns(rate=None) as ns:
        procs = []
        for port, mode in (
            (4431, "vn"),
            (4432, "retry-loop"),
            (4433, "silent"),
            (4434, "no-h3"),
            (4435, "normal"),
        ):
            procs.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        str(QUICHE_SERVER),
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--cert",
                        str(certs.cert),
                        "--key",
                        str(certs.key),
                        "--mode",
                        mode,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        time.sleep(0.5)
        try:
            yield ns, certs.ca_cert
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=10)


def _get(ns: str, ca: Path, port: int, *extra: str) -> dict:
    # 5 s for a handshake: the test servers run at normal priority on a machine that may be busy
    # (2 s once timed out the no-h3 server's prompt refusal)
    r = subprocess.run(
        ["ip", "netns", "exec", ns, str(client_binary()), "--connect", f"127.0.0.1:{port}",
         "--sni", "x.quiche.lab.test", "--path", "/obj/1000", "--cafile", str(ca),
         "--timeout", "10", "--handshake-timeout", "5", *extra],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert (r.returncode == 0) == (doc["error"] is None)
    return doc


@pytest.mark.parametrize(
    ("port", "kind", "words"),
    [
        (4431, "version_negotiation", "offers only 0x1a2a3a4a"),
        (4432, "handshake_timeout", "Retry"),
        (4433, "handshake_timeout", "no answer"),
        (4434, "no_h3", "no_application_protocol"),
    ],
)
def test_partial_quic_servers_give_a_reason(
    bad_servers: tuple[str, Path], port: int, kind: str, words: str
) -> None:
    ns, ca = bad_servers
    doc = _get(ns, ca, port)
    assert doc["status"] == 0 and doc["error_kind"] == kind, doc
    assert words in doc["error"]


def test_good_server_and_certificate_checks(bad_servers: tuple[str, Path], tmp_path: Path) -> None:
    ns, ca = bad_servers
    doc = _get(ns, ca, 4435)
    assert doc["status"] == 200 and doc["bytes"] == 1000 and doc["alpn"] == "h3"
    # a CA that did not sign the server's certificate: refused, with the TLS reason
    from ccscope.lab.certs import ensure_certs

    other = ensure_certs(tmp_path / "other", ["*.quiche.lab.test"], [])
    doc = _get(ns, other.ca_cert, 4435)
    assert doc["error_kind"] == "tls", doc
    # nothing listening: ICMP port unreachable is a refusal, not a hang
    doc = _get(ns, ca, 4499)
    assert doc["error_kind"] == "refused", doc
