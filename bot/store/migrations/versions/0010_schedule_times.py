"""schedules at a time of day (cron in the owner's zone), and the runs they missed

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 17:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cron", sa.String(length=100), nullable=True))
        batch_op.add_column(
            sa.Column("missed", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch_op.add_column(sa.Column("last_missed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_column("last_missed_at")
        batch_op.drop_column("missed")
        batch_op.drop_column("cron")
