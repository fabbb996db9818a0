"""Alembic environment: aegis always hands in an open connection (see bot/store/migrate.py)."""

from alembic import context

from bot.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
context.run_migrations()
