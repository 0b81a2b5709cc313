"""pure DP steps (issue 16): the privacy ledger's rows say their mechanism, a pure step's ε and norm bound

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 01:00:00.000000

Hand-written, like 0003 (``batch_alter_table``, so SQLite and PostgreSQL take the same script). Rows
written before it were all Poisson-subsampled Gaussian steps: the server defaults say so.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("privacy_charges", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "mechanism", sa.String(length=64), server_default="dpsgd-poisson-gaussian/1", nullable=False
            )
        )
        batch_op.add_column(sa.Column("epsilon", sa.Float(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("norm_bound", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("privacy_charges", schema=None) as batch_op:
        batch_op.drop_column("norm_bound")
        batch_op.drop_column("epsilon")
        batch_op.drop_column("mechanism")
