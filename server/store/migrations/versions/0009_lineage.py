"""Models like a registry (issue 29): a version's lineage and note, and rollbacks as their own kind

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 08:00:00.000000

Hand-written, like 0008 (``batch_alter_table``: SQLite and PostgreSQL take the same script). Versions
written before have no origin: they read as trained (or, version 0, initial); promotions written before
read as promotions (a rollback was stored as one then).
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("model_versions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("origin", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("source_version", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("note", sa.String(length=500), nullable=True))
    with op.batch_alter_table("promotions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("kind", sa.String(length=16), server_default="promotion", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("promotions", schema=None) as batch_op:
        batch_op.drop_column("kind")
    with op.batch_alter_table("model_versions", schema=None) as batch_op:
        batch_op.drop_column("note")
        batch_op.drop_column("source_version")
        batch_op.drop_column("origin")
