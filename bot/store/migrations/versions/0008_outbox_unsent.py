"""the outbox's unsent rows indexed apart, for /status, /metrics and retention

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 15:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UNSENT = sa.text("status != 'sent'")


def upgrade() -> None:
    op.create_index(
        "ix_outbox_unsent",
        "outbox",
        ["status", "created_at"],
        unique=False,
        sqlite_where=UNSENT,
        postgresql_where=UNSENT,
    )


def downgrade() -> None:
    op.drop_index("ix_outbox_unsent", table_name="outbox")
