"""DP pushes carry no loss (issue 27): measurements.loss becomes nullable

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 02:00:00.000000

Hand-written, like 0003 (``batch_alter_table``, so SQLite and PostgreSQL take the same script). A DP
device sends neither its loss nor its label counts (they are not noised); the measurement of its push
has a NULL loss. Downgrading sets those to NaN first, so the NOT NULL constraint can come back.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.alter_column("loss", existing_type=sa.Float(), nullable=True)


def downgrade() -> None:
    op.execute("UPDATE measurements SET loss = 'NaN' WHERE loss IS NULL")
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.alter_column("loss", existing_type=sa.Float(), nullable=False)
