"""The compiled download client (capture/tcpget, `ccscope-tcp-get`) against the same local
servers as the Python client, and its target policy against ccscope.targets address by address.

The census runs this client inside every shell; the Python one (capture/fetch.py) is the
fallback where it is not built. Both must accept and refuse the same addresses and report the
same way, so the policy is compared over every table edge and a random sample."""

from __future__ import annotations

import http.server
import ipaddress
import json
import random
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ccscope.capture.transports.tcp import tcp_get_built
from ccscope.lab.registry import LAB_NET
from ccscope.targets import TargetPolicy
from tests.capture.test_fetch import Handler, server  # noqa: F401  (the module's server fixture)

BINARY = tcp_get_built()
pytestmark = pytest.mark.skipif(BINARY is None, reason="ccscope-tcp-get is not built (make setup)")
ALLOW = ("--allow", "127.0.0.1/32")


def run(*args: str, timeout: float = 30) -> tuple[int, dict]:
    p = subprocess.run([str(BINARY), *args], capture_output=True, text=True, timeout=timeout)
    lines = p.stdout.strip().splitlines()
    return p.returncode, (json.loads(lines[-1]) if lines else {"stderr": p.stderr})


# -- the policy, address by address ------------------------------------------------------------


def _edges() -> list[str]:
    """Both ends of every network the Python policy consults, one address beyond each, and the
    IPv6 forms that embed each IPv4 edge (mapped, 6to4, NAT64)."""
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = [LAB_NET]
    for c in (ipaddress._IPv4Constants, ipaddress._IPv6Constants):  # type: ignore[attr-defined]
        for v in vars(c).values():
            if isinstance(v, list):
                nets += v
            elif isinstance(v, ipaddress.IPv4Network | ipaddress.IPv6Network):
                nets.append(v)
    for s in ("2001::/32", "2002::/16", "64:ff9b::/96", "64:ff9b:1::/48", "::ffff:0:0:0/96", "::/96",
              "fec0::/10", "ff00::/8", "224.0.0.0/4"):  # fmt: skip
        nets.append(ipaddress.ip_network(s))
    out: set[str] = set()
    for n in nets:
        top = 2**n.max_prefixlen - 1
        lo, hi = int(n.network_address), int(n.broadcast_address)
        for i in (lo - 1, lo, lo + 1, hi - 1, hi, hi + 1):
            if 0 <= i <= top:
                out.add(str(ipaddress.ip_address(i) if n.version == 4 else ipaddress.IPv6Address(i)))
    v4 = [ipaddress.IPv4Address(a) for a in out if ":" not in a]
    for a in v4:
        out.add(f"::ffff:{a}")
        out.add(str(ipaddress.IPv6Address((0x2002 << 112) | (int(a) << 80) | 1)))
        out.add(str(ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(a))))
    return sorted(out)


