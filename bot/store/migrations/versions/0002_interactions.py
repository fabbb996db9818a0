"""interactions: cards, grants, audit, agent notes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 11:01:37.451414
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_notes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(length=100), nullable=False),
        sa.Column("interaction_id", sa.Integer(), nullable=True),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("agent_notes", schema=None) as batch_op:
        batch_op.create_index("ix_agent_notes_agent", ["agent", "created_at"], unique=False)

    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("agent", sa.String(length=100), nullable=True),
        sa.Column("tool", sa.String(length=200), nullable=True),
        sa.Column("args_hash", sa.String(length=64), nullable=True),
        sa.Column("interaction_id", sa.Integer(), nullable=True),
        sa.Column("user_id", sa.BigInteger(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index("ix_audit_events_at", ["at"], unique=False)

    op.create_table(
        "grants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("interaction_id", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(length=100), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("args_hash", sa.String(length=64), nullable=False),
        sa.Column("step_up", sa.Boolean(), nullable=False),
        sa.Column("granted_by", sa.BigInteger(), nullable=False),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("interaction_id"),
    )
    with op.batch_alter_table("grants", schema=None) as batch_op:
        batch_op.create_index(
            "ix_grants_hash", ["args_hash", "used_at", "expires_at"], unique=False
        )

    op.create_table(
        "interaction_cards",
        sa.Column("outbox_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("interaction_id", sa.Integer(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("outbox_id"),
    )
    with op.batch_alter_table("interaction_cards", schema=None) as batch_op:
        batch_op.create_index("ix_interaction_cards_chat", ["chat_id", "outbox_id"], unique=False)
        batch_op.create_index("ix_interaction_cards_interaction", ["interaction_id"], unique=False)

    op.create_table(
        "interactions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("agent", sa.String(length=100), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=True),
        sa.Column("args", sa.JSON(), nullable=True),
        sa.Column("args_hash", sa.String(length=64), nullable=True),
        sa.Column("step_up", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("outcome", sa.String(length=100), nullable=True),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("timeout_policy", sa.String(length=16), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("code_from", sa.BigInteger(), nullable=True),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_by", sa.BigInteger(), nullable=True),
        sa.Column("resolved_by_name", sa.String(length=200), nullable=True),
        sa.Column("continuation_actor", sa.String(length=100), nullable=True),
        sa.Column("continuation_kwargs", sa.JSON(), nullable=False),
        sa.Column("continuation_sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("continued_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("interactions", schema=None) as batch_op:
        batch_op.create_index("ix_interactions_hash", ["args_hash", "status"], unique=False)
        batch_op.create_index("ix_interactions_status", ["status", "expires_at"], unique=False)

    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("caption", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("edit_of", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_column("edit_of")
        batch_op.drop_column("caption")

    with op.batch_alter_table("interactions", schema=None) as batch_op:
        batch_op.drop_index("ix_interactions_status")
        batch_op.drop_index("ix_interactions_hash")

    op.drop_table("interactions")
    with op.batch_alter_table("interaction_cards", schema=None) as batch_op:
        batch_op.drop_index("ix_interaction_cards_interaction")
        batch_op.drop_index("ix_interaction_cards_chat")

    op.drop_table("interaction_cards")
    with op.batch_alter_table("grants", schema=None) as batch_op:
        batch_op.drop_index("ix_grants_hash")

    op.drop_table("grants")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_events_at")

    op.drop_table("audit_events")
    with op.batch_alter_table("agent_notes", schema=None) as batch_op:
        batch_op.drop_index("ix_agent_notes_agent")

    op.drop_table("agent_notes")
