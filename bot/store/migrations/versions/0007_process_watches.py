"""process watches, and the watch a parked run waits for

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 13:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "process_watches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(length=100), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("checks", sa.Integer(), nullable=False),
        sa.Column("progress", sa.Text(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("next_check_at", WHEN, nullable=False),
        sa.Column("deadline_at", WHEN, nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("ended_at", WHEN, nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("process_watches", schema=None) as batch_op:
        batch_op.create_index("ix_process_watches_due", ["status", "next_check_at"], unique=False)
        batch_op.create_index("ix_process_watches_run", ["run_id", "status"], unique=False)
    with op.batch_alter_table("agent_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("watching", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_runs", schema=None) as batch_op:
        batch_op.drop_column("watching")
    with op.batch_alter_table("process_watches", schema=None) as batch_op:
        batch_op.drop_index("ix_process_watches_run")
        batch_op.drop_index("ix_process_watches_due")
    op.drop_table("process_watches")
