"""One rule finds the capture's compiled programs: the override, the repository's build, PATH."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ccscope.capture.binaries import find_built


def _exe(p: Path) -> Path:
    p.write_text("#!/bin/sh\n")
    p.chmod(0o755)
    return p


def test_override_then_build_then_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    on_path = _exe(tmp_path / "bin" / "prog")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    build = tmp_path / "build-prog"
    over = _exe(tmp_path / "over")
    assert find_built("prog", str(over), build) == over
    assert find_built("prog", str(tmp_path / "missing"), build) == on_path
    _exe(build)
    assert find_built("prog", None, build) == build
    build.chmod(0o644)  # not executable: passed over
    assert find_built("prog", None, build) == on_path
    assert find_built("no-such-prog-here", None, tmp_path / "nope") is None
