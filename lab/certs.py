"""The lab's private CA and the server certificate for *.lab.test and the lab addresses.

The CA is made once per state dir and kept, so clients that trust it keep working across
`lab up`s; the server certificate is remade whenever it would not cover the configured names
and addresses or is close to expiry.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ccscope.errors import LabError

CA_DAYS = 3650
# The CA signs for the lab and nothing else: a client that trusts it (the lab-mode crawler
# trusts it beside the system's CAs) cannot be fooled by it about any other name or address.
CA_CONSTRAINTS = x509.NameConstraints(
    permitted_subtrees=[x509.DNSName("lab.test"), x509.IPAddress(ipaddress.ip_network("198.18.0.0/16"))],
    excluded_subtrees=None,
)
LEAF_DAYS = 397  # within the 398-day limit browsers apply to server certificates
RENEW_BEFORE = dt.timedelta(days=30)


@dataclass(frozen=True)
class CertPaths:
    ca_cert: Path
    ca_key: Path
    cert: Path  # server leaf followed by the CA (the chain the server presents)
    key: Path


def cert_paths(directory: Path, leaf: str = "server") -> CertPaths:
    return CertPaths(
        ca_cert=directory / "ca.pem",
        ca_key=directory / "ca.key",
        cert=directory / f"{leaf}.pem",
        key=directory / f"{leaf}.key",
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _load_ca(p: CertPaths) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    try:
        cert = x509.load_pem_x509_certificate(p.ca_cert.read_bytes())
        key = serialization.load_pem_private_key(p.ca_key.read_bytes(), password=None)
    except (OSError, ValueError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        return None
    if cert.not_valid_after_utc - _now() < RENEW_BEFORE:
        return None
    try:
        if cert.extensions.get_extension_for_class(x509.NameConstraints).value != CA_CONSTRAINTS:
            return None
    except x509.ExtensionNotFound:
        return None  # a CA from before it was constrained: make a new one (and new leaves)
    return cert, key


def _make_ca(p: CertPaths) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ccscope lab"),
        x509.NameAttribute(NameOID.COMMON_NAME, "ccscope lab CA"),
    ])  # fmt: skip
    now = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(CA_CONSTRAINTS, critical=True)
        .sign(key, hashes.SHA256())
    )
    _write_private(p.ca_key, _key_pem(key))
    p.ca_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _leaf_ok(p: CertPaths, ca: x509.Certificate, dns: list[str], ips: list[str]) -> bool:
    try:
        chain = x509.load_pem_x509_certificates(p.cert.read_bytes())
        p.key.stat()
    except (OSError, ValueError):
        return False
    leaf = chain[0]
    if leaf.issuer != ca.subject or leaf.not_valid_after_utc - _now() < RENEW_BEFORE:
        return False
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    have_dns = set(san.get_values_for_type(x509.DNSName))
    have_ip = {str(a) for a in san.get_values_for_type(x509.IPAddress)}
    return set(dns) <= have_dns and set(ips) <= have_ip


def ensure_certs(directory: Path, dns_names: list[str], ips: list[str], leaf: str = "server") -> CertPaths:
    """CA + a server certificate (`leaf`: its file name) covering `dns_names` and `ips`, reusing
    what is still valid. Several leaves share the one CA."""
    p = cert_paths(directory, leaf)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        loaded = _load_ca(p)
        ca_cert, ca_key = loaded if loaded is not None else _make_ca(p)
        if loaded is not None and _leaf_ok(p, ca_cert, dns_names, ips):
            return p
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        san = x509.SubjectAlternativeName(
            [x509.DNSName(n) for n in dns_names] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
        )
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=LEAF_DAYS))
            .add_extension(san, critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        _write_private(p.key, _key_pem(key))
        pem = leaf.public_bytes(serialization.Encoding.PEM)
        p.cert.write_bytes(pem + ca_cert.public_bytes(serialization.Encoding.PEM))
    except OSError as e:
        raise LabError(f"cannot write lab certificates in {directory}: {e}") from e
    return p
