"""a forum topic per agent: the group, each agent's topic, and the thread each message goes to

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 19:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

WHEN = sa.DateTime(timezone=True)
THREADED = ("outbox", "agent_runs", "interactions")


def upgrade() -> None:
    op.create_table(
        "forum",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("home_chat_id", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("problem", sa.Text(), nullable=True),
        sa.Column("set_at", WHEN, nullable=False),
        sa.Column("changed_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "topics",
        sa.Column("agent", sa.String(length=100), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("thread_id", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("agent", "chat_id"),
        sa.UniqueConstraint("chat_id", "thread_id", name="uq_topics_thread"),
    )
    for table in THREADED:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("thread_id", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    for table in THREADED:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("thread_id")
    op.drop_table("topics")
    op.drop_table("forum")
