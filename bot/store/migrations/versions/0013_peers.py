"""links with other aegis instances: name, direction, address, names in the link, contact, refusals

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 13:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "peers",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("direction", sa.String(length=3), nullable=False),
        sa.Column("url", sa.String(length=500), nullable=True),
        sa.Column("us", sa.String(length=63), nullable=False),
        sa.Column("them", sa.String(length=63), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("invitation", sa.String(length=32), nullable=False),
        sa.Column("expires_at", WHEN, nullable=True),
        sa.Column("previous_until", WHEN, nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("last_contact_at", WHEN, nullable=True),
        sa.Column("skew_seconds", sa.Float(), nullable=True),
        sa.Column("refusals", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("name", "direction"),
        sa.UniqueConstraint("invitation"),
    )


def downgrade() -> None:
    op.drop_table("peers")
