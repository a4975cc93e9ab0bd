"""What each transport asks its client for: the evidence cap reaches the QUIC client as it
reaches the TCP one (the download lengths the classifier's figures are measured on)."""

from __future__ import annotations

from pathlib import Path

from ccscope.capture.transports import ClientRequest
from ccscope.classifier.stopping import StoppingRule
from ccscope.transports import get_transport


def _opt(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def _req(**kw: object) -> ClientRequest:
    return ClientRequest(url="https://cubic.lab.test/obj/1", run_id="r", out_dir=Path("/tmp"), stem="A", **kw)  # type: ignore[arg-type]


def test_the_quic_client_keeps_the_cap_it_is_given() -> None:
    cmd = get_transport("quic").client_command(_req(cap_rtts=40.0, cap_min_s=5.0))
    assert (_opt(cmd, "--cap-rtts"), _opt(cmd, "--cap-min-s")) == ("40", "5")


def test_without_a_cap_the_quic_client_keeps_the_default_rules() -> None:
    # a reference draw or a measurement without adaptive stopping: the default rule's length,
    # at most the timeout, not 30 smoothed round trips as before
    rule = StoppingRule()
    cmd = get_transport("quic").client_command(_req())
    assert float(_opt(cmd, "--cap-rtts") or 0) == rule.cap_rtts
    assert float(_opt(cmd, "--cap-min-s") or 0) == rule.cap_min_s


def test_tcp_passes_the_cap_only_when_given() -> None:
    tcp = get_transport("tcp")
    assert "--cap-rtts" not in tcp.client_command(_req())
    cmd = tcp.client_command(_req(cap_rtts=120.0, cap_min_s=25.0))
    assert (_opt(cmd, "--cap-rtts"), _opt(cmd, "--cap-min-s")) == ("120", "25")
