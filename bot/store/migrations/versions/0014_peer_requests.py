"""requests between linked instances: ours to a peer (its outbox) and a peer's to us

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03 19:20:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "peer_requests",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("direction", sa.String(length=3), nullable=False),
        sa.Column("peer", sa.String(length=63), nullable=False),
        sa.Column("request_id", sa.String(length=32), nullable=False),
        sa.Column("action", sa.String(length=20), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("agent", sa.String(length=100), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("card", sa.Integer(), nullable=True),
        sa.Column("chat_id", sa.BigInteger(), nullable=True),
        sa.Column("outbox_id", sa.Integer(), nullable=True),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("updated_at", WHEN, nullable=False),
        sa.Column("finished_at", WHEN, nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("direction", "peer", "request_id", name="uq_peer_requests_id"),
    )
    op.create_index("ix_peer_requests_open", "peer_requests", ["direction", "state", "peer", "id"])


def downgrade() -> None:
    op.drop_index("ix_peer_requests_open", table_name="peer_requests")
    op.drop_table("peer_requests")
