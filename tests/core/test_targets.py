import pytest

from ccscope.errors import TargetRefused
from ccscope.targets import address_refusal, parse_url, resolve_target


@pytest.mark.parametrize(
    "addr,why",
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.1.1", "private"),
        ("169.254.1.1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("::ffff:127.0.0.1", "loopback"),
        ("198.18.0.12", "private"),
        ("100.64.0.2", "not globally routable"),
        ("0.0.0.0", "unspecified"),
    ],
)
def test_non_public_addresses_refused(addr, why):
    assert address_refusal(addr) == why


def test_public_address_allowed():
    assert address_refusal("93.184.215.14") is None
    assert address_refusal("2606:4700::1111") is None


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "file:///etc/passwd",
        "http://",
        "http://user:pw@example.com/",
        "http://exa mple.com/",
        "http://example.com:99999/",
        "https://" + "a" * 3000 + ".com/",
        "javascript:alert(1)",
    ],
)
def test_hostile_urls_refused(url):
    with pytest.raises(TargetRefused):
        parse_url(url)


def test_names_resolving_to_loopback_refused():
    with pytest.raises(TargetRefused, match="loopback"):
        resolve_target("http://localhost/")
    with pytest.raises(TargetRefused, match="loopback"):
        resolve_target("http://127.1/")


def test_lab_mode_allows_the_lab_prefixes_only():
    t = resolve_target("http://198.18.3.12:8080/big?x=1", lab=True)
    assert t.addresses == ("198.18.3.12",) and t.port == 8080 and t.path == "/big?x=1"
    # Lab mode widens by the lab's own prefixes, never to everything (it used to allow all).
    for url in (
        "http://127.0.0.1/",
        "http://10.1.2.3/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://[fe80::1]/",
        "http://198.19.0.1/",  # the other half of the benchmarking /15: no lab lives there
        "http://0.0.0.0/",
    ):
        with pytest.raises(TargetRefused, match="lab's own prefixes"):
            resolve_target(url, lab=True)


@pytest.mark.parametrize(
    "addr,why",
    [
        ("2002:7f00:1::", "embeds 127.0.0.1 (loopback)"),  # 6to4 of loopback
        ("2002:c0a8:101::1", "embeds 192.168.1.1 (private)"),
        ("2002:a9fe:a9fe::", "embeds 169.254.169.254 (link-local)"),
        ("64:ff9b::7f00:1", "embeds 127.0.0.1 (loopback)"),  # NAT64 of loopback
        ("64:ff9b::a00:1", "embeds 10.0.0.1 (private)"),
        ("64:ff9b:1::808:808", "local-use NAT64"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo (an IPv4 tunnel)"),
        ("fec0::1", "site-local"),
        ("::127.0.0.1", "IPv4-compatible IPv6 (deprecated)"),
        ("::ffff:0:7f00:1", "IPv4-translated"),
    ],
)
def test_ipv6_forms_embedding_ipv4_are_not_global(addr, why):
    assert address_refusal(addr) == why
    with pytest.raises(TargetRefused, match="lab's own prefixes"):
        resolve_target(f"http://[{addr}]/", lab=True)


def test_ipv6_forms_embedding_a_public_ipv4_stay_public():
    assert address_refusal("2002:5db8:d70e::1") is None  # 6to4 of 93.184.215.14
    assert address_refusal("64:ff9b::808:808") is None  # NAT64 of 8.8.8.8
