from __future__ import annotations

import json

import pytest

from ccscope.verdict import Verdict


def _v(**kw: object) -> Verdict:
    base: dict[str, object] = dict(
        label="cubic", kind="cca", confidence=0.9, explanation="x", classifier_version="v"
    )
    base.update(kw)
    return Verdict(**base)  # type: ignore[arg-type]


def test_roundtrip_and_canonical_json() -> None:
    v = _v(probabilities={"cubic": 0.9000000001, "reno": 0.1}, evidence={"a": [1.23456789, -0.0]})
    d = json.loads(v.to_json())
    assert d["probabilities"]["cubic"] == 0.9 and d["evidence"]["a"] == [1.234568, 0.0]
    assert Verdict.from_dict(d).to_json() == v.to_json()


def test_display_forms() -> None:
    assert _v().display == "cubic"
    assert _v(label="unknown", kind="unknown", nearest="BBR").display == "unknown, BBR-like"
    ins = Verdict.insufficient("the trace is empty", "v")
    assert ins.display == "insufficient data: the trace is empty" and ins.kind == "insufficient"


def test_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        _v(kind="maybe")
    with pytest.raises(ValueError):
        _v(confidence=1.5)
    with pytest.raises(TypeError):
        _v(evidence={"x": object()}).to_json()


def test_quic_classes_have_the_family_of_the_cca_they_implement() -> None:
    from ccscope.classifier.model import family_of

    assert family_of("quiche:cubic") == family_of("cubic") == "CUBIC"
    assert family_of("quicgo:reno") == "Reno"
    assert family_of("quiche:bbr2") == "BBR"
    assert family_of("mystery") == "mystery"
