"""the clock's lease, and each live process's memory on its heartbeat

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 16:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("holder", sa.String(length=120), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("heartbeats", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rss_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("heartbeats", schema=None) as batch_op:
        batch_op.drop_column("rss_bytes")
    op.drop_table("leases")
