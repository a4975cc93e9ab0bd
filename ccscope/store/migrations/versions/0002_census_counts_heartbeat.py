"""The aggregated census (filled from the verdicts already stored), its version, measurement heartbeats.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 04:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "census_counts",
        sa.Column("measured_on", sa.Date(), nullable=False),
        sa.Column("vantage_id", sa.Integer(), nullable=False),
        sa.Column("transport", sa.String(length=16), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["vantage_id"], ["vantage_points.id"]),
        sa.PrimaryKeyConstraint("measured_on", "vantage_id", "transport", "campaign_id", "label"),
    )
    op.execute(
        "INSERT INTO census_counts (measured_on, vantage_id, transport, campaign_id, label, n)"
        " SELECT v.measured_on, v.vantage_id, v.transport, COALESCE(m.campaign_id, 0), v.label, count(*)"
        " FROM verdicts v JOIN measurements m ON m.id = v.measurement_id"
        " GROUP BY v.measured_on, v.vantage_id, v.transport, COALESCE(m.campaign_id, 0), v.label"
    )
    version = op.create_table(
        "census_version",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(version, [{"id": 1, "version": 0}])
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.drop_column("heartbeat_at")
    op.drop_table("census_version")
    op.drop_table("census_counts")
