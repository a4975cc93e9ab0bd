"""PostgreSQL fixtures: a throwaway cluster per test session (ccscope.store.pgcluster) and a
migrated, empty store per test on each backend.

Imported by the conftest of each test folder that needs a store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ccscope.store import Store
from ccscope.store.pgcluster import PgCluster, pg_bindir, running_cluster

__all__ = ["PgCluster", "pg_bindir", "pg_cluster", "running_cluster", "store"]


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    with running_cluster() as c:
        yield c


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated, empty store on each backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        url = request.getfixturevalue("pg_cluster").new_database()
    s = Store(url, str(tmp_path / "traces"))
    s.migrate()
    yield s
    s.close()
