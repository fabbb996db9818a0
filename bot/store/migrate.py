"""Migrations apply themselves at start-up; ``aegis db upgrade`` runs the same code.

Web, worker and clock may start at the same moment, so the upgrade runs inside one write
transaction that also serialises them: ``BEGIN IMMEDIATE`` on SQLite, an advisory lock on
Postgres. The loser waits, then finds nothing left to do.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from bot.store.database import Store

MIGRATIONS = Path(__file__).parent / "migrations"
POSTGRES_LOCK_ID = 0x6165_6769  # "aegi"


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


async def upgrade(store: Store) -> list[str]:
    """Bring the schema to the newest revision; returns the revisions it applied."""
    async with store.write() as conn:
        if not store.is_sqlite:
            await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({POSTGRES_LOCK_ID})")
        return await conn.run_sync(_upgrade_sync)


async def pending_revisions(store: Store) -> list[str]:
    async with store.read() as conn:
        return await conn.run_sync(_pending_sync)


def _upgrade_sync(connection) -> list[str]:
    pending = _pending_sync(connection)
    if pending:
        config = alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    return pending


def _pending_sync(connection) -> list[str]:
    current = MigrationContext.configure(connection).get_current_heads()
    script = ScriptDirectory.from_config(alembic_config())
    pending = []
    for revision in script.walk_revisions("base", "heads"):
        if revision.revision in current:
            break
        pending.append(revision.revision)
    return list(reversed(pending))
