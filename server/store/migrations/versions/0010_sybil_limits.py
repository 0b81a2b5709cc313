"""Sybil limits (issue 30, part 4): a device row names the enrollment key it enrolled with, and a stored
key carries its quota of devices

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 09:00:00.000000

Hand-written, like 0009 (``batch_alter_table``: SQLite and PostgreSQL take the same script). Devices
enrolled before it name no key (NULL) and count against none: which key enrolled them was never
recorded. Keys created before it have no quota of their own (NULL): the coordinator's default,
FLEET_ENROLL_QUOTA_PER_KEY, applies to them.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("enrollment_key_id", sa.String(length=32), nullable=True))
        batch_op.create_index(batch_op.f("ix_devices_enrollment_key_id"), ["enrollment_key_id"], unique=False)
    with op.batch_alter_table("enrollment_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("max_devices", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("enrollment_keys", schema=None) as batch_op:
        batch_op.drop_column("max_devices")
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_devices_enrollment_key_id"))
        batch_op.drop_column("enrollment_key_id")
