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


def test_lab_mode_allows_private_targets():
    t = resolve_target("http://127.0.0.1:8080/big?x=1", lab=True)
    assert t.addresses == ("127.0.0.1",) and t.port == 8080 and t.path == "/big?x=1"
