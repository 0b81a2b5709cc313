"""Join codes: an enrollment key may expire (a phone joins by scanning a short-lived code from the console)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 09:00:00.000000

Hand-written, like 0011. Keys created before it never expire (NULL), as do the keys the console's
settings page creates; only join codes carry an end.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("enrollment_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expires_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("enrollment_keys", schema=None) as batch_op:
        batch_op.drop_column("expires_at")
