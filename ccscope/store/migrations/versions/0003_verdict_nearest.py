"""The nearest trained family of an Unknown verdict as a column (the dashboard's Unknown page
groups by it), filled from the verdicts already stored, with an index for that query.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25 13:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_verdicts = sa.table(
    "verdicts", sa.column("id", sa.Integer), sa.column("kind", sa.String), sa.column("evidence", sa.JSON)
)


def upgrade() -> None:
    with op.batch_alter_table("verdicts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("nearest", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_verdicts_kind_day", ["kind", "measured_on"], unique=False)
    conn = op.get_bind()
    rows = conn.execute(sa.select(_verdicts.c.id, _verdicts.c.evidence).where(_verdicts.c.kind == "unknown"))
    fill = [
        {"vid": vid, "nearest": str(ev.get("nearest"))[:64]}
        for vid, ev in rows
        if isinstance(ev, dict) and ev.get("nearest")
    ]
    if fill:
        conn.execute(
            sa.text("UPDATE verdicts SET nearest = :nearest WHERE id = :vid"),
            fill,
        )


def downgrade() -> None:
    with op.batch_alter_table("verdicts", schema=None) as batch_op:
        batch_op.drop_index("ix_verdicts_kind_day")
        batch_op.drop_column("nearest")
