"""A lab leased to a running collection cannot be taken down or restarted from elsewhere; its own
collection (and that collection's children) still can."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccscope.classifier.collect import collection_locks, exclusive
from ccscope.lab.lab import Lab, LabParams
from ccscope.lab.lease import LabLeased, lease_holder, lease_path
from tests.netutil import CCSCOPE

HOLDER = """
import sys, time
from pathlib import Path
from ccscope.classifier.collect import collection_locks, exclusive
with exclusive(collection_locks(Path(sys.argv[1]), [7], sys.argv[2])):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def other_collection(tmp_path: Path):
    """A collection in another process holding lab instance 7's lease until the test ends."""
    prefix = str(tmp_path / "lab-")
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "draws"), prefix],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    yield Path(f"{prefix}7"), p.pid
    assert p.stdin is not None
    p.stdin.close()
    p.wait(timeout=10)


def test_lease_path_sits_beside_the_state_dir(tmp_path: Path) -> None:
    assert lease_path(tmp_path / "lab-draws-56") == tmp_path / "lab-draws-56.lease"
    assert lease_holder(tmp_path / "never-leased") is None


def test_another_process_tree_cannot_take_the_lab_down_or_up(other_collection: tuple[Path, int]) -> None:
    state_dir, pid = other_collection
    assert lease_holder(state_dir) == pid
    with pytest.raises(LabLeased, match=rf"leased to a running collection \(pid {pid}, .*lab-7\.lease\)"):
        Lab(state_dir).down()
    with pytest.raises(LabLeased, match=rf"pid {pid}"):
        Lab(state_dir).up(LabParams(ccas=("reno",), instance=7))
    # nothing was created or started: the refusal comes before the lab is touched
    assert not state_dir.exists()


def test_the_cli_refuses_with_the_reason(other_collection: tuple[Path, int]) -> None:
    state_dir, pid = other_collection
    r = subprocess.run(
        [*CCSCOPE, "lab", "down", "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1, r.stderr
    assert f"leased to a running collection (pid {pid}" in r.stderr


def test_the_holder_and_its_children_may_use_their_own_lab(tmp_path: Path) -> None:
    prefix = str(tmp_path / "lab-")
    state_dir = Path(f"{prefix}7")
    with exclusive(collection_locks(tmp_path / "draws", [7], prefix)):
        assert lease_holder(state_dir) is None  # ours
        assert Lab(state_dir).down()["was_up"] is False
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                f"from ccscope.lab.lease import lease_holder; print(lease_holder({str(state_dir)!r}))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert child.stdout.strip() == "None", child.stderr
    # released with the collection
    assert lease_holder(state_dir) is None
    assert os.path.exists(lease_path(state_dir))


BARE_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_lease_without_a_readable_pid_still_counts_as_held(tmp_path: Path) -> None:
    """A holder that locked the file but wrote no pid (or garbage) holds it all the same: the
    refusal must not depend on the stamp."""
    state_dir = tmp_path / "lab-7"
    p = subprocess.Popen(
        [sys.executable, "-c", BARE_HOLDER, str(lease_path(state_dir))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        assert lease_holder(state_dir) == -1
        with pytest.raises(LabLeased, match=r"pid unknown: its lock file holds none"):
            Lab(state_dir).down()
    finally:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(timeout=10)
    assert lease_holder(state_dir) is None  # released with its holder
