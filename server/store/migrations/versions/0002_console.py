"""console: device revocation and last features, enrollment keys, promotions, console accounts

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 09:00:00.000000

Hand-written. Added columns go through ``batch_alter_table`` so SQLite (no ALTER TABLE ... ADD
CONSTRAINT) and PostgreSQL take the same script.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_features", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("revoked_at", sa.Float(), nullable=True))

    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index("ix_tasks_model_id_answered_at", ["model_id", "answered_at"], unique=False)

    op.create_table(
        "promotions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("model_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("source_version", sa.Integer(), nullable=False),
        sa.Column("previous_model_id", sa.String(length=64), nullable=False),
        sa.Column("previous_version", sa.Integer(), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "enrollment_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("enrollment_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_enrollment_keys_key_hash"), ["key_hash"], unique=True)

    op.create_table(
        "admin_users",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("last_login", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("username"),
    )
    op.create_table(
        "admin_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id_hash"),
    )
    with op.batch_alter_table("admin_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_admin_sessions_username"), ["username"], unique=False)

    op.create_table(
        "settings_overrides",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )


def downgrade() -> None:
    op.drop_table("settings_overrides")
    with op.batch_alter_table("admin_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_admin_sessions_username"))
    op.drop_table("admin_sessions")
    op.drop_table("admin_users")
    with op.batch_alter_table("enrollment_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_enrollment_keys_key_hash"))
    op.drop_table("enrollment_keys")
    op.drop_table("promotions")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_model_id_answered_at")
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.drop_column("revoked_at")
        batch_op.drop_column("last_features")
