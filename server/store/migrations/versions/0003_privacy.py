"""privacy: the per-example-clipped gradient graph, devices' local dataset size, the privacy ledger

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 23:40:00.000000

Hand-written, like 0002: added columns go through ``batch_alter_table`` so SQLite and PostgreSQL take
the same script.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dp_onnx", sa.LargeBinary(), nullable=True))
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("local_examples", sa.Integer(), nullable=True))
    op.create_table(
        "privacy_charges",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("device_id", sa.String(length=32), nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("model_id", sa.String(length=64), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("noise_multiplier", sa.Float(), nullable=False),
        sa.Column("sampling_rate", sa.Float(), nullable=False),
        sa.Column("local_examples", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id"),
    )
    with op.batch_alter_table("privacy_charges", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_privacy_charges_device_id"), ["device_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("privacy_charges", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_privacy_charges_device_id"))
    op.drop_table("privacy_charges")
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.drop_column("local_examples")
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("dp_onnx")
