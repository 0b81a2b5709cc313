"""install identity (issue 27): a device row keeps the SHA-256 of its install's secret

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 12:00:00.000000

Hand-written, like 0003 (``batch_alter_table``, so SQLite and PostgreSQL take the same script). Enrolling
again with the same install secret returns the same device id, so the server-side privacy ledger goes on
instead of starting afresh. Rows written before it have no install: NULL (unique allows many NULLs).
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("install_hash", sa.String(length=64), nullable=True))
        batch_op.create_index(batch_op.f("ix_devices_install_hash"), ["install_hash"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_devices_install_hash"))
        batch_op.drop_column("install_hash")
