"""API tests run on SQLite and on a real PostgreSQL started by the test set-up."""

from __future__ import annotations

import pytest

from tests.store.pg import pg_cluster, store

__all__ = ["pg_cluster", "store"]


@pytest.fixture(autouse=True)
def _no_inherited_lab_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lab mode comes from create_app(lab=...) in these tests, never from an earlier test that
    # set CCSCOPE_LAB=1 process-wide: that would let private targets through unnoticed.
    monkeypatch.delenv("CCSCOPE_LAB", raising=False)
