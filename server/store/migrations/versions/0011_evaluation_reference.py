"""An evaluation can carry a reference: the same metric, on the same data, of the model as it was
FLEET_EVAL_REFERENCE_AGE_S before (issue 31: on data that moves, what a rarely updated model would score)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 09:00:00.000000

Hand-written, like 0010. Evaluations recorded before it have no reference (NULL), as do those of a
coordinator that does not set one.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reference", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.drop_column("reference")
