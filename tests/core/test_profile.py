import pytest

from ccscope.errors import ProfileError
from ccscope.profile import Direction, Profile, first_rate_bps, get_profile


def test_standard_profiles_are_the_published_method_with_sack():
    a, b = get_profile("A"), get_profile("B")
    assert (a.down.delay_ms, b.down.delay_ms) == (50, 100)
    assert a.mtu == 100 and a.sack and b.sack and a.down.buffer == "2bdp"
    assert "--no-sack" not in a.link_args()
    assert a.bdp_bytes() == pytest.approx(200e3 / 8 * 0.1)
    assert b.bdp_bytes(internet_rtt_ms=20) == pytest.approx(200e3 / 8 * 0.22)
    # the published profiles themselves, SACK off, for comparison runs
    na, nb = get_profile("nebby-A"), get_profile("NEBBY-B")
    assert (na.name, nb.name) == ("nebby-A", "nebby-B") and not na.sack and not nb.sack
    assert na.with_(name="A", sack=True) == a and "--no-sack" in nb.link_args()


def test_link_args_carry_every_setting():
    p = Profile(
        "x",
        down=Direction(
            delay_ms=50,
            rate="500pps:1500p,334pps:1500p,500pps",
            buffer="30p",
            drop_window_over=80,
            jitter_ms=1.5,
            loss=0.01,
        ),
        up=Direction(delay_ms=50),
        per_flow_queues=True,
    )
    args = p.link_args()
    assert args[args.index("--down-rate") + 1] == "500pps:1500p,334pps:1500p,500pps"
    assert args[args.index("--down-drop-window-over") + 1] == "80"
    assert args[args.index("--down-jitter") + 1] == "1.5"
    assert "--no-sack" in args and "--per-flow" in args
    assert args[args.index("--mtu") + 1] == "100"


def test_profile_dict_roundtrip():
    p = get_profile("B")
    assert Profile.from_dict(p.to_dict()) == p


@pytest.mark.parametrize(
    "spec,bps",
    [("200kbit", 2e5), ("1.5mbit", 1.5e6), ("inf", None), ("500pps", None), ("200kbit:10s,100kbit", 2e5)],
)
def test_first_rate(spec, bps):
    assert first_rate_bps(spec) == bps


@pytest.mark.parametrize("kw", [{"delay_ms": -1}, {"loss": 1.0}, {"rate": "fast"}])
def test_bad_directions_refused(kw):
    with pytest.raises(ProfileError):
        Direction(**kw)


def test_unknown_profile():
    with pytest.raises(ProfileError, match="known: A, B, nebby-A, nebby-B"):
        get_profile("Z")


def test_kbit_spec_never_writes_an_exponent() -> None:
    from ccscope.profile import first_rate_bps, kbit_spec

    assert kbit_spec(1448.0) == "1448kbit" and kbit_spec(255.7) == "255.7kbit"
    assert kbit_spec(1.11195e6) == "1111950kbit" and kbit_spec(0.5) == "0.5kbit"
    assert kbit_spec(123456789.0) == "123457000kbit"  # six significant digits, as :g kept
    for x in (0.05, 1.0, 999999.4, 1.2e6, 3.3e9):
        assert first_rate_bps(kbit_spec(x)) == pytest.approx(x * 1e3, rel=1e-5)
