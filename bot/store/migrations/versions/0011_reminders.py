"""one-shot reminders made in chat

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 17:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "reminders",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("due_at", WHEN, nullable=False),
        sa.Column("claimed_at", WHEN, nullable=True),
        sa.Column("fired_at", WHEN, nullable=True),
        sa.Column("card_outbox_id", sa.Integer(), nullable=True),
        sa.Column("snoozes", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("reminders", schema=None) as batch_op:
        batch_op.create_index("ix_reminders_due", ["status", "due_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("reminders", schema=None) as batch_op:
        batch_op.drop_index("ix_reminders_due")
    op.drop_table("reminders")
