"""`ccscope train` on several reference roots: one model, each transport's classes fitted on
its own measurements (a TCP collection and a QUIC one, as the lab keeps them apart)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ccscope.classifier.model import Model
from ccscope.classifier.summary import FEATURE_NAMES, QUIC_FEATURES
from ccscope.classifier.train import (
    HEAD_MARK,
    ReferenceFeaturesError,
    load_reference_features,
    reference_data,
)
from tests.classifier.conftest import cli, load

TCP = {"cubic": "cubic", "reno": "reno/dctcp", "bbr": "bbr"}
QUIC = {"cubic": "quiche:cubic", "reno": "aioquic:reno", "bbr2": "quiche:bbr2"}
SCID = {"quiche": 20, "aioquic": 8}


def _root(root: Path, classes: dict[str, str], transport: str, draws: int = 3) -> None:
    """A collection's index and traces: the committed lab pairs stand in for every draw (the
    plumbing is under test here, not the accuracy)."""
    lines = []
    for d in range(draws + 1):
        split = "train" if d < draws else "eval"
        for cca, label in classes.items():
            draw_id = f"{transport}{d:02d}"
            out = root / draw_id / label.replace(":", "-") / "run0"
            out.mkdir(parents=True)
            slots = {}
            for p in "AB":
                t = load(cca, p)
                if transport != "tcp":
                    sp = {"scid_len": SCID[label.split(":")[0]], "ack_only_share": 0.01, "guess": None}
                    t = replace(
                        t, flow=replace(t.flow, transport=transport), extra={"quic": {"stack_print": sp}}
                    )
                slots[p] = {"sender_trace": str(t.save(out / f"{p}.sender.trace.json"))}
            lines.append({"key": f"{draw_id}/{label}/run0", "draw_id": draw_id, "cca": label, "label": label,
                          "transport": transport, "split": split, "space": "full", "run": 0,
                          "status": "ok", "slots": slots})  # fmt: skip
    (root / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_one_model_from_a_tcp_and_a_quic_root(tmp_path: Path) -> None:
    tcp, quic = tmp_path / "tcp", tmp_path / "quic"
    _root(tcp, TCP, "tcp")
    _root(quic, QUIC, "quic")
    out = tmp_path / "out"
    r = cli("train", "--root", str(tcp), "--root", str(quic), "--out", str(out), "--eval-out",
            str(tmp_path / "eval"), "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    head = json.loads(r.stdout)
    assert head["recall_unseen"] is not None and head["recall_quic_unseen"] is not None

    model = Model.load(next(out.glob("ccscope-*.json")))
    assert sorted(model.estimators) == ["quic", "tcp"]
    assert list(model.for_transport("quic").classes_) == sorted(QUIC.values())
    assert list(model.for_transport("tcp").classes_) == sorted(TCP.values())
    # every training download also enters as its prefixes (train.HEAD_MARK)
    assert model.training["fitted"]["quic"]["train_measurements"] >= 3 * len(QUIC)
    # the QUIC estimator reads the stack's fingerprint beside the shape; the TCP one does not
    assert model.for_transport("quic").features == (*FEATURE_NAMES, *QUIC_FEATURES)
    assert model.for_transport("tcp").features == FEATURE_NAMES

    res = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert res["quic_classes"] == sorted(QUIC.values())
    assert set(res["quic_unseen"]["per_class"]) <= set(QUIC.values())
    assert {r["label"] for r in res["unseen"]["predictions"]} == set(TCP.values())

    # the reference summaries beside the model: each path relative to its own root
    samples, summ = load_reference_features(next(out.glob("reference-*.json.gz")))
    assert {s.transport for s in samples} == {"tcp", "quic"}
    assert all(not Path(p).is_absolute() for p in summ)
    assert sum(s.set == "quic_train" and HEAD_MARK not in s.key for s in samples) == 3 * len(QUIC)
    q = next(summ[p] for s in samples if s.label == "aioquic:reno" for p in s.paths)
    assert q.value("quic_scid_len") == 8 and np.isnan(q.value("quic_back_to_back"))


def test_a_measurement_in_two_roots_is_refused(tmp_path: Path) -> None:
    _root(tmp_path / "a", {"cubic": "cubic"}, "tcp", draws=1)
    _root(tmp_path / "b", {"cubic": "cubic"}, "tcp", draws=1)
    with pytest.raises(ReferenceFeaturesError, match="in two roots"):
        reference_data([tmp_path / "a", tmp_path / "b"])


def test_the_stack_family_comes_from_the_captures_fingerprint() -> None:
    from ccscope.classifier.core import quic_stack

    a, b = load("cubic", "A"), load("cubic", "B")
    assert quic_stack([a, b]) is None  # TCP traces carry none
    fp = {"scid_len": 20, "guess": "quiche", "why": "20-byte connection IDs, 0.3 % ACK-only datagrams"}
    qa = replace(a, extra={**a.extra, "quic": {"stack_print": fp}})
    qb = replace(b, extra={**b.extra, "quic": {"stack_print": {**fp, "guess": "quiche"}}})
    assert quic_stack([qa, qb]) == {"family": "quiche", "why": fp["why"], "traces": [fp, fp]}
    # the two captures disagree: no family named, both prints kept
    qc = replace(b, extra={"quic": {"stack_print": {**fp, "scid_len": 8, "guess": "aioquic"}}})
    assert quic_stack([qa, qc])["family"] is None


def test_a_features_file_extended_by_a_new_root(tmp_path: Path) -> None:
    """A collection grown after its traces were gone: the shipped summaries and the new
    measurements fit one model, and the union is written as the new reference features."""
    first, out1 = tmp_path / "first", tmp_path / "out1"
    _root(first, TCP, "tcp", draws=2)
    r = cli("train", "--root", str(first), "--out", str(out1), "--eval-out", str(tmp_path / "e1"))
    assert r.returncode == 0, r.stderr
    base = next(out1.glob("reference-*.json.gz"))

    more, out2 = tmp_path / "more", tmp_path / "out2"
    _root(more, QUIC, "quic", draws=2)
    r = cli("train", "--extend", str(base), "--root", str(more), "--out", str(out2), "--eval-out",
            str(tmp_path / "e2"), "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    samples, summ = load_reference_features(next(out2.glob("reference-*.json.gz")))
    old, _ = load_reference_features(base)
    assert {s.key for s in old} < {s.key for s in samples}
    assert {s.transport for s in samples} == {"tcp", "quic"}
    assert all(not Path(p).is_absolute() for p in summ)
    assert sorted(Model.load(next(out2.glob("ccscope-*.json"))).estimators) == ["quic", "tcp"]

    # the same measurements in the file and under the root: refused, with the way out
    with pytest.raises(ReferenceFeaturesError, match="--skip-in"):
        reference_data(first, features=base, extend=True)
    r = cli("train", "--extend", str(base), "--out", str(out2))
    assert r.returncode != 0 and "--root" in r.stderr


def test_a_set_measured_again_replaces_its_old_measurements(tmp_path: Path) -> None:
    """`--remeasured`: the root's measurements take the place of the file's ones of the same
    key (a set measured again with a new client); the rest of the file stays as it was."""
    first, out1 = tmp_path / "first", tmp_path / "out1"
    _root(first, TCP, "tcp", draws=2)
    r = cli("train", "--root", str(first), "--out", str(out1), "--eval-out", str(tmp_path / "e1"))
    assert r.returncode == 0, r.stderr
    base = next(out1.glob("reference-*.json.gz"))
    old, old_summ = load_reference_features(base)

    # the evaluation draw measured again: its traces now come from profile B only
    again = tmp_path / "again"
    _root(again, TCP, "tcp", draws=2)
    index = [json.loads(x) for x in (again / "index.jsonl").read_text().splitlines()]
    index = [r for r in index if r["split"] == "eval"]
    for r in index:
        a = Path(r["slots"]["A"]["sender_trace"])
        r["slots"]["A"]["sender_trace"] = r["slots"]["B"]["sender_trace"]
        a.unlink()
    (again / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in index))

    samples, summ, _ = reference_data(again, features=base, extend=True, remeasured=True)
    assert sorted(s.key for s in samples) == sorted(s.key for s in old)
    new = {s.key: s for s in samples}
    for r in index:
        assert all(p.endswith("B.sender.trace.json") for p in new[r["key"]].paths)
        assert not any(p.endswith(f"{r['key']}/A.sender.trace.json") for p in summ)
    kept = [s for s in old if s.key not in {r["key"] for r in index}]
    assert kept and all(summ[p] == old_summ[p] for s in kept for p in s.paths)

    out2 = tmp_path / "out2"
    r = cli("train", "--extend", str(base), "--root", str(again), "--remeasured", "--out", str(out2),
            "--eval-out", str(tmp_path / "e2"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "replaced" in r.stderr
    r = cli("train", "--root", str(again), "--remeasured", "--out", str(out2))
    assert r.returncode != 0 and "--extend" in r.stderr