def _sample(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    v4 = [str(ipaddress.IPv4Address(rng.getrandbits(32))) for _ in range(n)]
    # IPv6 mostly in the allocated space and its special prefixes, where the rules differ
    prefixes = [0x2000, 0x2001, 0x2002, 0x2400, 0x2A00, 0x64, 0xFC00, 0xFE80, 0xFEC0, 0xFF02, 0, 0x100]
    v6 = [str(ipaddress.IPv6Address((rng.choice(prefixes) << 112) | rng.getrandbits(112))) for _ in range(n)]
    return v4 + v6 + ["not-an-ip", "1.2.3", "fe80::1%eth0", "::"]


@pytest.mark.parametrize(
    ("flags", "policy"),
    [
        ((), TargetPolicy.public()),
        (("--lab",), TargetPolicy.for_lab()),
        (
            ("--lab", "--allow", "10.1.0.0/16", "--allow", "fd00::/8"),
            TargetPolicy.for_lab().widened("10.1.0.0/16", "fd00::/8"),
        ),
    ],
    ids=["public", "lab", "lab+allow"],
)
def test_refuses_exactly_what_the_python_policy_refuses(flags: tuple[str, ...], policy: TargetPolicy) -> None:
    addrs = _edges() + _sample(3000)
    p = subprocess.run([str(BINARY), "--vet-stdin", *flags], input="\n".join(addrs) + "\n",
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    got = p.stdout.split("\n")[: len(addrs)]
    want = [policy.refusal(a) or "" for a in addrs]
    differ = [(a, g, w) for a, g, w in zip(addrs, got, want, strict=True) if g != w]
    assert not differ, differ[:10]
    assert len(addrs) > 5000 and sum(bool(w) for w in want) > 1000  # both answers are exercised


# -- downloads -------------------------------------------------------------------------------


def test_downloads_exact_bytes_and_identifies_itself(server: str) -> None:  # noqa: F811
    code, r = run(f"{server}/obj/123456", *ALLOW, "--run-id", "abc", "--user-agent", "ccscope/9 (+x)")
    assert code == 0 and (r["status"], r["bytes"], r["truncated"], r["error"]) == (200, 123456, False, None)
    assert r["local_port"] > 0 and r["remote"] == "127.0.0.1" and r["remote_port"] > 0
    assert Handler.seen_headers["X-CCScope-Run"] == "abc"
    assert Handler.seen_headers["User-Agent"] == "ccscope/9 (+x)"
    assert Handler.seen_headers["Accept-Encoding"] == "identity"
    # the report has the Python client's fields (FetchResult) plus its CPU, a few ms here
    from dataclasses import fields

    from ccscope.capture.fetch import FetchResult

    assert list(r) == [f.name for f in fields(FetchResult)] + ["cpu_s"]
    assert 0 < r["cpu_s"] < 1


def test_follows_redirects_but_not_forever(server: str) -> None:  # noqa: F811
    code, r = run(f"{server}/to-obj", *ALLOW)
    assert code == 0 and r["bytes"] == 1000 and r["final_url"] == f"{server}/obj/1000"
    assert r["redirects"] == [f"{server}/obj/1000"]
    code, r = run(f"{server}/loop", *ALLOW)
    assert code == 4 and r["error"] == "more than 5 redirects" and r["error_kind"] == "redirects"


def test_endless_body_is_bounded(server: str) -> None:  # noqa: F811
    code, r = run(f"{server}/endless", *ALLOW, "--max-bytes", "1000000")
    assert code == 0 and r["truncated"] and 1_000_000 <= r["bytes"] < 1_200_000


def test_body_ending_before_its_content_length_is_marked_truncated(server: str) -> None:  # noqa: F811
    code, r = run(f"{server}/short", *ALLOW)
    assert (code, r["status"], r["bytes"], r["truncated"]) == (0, 200, 10000, True)


def test_huge_headers_refused(server: str) -> None:  # noqa: F811
    code, r = run(f"{server}/hugeheaders", *ALLOW)
    assert code == 4 and "64 KiB" in r["error"] and r["error_kind"] == "protocol"


def test_private_target_refused_and_bad_options_rejected(server: str) -> None:  # noqa: F811
    code, r = run(f"{server}/obj/10")
    assert code == 3 and r["error_kind"] == "target_refused" and "loopback" in r["error"]
    assert r["error"].startswith("refused: 127.0.0.1 resolves to 127.0.0.1")
    for url in (
        "ftp://example.com/",
        "http://user:pw@example.com/",
        "http://example.com:99999/",
        "http:///x",
    ):
        code, r = run(url)
        assert code == 3 and r["error_kind"] == "target_refused", (url, r)
    bad_options = (
        ["--cap-rtts", "0"],
        ["--cap-rtts", "nan"],
        ["--cap-rtts", "5", "--cap-min-s", "-1"],
        ["--allow", "x"],
    )
    for bad in bad_options:
        cmd = [str(BINARY), f"{server}/obj/10", *ALLOW, *bad]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and p.stdout == "", bad


def test_connection_refused_is_a_failure_of_its_kind() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, r = run(f"http://127.0.0.1:{port}/", *ALLOW)
    assert code == 4 and r["error_kind"] == "connection_refused" and r["bytes"] == 0


def test_the_evidence_cap_ends_a_download_at_its_floor(server: str) -> None:  # noqa: F811
    t0 = time.monotonic()
    code, r = run(f"{server}/slow", *ALLOW, "--timeout", "30", "--cap-rtts", "120", "--cap-min-s", "1")
    assert code == 0 and r["truncated"] and not r["stopped"]
    assert r["rtt_ms"] is not None and 0 < r["rtt_ms"] < 50 and r["cap_s"] == 1.0
    assert 1.0 <= time.monotonic() - t0 < 3.0 and 0 < r["bytes"] < 10_000_000


def test_bytes_under_the_low_water_mark_are_counted_at_the_deadline(server: str) -> None:  # noqa: F811
    t0 = time.monotonic()
    code, r = run(f"{server}/trickle", *ALLOW, "--timeout", "1")
    assert time.monotonic() - t0 < 2.5
    assert code == 0 and r["status"] == 200 and r["truncated"] and r["bytes"] == 3000


def _ca_and_leaf(d: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA of this test's own and a leaf for `name` (the lab's CA is constrained to lab.test)."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def cert(subject: str, key, issuer: str, signer, ca: bool) -> x509.Certificate:
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("test CA", ca_key, "test CA", ca_key, True)
    leaf = cert(name, leaf_key, "test CA", ca_key, False)
    pem = serialization.Encoding.PEM
    (d / "ca.pem").write_bytes(ca.public_bytes(pem))
    (d / "leaf.pem").write_bytes(leaf.public_bytes(pem) + ca.public_bytes(pem))
    (d / "leaf.key").write_bytes(
        leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return d / "ca.pem", d / "leaf.pem", d / "leaf.key"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    ca, chain, key = _ca_and_leaf(tmp_path_factory.mktemp("tls"), "localhost")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(chain, key)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"https://localhost:{srv.server_address[1]}", ca
    srv.shutdown()


def test_https_with_the_given_ca_only(tls_server: tuple[str, Path]) -> None:
    url, ca = tls_server
    code, r = run(f"{url}/obj/200000", *ALLOW, "--ca-pem", ca.read_text())
    assert code == 0 and (r["status"], r["bytes"], r["truncated"]) == (200, 200000, False), r["error"]
    code, r = run(f"{url}/obj/1000", *ALLOW, "--cacert", str(ca))
    assert code == 0 and r["bytes"] == 1000
    # without the lab CA the system's store does not trust it; with it, an address the
    # certificate does not name fails too
    code, r = run(f"{url}/obj/10", *ALLOW)
    assert code == 4 and r["error_kind"] == "tls" and "TLS handshake with localhost failed" in r["error"]
    port = url.rsplit(":", 1)[1]
    code, r = run(f"https://127.0.0.1:{port}/obj/10", *ALLOW, "--ca-pem", ca.read_text())
    assert code == 4 and r["error_kind"] == "tls", r


def _raw_server(replies: list[bytes]) -> tuple[str, threading.Thread]:
    """A TCP server that answers each connection with the next of `replies`, then closes."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(30)

    def serve() -> None:
        with srv:
            for reply in replies:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                with c:
                    c.settimeout(5)
                    try:
                        c.recv(65536)
                        c.sendall(reply)
                    except OSError:
                        pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}", t


def test_hostile_responses_end_in_a_report_never_a_crash() -> None:
    # What a server on the Internet may send: random bytes, absurd status lines, redirects to
    # nowhere, to other schemes, to the host itself, with bytes no URL has. Each run must end
    # with its one JSON line and exit 3 or 4 (a Rust panic would exit 101 with no report).
    rng = random.Random(11)
    replies = [
        bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 3000))) + b"\r\n\r\n" for _ in range(30)
    ]
    for loc in (b"http://[::1", b"gopher://x/", b"//127.0.0.1:1/", b"http://\xff\xfe/", b"\x00", b"http://a@b/",
                b"../../../../x", b"?q", b"http://" + b"a" * 3000 + b"/", b"http://10.0.0.1/"):  # fmt: skip
        replies.append(b"HTTP/1.1 302 Found\r\nLocation: " + loc + b"\r\nContent-Length: 0\r\n\r\n")
    for status in (
        b"HTTP/1.1 99999999999999 X",
        b"HTTP/1.1",
        b"",
        b"\xff\xff 200",
        b"HTTP/1.1 200 OK\r\nContent-Length: -5",
    ):
        replies.append(status + b"\r\n\r\n")
    url, t = _raw_server(replies)
    for _ in replies:
        p = subprocess.run(
            [str(BINARY), f"{url}/", *ALLOW, "--timeout", "5"], capture_output=True, text=True, timeout=30
        )
        assert p.returncode in (0, 3, 4), (p.returncode, p.stderr[-300:])
        doc = json.loads(p.stdout.strip().splitlines()[-1])
        assert doc["url"] == f"{url}/" and (p.returncode == 0) == (doc["error"] is None)
    t.join(10)


def test_the_tcp_transport_runs_it_by_default_and_the_python_client_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ccscope.capture.transports import ClientRequest
    from ccscope.capture.transports.tcp import client_command
    from ccscope.identity import USER_AGENT

    req = ClientRequest(url="https://x.lab.test/o", run_id="r1", out_dir=tmp_path, stem="A", lab=True,
                        cap_rtts=120, cap_min_s=25)  # fmt: skip
    monkeypatch.delenv("CCSCOPE_TCP_CLIENT", raising=False)
    assert client_command(req)[:2] == [str(BINARY), req.url]  # the default
    monkeypatch.setenv("CCSCOPE_TCP_CLIENT", "compiled")
    cmd = client_command(req)
    assert cmd[0] == str(BINARY) and cmd[1] == req.url
    assert cmd[cmd.index("--cap-rtts") + 1] == "120" and "--lab" in cmd
    assert cmd[cmd.index("--user-agent") + 1] == USER_AGENT
    monkeypatch.setenv("CCSCOPE_TCP_CLIENT", "python")
    cmd = client_command(req)
    assert cmd[1:4] == ["-m", "ccscope.capture.fetch", req.url] and "--user-agent" not in cmd
