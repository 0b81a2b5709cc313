"""DP push norm floor (issue 27): a charge keeps the least norm its noise gives a push

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 02:00:00.000000

Hand-written, like 0004 (``batch_alter_table``: SQLite and PostgreSQL take the same script). A lease
recalled after a restart is checked against the floor its grant stored; rows written before have none.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("privacy_charges", schema=None) as batch_op:
        batch_op.add_column(sa.Column("norm_floor", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("privacy_charges", schema=None) as batch_op:
        batch_op.drop_column("norm_floor")
