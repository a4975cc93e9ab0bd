"""Crawler tests decide lab mode themselves (SafeClient(lab=...)); none may inherit it."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_inherited_lab_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # An earlier test in the same session may have switched lab mode on process-wide
    # (CCSCOPE_LAB=1 in os.environ, as `ccscope census --lab` does): that would let loopback and
    # private targets through and hide exactly what these tests check.
    monkeypatch.delenv("CCSCOPE_LAB", raising=False)
