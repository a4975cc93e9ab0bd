"""Pure-Python parts of the lab: registry, object content, parameters, certificates."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509

from ccscope.errors import LabError
from ccscope.lab.certs import ensure_certs
from ccscope.lab.content import BLOCK_SIZE, MAX_OBJECT_BYTES, block, iter_object, object_bytes
from ccscope.lab.lab import LabParams, is_lab_address, normalize_rate
from ccscope.lab.registry import LAB_PREFIX, REGISTRY, cca_for_address, lab_cca


def test_registry_addresses_are_stable_and_in_prefix() -> None:
    assert LAB_PREFIX == "198.18.0.0/24"
    assert [(c.name, c.addr) for c in REGISTRY[:3]] == [
        ("reno", "198.18.0.11"),
        ("cubic", "198.18.0.12"),
        ("bbr", "198.18.0.13"),
    ]
    assert len({c.addr for c in REGISTRY}) == len(REGISTRY)
    assert all(is_lab_address(c.addr) for c in REGISTRY)
    assert lab_cca("cubic").hostname == "cubic.lab.test"
    assert cca_for_address("198.18.0.13") == lab_cca("bbr")
    with pytest.raises(KeyError, match="known"):
        lab_cca("nope")


@pytest.mark.parametrize(
    ("ip", "inside"),
    [("198.18.0.1", True), ("198.18.0.255", True), ("::ffff:198.18.0.12", True),
     ("198.18.1.1", True), ("198.19.0.1", False), ("8.8.8.8", False), ("not-an-ip", False)],
)  # fmt: skip
def test_is_lab_address(ip: str, inside: bool) -> None:
    assert is_lab_address(ip) is inside


def test_object_content_is_deterministic_and_chunked() -> None:
    assert len(block()) == BLOCK_SIZE
    n = BLOCK_SIZE * 2 + 12345
    whole = object_bytes(n)
    assert len(whole) == n
    assert whole[:BLOCK_SIZE] == whole[BLOCK_SIZE : 2 * BLOCK_SIZE] == block()
    assert b"".join(bytes(c) for c in iter_object(n, 7777)) == whole
    assert object_bytes(0) == b""
    assert len(set(block()[:4096])) > 200  # incompressible-looking, not a repeated pattern
    with pytest.raises(ValueError):
        next(iter_object(MAX_OBJECT_BYTES + 1))


def test_params_validation_and_link_args() -> None:
    p = LabParams(delay_ms=25, rate="1000", buffer="2bdp", jitter_ms=2, loss=0.01)
    assert p.rate == "1000kbit"
    assert p.link_args() == ["--delay", "25", "--rate", "1000kbit", "--mtu", "1500",
                             "--jitter", "2", "--loss", "0.01", "--buffer", "2bdp"]  # fmt: skip
    assert LabParams.from_dict(p.to_dict()) == p
    assert normalize_rate("inf") == "inf" and normalize_rate("10mbit") == "10mbit"
    for bad in ({"ccas": ("reno", "reno")}, {"ccas": ("nope",)}, {"loss": 1.5},
                {"delay_ms": -1}, {"ccas": ()}):  # fmt: skip
        with pytest.raises(LabError):
            LabParams(**bad)  # type: ignore[arg-type]


def test_certs_cover_names_and_are_reused(tmp_path: Path) -> None:
    ips = ["198.18.0.11", "198.18.0.12"]
    p = ensure_certs(tmp_path, ["*.lab.test", "lab.test"], ips)
    ca_before, leaf_before = p.ca_cert.read_bytes(), p.cert.read_bytes()
    assert (p.key.stat().st_mode & 0o777) == 0o600
    leaf = x509.load_pem_x509_certificates(leaf_before)[0]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "*.lab.test" in san.get_values_for_type(x509.DNSName)
    # The chain verifies for a lab name with the stdlib, as clients will check it.
    ctx = ssl.create_default_context(cafile=str(p.ca_cert))
    srv = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    srv.load_cert_chain(p.cert, p.key)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    # Same names: nothing is regenerated. A new address: new leaf, same CA.
    assert ensure_certs(tmp_path, ["*.lab.test", "lab.test"], ips).cert.read_bytes() == leaf_before
    ensure_certs(tmp_path, ["*.lab.test", "lab.test"], [*ips, "198.18.0.13"])
    assert p.ca_cert.read_bytes() == ca_before
    assert p.cert.read_bytes() != leaf_before


def test_zoo_names_map_to_kernel_names() -> None:
    bic = lab_cca("bic")
    assert bic.kernel == "cc_bic" and lab_cca("cc_bic") == bic
    assert bic.hostname == "bic.lab.test"
    assert lab_cca("cubic").kernel == "cubic" and lab_cca("cc_cubic").name == "cc-cubic"
    assert LabParams(ccas=("cc_bic", "reno")).ccas == ("bic", "reno")
    with pytest.raises(LabError, match="duplicate"):
        LabParams(ccas=("cc_bic", "bic"))


def test_lab_instances_have_their_own_prefix_and_same_hosts() -> None:
    from ccscope.lab.registry import LAB_NET, lab_prefix

    cubic = lab_cca("cubic")
    assert lab_prefix(0) == LAB_PREFIX and lab_prefix(3) == "198.18.3.0/24"
    assert cubic.addr_in(0) == cubic.addr == "198.18.0.12"
    assert cubic.addr_in(3) == "198.18.3.12"
    found = cca_for_address("198.18.3.12")
    assert found is not None and found.name == "cubic"
    assert cca_for_address("198.19.0.12") is None
    assert all(c.addr_in(255) in {str(a) for a in LAB_NET} for c in REGISTRY)


def test_no_ground_truth_sampling_for_a_census_lab() -> None:
    """sample_interval_ms 0: servers standing in for the Internet's keep no periodic samples
    (no sampler thread at all); a negative period is refused."""
    import socket

    from ccscope.lab.server import Recorder, SamplerHub

    assert LabParams(sample_interval_ms=0).sample_interval_ms == 0
    with pytest.raises(LabError, match=">= 0"):
        LabParams(sample_interval_ms=-1)
    hub = SamplerHub(0)
    a, b = socket.socketpair()
    try:
        rec = Recorder(a)
        hub.start()
        hub.add(rec)
        assert not hub._thread.is_alive() and not hub._recs
        hub.stop()
    finally:
        a.close()
        b.close()
    on = SamplerHub(1.0)
    on.start()
    try:
        assert on._thread.is_alive()
    finally:
        on.stop()
