"""Finding 6: the lab CA is name-constrained to lab.test (and the lab's 198.18.0.0/16): its
leaves verify in Python's ssl and in openssl, a leaf it signs for another name does not."""

from __future__ import annotations

import datetime as dt
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ccscope.lab.certs import CA_CONSTRAINTS, ensure_certs


def _handshake(cert: Path, key: Path, ca: Path, host: str) -> str:
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    ls = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        c, _ = ls.accept()
        try:
            with server.wrap_socket(c, server_side=True) as s:
                s.recv(1)
        except (OSError, ssl.SSLError):
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    client = ssl.create_default_context(cafile=str(ca))
    try:
        with socket.create_connection(ls.getsockname()) as raw, client.wrap_socket(raw, server_hostname=host):
            return "ok"
    except ssl.SSLCertVerificationError as e:
        return e.verify_message
    finally:
        ls.close()


def test_lab_ca_is_name_constrained_and_its_leaves_verify(tmp_path: Path) -> None:
    p = ensure_certs(tmp_path, ["cubic.lab.test", "*.lab.test", "lab.test"], ["198.18.0.12"])
    ca = x509.load_pem_x509_certificate(p.ca_cert.read_bytes())
    ext = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert ext.critical and ext.value == CA_CONSTRAINTS
    assert _handshake(p.cert, p.key, p.ca_cert, "cubic.lab.test") == "ok"
    if shutil.which("openssl"):
        out = subprocess.run(["openssl", "verify", "-CAfile", str(p.ca_cert), "-verify_hostname",
                              "cubic.lab.test", str(p.cert)], capture_output=True, text=True)  # fmt: skip
        assert out.returncode == 0, out.stderr
    # A leaf the same CA key signs for a name outside lab.test is refused by the client.
    key = serialization.load_pem_private_key(p.ca_key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    evil = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bank.example")]))
        .issuer_name(ca.subject)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("bank.example")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "evil.pem").write_bytes(evil.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "evil.key").write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    why = _handshake(tmp_path / "evil.pem", tmp_path / "evil.key", p.ca_cert, "bank.example")
    assert why == "permitted subtree violation", why
