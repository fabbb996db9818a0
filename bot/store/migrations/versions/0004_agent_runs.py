"""agent runs, model-call ledger, agent tokens, schedules from aegis.yaml, replies to rows

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 15:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(length=100), nullable=False),
        sa.Column("request", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=True),
        sa.Column("schedule", sa.String(length=100), nullable=True),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("step", sa.String(length=200), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("effects", sa.JSON(), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("waiting_on", sa.Integer(), nullable=True),
        sa.Column("progress_outbox_id", sa.Integer(), nullable=True),
        sa.Column("deadline_seconds", sa.Integer(), nullable=False),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("idempotency_key"),
    )
    with op.batch_alter_table("agent_runs", schema=None) as batch_op:
        batch_op.create_index("ix_agent_runs_status", ["status", "heartbeat_at"], unique=False)
        batch_op.create_index("ix_agent_runs_task", ["task_id", "created_at"], unique=False)
        batch_op.create_index("ix_agent_runs_schedule", ["schedule", "status"], unique=False)
        batch_op.create_index("ix_agent_runs_agent", ["agent", "id"], unique=False)
    op.create_table(
        "model_calls",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("agent", sa.String(length=100), nullable=False),
        sa.Column("provider", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=40), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("model_calls", schema=None) as batch_op:
        batch_op.create_index(
            "ix_model_calls_model", ["provider", "model", "status", "at"], unique=False
        )
        batch_op.create_index("ix_model_calls_agent", ["agent", "at"], unique=False)
    op.create_table(
        "agent_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(length=100), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("agent_tokens", schema=None) as batch_op:
        batch_op.create_index("ix_agent_tokens_agent", ["agent"], unique=False)
    # Plain ADD COLUMN, not a batch: SQLite adds these in place, without copying the table.
    op.add_column("schedules", sa.Column("kwargs", sa.JSON(), nullable=True))
    op.add_column("schedules", sa.Column("source", sa.String(length=16), nullable=True))
    op.add_column(
        "schedules",
        sa.Column("skipped", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column(
        "schedules", sa.Column("last_skipped_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("outbox", sa.Column("reply_to_outbox", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_column("reply_to_outbox")
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_column("last_skipped_at")
        batch_op.drop_column("skipped")
        batch_op.drop_column("source")
        batch_op.drop_column("kwargs")
    with op.batch_alter_table("agent_tokens", schema=None) as batch_op:
        batch_op.drop_index("ix_agent_tokens_agent")
    op.drop_table("agent_tokens")
    with op.batch_alter_table("model_calls", schema=None) as batch_op:
        batch_op.drop_index("ix_model_calls_agent")
        batch_op.drop_index("ix_model_calls_model")
    op.drop_table("model_calls")
    with op.batch_alter_table("agent_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_agent_runs_agent")
        batch_op.drop_index("ix_agent_runs_schedule")
        batch_op.drop_index("ix_agent_runs_task")
        batch_op.drop_index("ix_agent_runs_status")
    op.drop_table("agent_runs")
