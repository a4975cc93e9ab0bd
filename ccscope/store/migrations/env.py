"""Alembic environment: runs on the engine the Store hands over (or the URL in the config)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from ccscope.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    engine = config.attributes.get("engine") or create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as connection:
        # render_as_batch: SQLite can only ALTER tables by copying them; batch mode does that.
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
