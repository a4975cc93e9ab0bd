"""Alembic migrations of the ccscope store (run them with `Store.migrate()`)."""
