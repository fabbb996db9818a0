"""Migrations on SQLite and Postgres: applied once, safe to race, equal to ``bot.store.tables``."""

from __future__ import annotations

import asyncio

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from bot.store import migrate, search
from bot.store.database import Store
from bot.store.tables import metadata

REVISIONS = [f"{n:04d}" for n in range(1, 15)]
HEAD = REVISIONS[-1]
SEARCH_INDEXES = search.index_names()


async def schema_differences(store: Store) -> list:
    def compare(connection) -> list:
        context = MigrationContext.configure(
            connection,
            opts={
                "compare_type": True,
                "compare_server_default": True,
                # bot/store/search.py's indexes live outside the tables (FTS5 tables, GIN indexes)
                "include_name": lambda name, kind, parents: name not in SEARCH_INDEXES,
            },
        )
        return compare_metadata(context, metadata)

    async with store.read() as conn:
        return await conn.run_sync(compare)


async def table_names(store: Store) -> set[str]:
    async with store.read() as conn:
        names = set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
    return names - SEARCH_INDEXES


async def current_heads(store: Store) -> tuple[str, ...]:
    async with store.read() as conn:
        return await conn.run_sync(
            lambda sync: MigrationContext.configure(sync).get_current_heads()
        )


async def test_an_empty_database_gets_every_revision_and_a_second_upgrade_applies_nothing(
    database_url,
):
    store = Store(database_url)
    try:
        assert await migrate.pending_revisions(store) == REVISIONS
        assert await migrate.upgrade(store) == REVISIONS
        assert await current_heads(store) == (HEAD,)
        assert await migrate.pending_revisions(store) == []
        assert await migrate.upgrade(store) == []
        assert await current_heads(store) == (HEAD,)
    finally:
        await store.close()


async def test_three_processes_upgrading_at_once_all_succeed_and_one_does_the_work(database_url):
    stores = [Store(database_url) for _ in range(3)]
    try:
        applied = await asyncio.gather(*(migrate.upgrade(store) for store in stores))
        assert sorted(applied) == [[], [], REVISIONS]
        assert await current_heads(stores[0]) == (HEAD,)
        assert await table_names(stores[0]) == set(metadata.tables) | {"alembic_version"}
        assert await schema_differences(stores[0]) == []
    finally:
        for store in stores:
            await store.close()


async def test_the_migrated_schema_matches_the_tables_module(store):
    # Nothing is ignored: compare_metadata compares types through UTCDateTime's impl, and
    # SQLite reflects DATETIME, JSON, BIGINT and BOOLEAN back as the types we declared.
    assert await schema_differences(store) == []
    assert await table_names(store) == set(metadata.tables) | {"alembic_version"}


async def test_the_comparison_would_see_a_drift(store):
    """Guard the guard: a column the migration never made shows up as a difference."""
    from sqlalchemy import Column, Integer, MetaData, Table

    drifted = MetaData()
    for table in metadata.tables.values():
        table.to_metadata(drifted)
    Table("outbox", drifted, Column("priority", Integer), extend_existing=True)

    def compare(connection) -> list:
        skip_search = {"include_name": lambda name, kind, parents: name not in SEARCH_INDEXES}
        context = MigrationContext.configure(connection, opts=skip_search)
        return compare_metadata(context, drifted)

    async with store.read() as conn:
        differences = await conn.run_sync(compare)
    assert [(d[0], d[3].name) for d in differences] == [("add_column", "priority")]
