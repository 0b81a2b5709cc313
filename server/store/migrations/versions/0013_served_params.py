"""A version can keep the parameters served at it, when they are not the trained ones: a serving-average
strategy serves an average of the last versions, and an evaluated version keeps the average it was scored
as, so downloading it later gives the model the console recorded (issue 28)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29 00:15:00.000000

Hand-written, like 0012. Versions written before it, and those never evaluated, keep none (NULL): they
are served as trained.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("model_versions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("served", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("model_versions", schema=None) as batch_op:
        batch_op.drop_column("served")
