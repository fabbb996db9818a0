"""tasks and searchable notes (the card notes of 0002 move into notes)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 14:00:00
"""

import sqlalchemy as sa
from alembic import op

from bot.store import search

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("capture_key", sa.String(length=200), nullable=True),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("assignee", sa.String(length=100), nullable=True),
        sa.Column("attachments", sa.JSON(), nullable=False),
        sa.Column("origin_kind", sa.String(length=16), nullable=False),
        sa.Column("origin_name", sa.String(length=200), nullable=True),
        sa.Column("origin_user_id", sa.BigInteger(), nullable=True),
        sa.Column("origin_chat_id", sa.BigInteger(), nullable=True),
        sa.Column("origin_message_id", sa.BigInteger(), nullable=True),
        sa.Column("origin_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("origin_link", sa.String(length=300), nullable=True),
        sa.Column("chat_id", sa.BigInteger(), nullable=True),
        sa.Column("message_id", sa.BigInteger(), nullable=True),
        sa.Column("captured_by", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("triaged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("triaged_by", sa.String(length=120), nullable=True),
        sa.Column("triage_interaction_id", sa.Integer(), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_as", sa.String(length=16), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("capture_key"),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tasks_open",
            ["state", "id"],
            unique=False,
            sqlite_where=sa.text("closed_at IS NULL"),
            postgresql_where=sa.text("closed_at IS NULL"),
        )
        batch_op.create_index("ix_tasks_message", ["chat_id", "message_id"], unique=False)
        batch_op.create_index("ix_tasks_assignee", ["assignee", "state"], unique=False)

    notes = op.create_table(
        "notes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("agent", sa.String(length=100), nullable=True),
        sa.Column("task_id", sa.Integer(), nullable=True),
        sa.Column("interaction_id", sa.Integer(), nullable=True),
        sa.Column("user_id", sa.BigInteger(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("notes", schema=None) as batch_op:
        batch_op.create_index("ix_notes_agent", ["agent", "id"], unique=False)

    bind = op.get_bind()
    for table in search.SEARCHED:
        statements = (
            search.sqlite_index_sql(table)
            if bind.dialect.name == "sqlite"
            else search.postgres_index_sql(table)
        )
        for statement in statements:
            op.execute(statement)

    # The notes owners left on cards (0002's agent_notes) become searchable notes.
    old = sa.table(
        "agent_notes",
        sa.column("id", sa.Integer),
        sa.column("agent", sa.String),
        sa.column("interaction_id", sa.Integer),
        sa.column("user_id", sa.BigInteger),
        sa.column("text", sa.Text),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    rows = bind.execute(sa.select(old).order_by(old.c.id)).mappings().all()
    if rows:
        op.bulk_insert(
            notes,
            [
                {
                    "kind": "agent",
                    "agent": row["agent"],
                    "interaction_id": row["interaction_id"],
                    "user_id": row["user_id"],
                    "text": row["text"],
                    "search_text": search.search_text(row["text"]),
                    "created_at": row["created_at"],
                }
                for row in rows
            ],
        )
    with op.batch_alter_table("agent_notes", schema=None) as batch_op:
        batch_op.drop_index("ix_agent_notes_agent")
    op.drop_table("agent_notes")


def downgrade() -> None:
    agent_notes = op.create_table(
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
    bind = op.get_bind()
    notes = sa.table(
        "notes",
        *(sa.column(name) for name in ("agent", "interaction_id", "user_id", "text", "kind")),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    query = sa.select(notes).where(notes.c.kind == "agent", notes.c.user_id.is_not(None))
    rows = bind.execute(query).mappings().all()
    if rows:
        op.bulk_insert(
            agent_notes, [{key: row[key] for key in row if key != "kind"} for row in rows]
        )
    for table, fts in search.SEARCHED.items():
        if bind.dialect.name == "sqlite":
            op.execute(f"DROP TABLE {fts}")  # its triggers go with the table they are on
        else:
            op.execute(f"DROP INDEX ix_{table}_search")
    with op.batch_alter_table("notes", schema=None) as batch_op:
        batch_op.drop_index("ix_notes_agent")
    op.drop_table("notes")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_assignee")
        batch_op.drop_index("ix_tasks_message")
        batch_op.drop_index("ix_tasks_open")
    op.drop_table("tasks")
