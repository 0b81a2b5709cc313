"""scale-out (issue 18): the push queue API workers fill and the aggregator drains, and its lease

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 06:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "push_queue",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("gradient", sa.LargeBinary(), nullable=False),
        sa.Column("enqueued_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id"),
    )
    op.create_table(
        "aggregator_lease",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=120), nullable=False),
        sa.Column("token", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("aggregator_lease")
    op.drop_table("push_queue")
