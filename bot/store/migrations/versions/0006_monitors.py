"""monitors, their hourly uptime and incidents

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 12:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "monitors",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=60), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("identity_hash", sa.String(length=64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(length=120), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("successes", sa.Integer(), nullable=False),
        sa.Column("state_since", WHEN, nullable=True),
        sa.Column("flips", sa.JSON(), nullable=False),
        sa.Column("flapping_since", WHEN, nullable=True),
        sa.Column("next_check_at", WHEN, nullable=False),
        sa.Column("last_check_at", WHEN, nullable=True),
        sa.Column("last_ok", sa.Boolean(), nullable=True),
        sa.Column("last_latency_ms", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("identity_hash"),
    )
    with op.batch_alter_table("monitors", schema=None) as batch_op:
        batch_op.create_index("ix_monitors_due", ["paused", "next_check_at"], unique=False)
    op.create_table(
        "monitor_hours",
        sa.Column("monitor_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("hour", WHEN, nullable=False),
        sa.Column("checks", sa.Integer(), nullable=False),
        sa.Column("ups", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("monitor_id", "hour"),
    )
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("subject", sa.String(length=160), nullable=False),
        sa.Column("open_key", sa.String(length=160), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("monitor_id", sa.Integer(), nullable=True),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("agents", sa.JSON(), nullable=False),
        sa.Column("opened_at", WHEN, nullable=False),
        sa.Column("closed_at", WHEN, nullable=True),
        sa.Column("close_note", sa.Text(), nullable=True),
        sa.Column("acked_at", WHEN, nullable=True),
        sa.Column("acked_by_name", sa.String(length=200), nullable=True),
        sa.Column("silenced_until", WHEN, nullable=True),
        sa.Column("next_remind_at", WHEN, nullable=True),
        sa.Column("reminders", sa.Integer(), nullable=False),
        sa.Column("restart_notice", sa.Boolean(), nullable=False),
        sa.Column("card_outbox_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("open_key"),
    )
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.create_index("ix_incidents_monitor", ["monitor_id", "closed_at"], unique=False)
        batch_op.create_index("ix_incidents_open", ["closed_at", "next_remind_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.drop_index("ix_incidents_open")
        batch_op.drop_index("ix_incidents_monitor")
    op.drop_table("incidents")
    op.drop_table("monitor_hours")
    with op.batch_alter_table("monitors", schema=None) as batch_op:
        batch_op.drop_index("ix_monitors_due")
    op.drop_table("monitors")
