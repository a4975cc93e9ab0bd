"""The store on SQLite and on a real PostgreSQL started by the test set-up."""

from tests.store.pg import pg_cluster, store

__all__ = ["pg_cluster", "store"]
