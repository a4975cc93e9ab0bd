"""Two collections must not share a root or a lab instance: the second is refused, clearly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ccscope.classifier.collect import CollectionBusy, collect, collection_locks, exclusive


def test_a_second_collection_on_the_same_root_is_refused(tmp_path: Path) -> None:
    root, prefix = tmp_path / "draws", str(tmp_path / "lab-")
    with exclusive(collection_locks(root, [7], prefix)):
        with pytest.raises(CollectionBusy, match=rf"\.collect\.lock is held .*pid {os.getpid()}\)"):
            collect([], root, instances=[8], state_prefix=prefix)
        # another root on a lab instance in use: refused too (it would take that lab down)
        with pytest.raises(CollectionBusy, match=r"lab-7\.lease"):
            collect([], tmp_path / "other", instances=[7], state_prefix=prefix)
        assert collect([], tmp_path / "other", instances=[8], state_prefix=prefix).jobs == 0
    # released when the first one ends, by return or by exception
    assert collect([], root, instances=[7], state_prefix=prefix).jobs == 0


def test_the_cli_says_who_holds_the_collection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ccscope.classifier.collect import main

    root, prefix = tmp_path / "draws", str(tmp_path / "lab-")
    with exclusive(collection_locks(root, [7], prefix)):
        rc = main(["--draws", "1", "--ccas", "reno", "--root", str(root), "--instances", "7",
                   "--state-prefix", prefix])  # fmt: skip
    assert rc == 1
    assert f"held by a running collection (pid {os.getpid()})" in capsys.readouterr().err
