"""The store on SQLite and Postgres: concurrent writers lose nothing and never see "database is
locked", transactions commit or roll back as promised, and outages become a StoreError that
never shows a password."""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import socket
import sqlite3
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select, update
from sqlalchemy.engine import URL, make_url

from bot.errors import StoreError
from bot.store.database import Store

scratch = MetaData()
counters = Table(
    "test_counters",
    scratch,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("value", Integer, nullable=False),
)
notes = Table("test_notes", scratch, Column("text", String(50), nullable=False))


@pytest.fixture
async def scratch_store(store: Store) -> Store:
    async with store.write() as conn:
        await conn.run_sync(scratch.create_all)
        await conn.execute(insert(counters).values(id=1, value=0))
    return store


# -- concurrent writers --------------------------------------------------------------------


async def _increment(store: Store, rounds: int) -> None:
    """Read the counter, yield to everyone else, write it back plus one: a lost update shows."""
    for _ in range(rounds):
        async with store.write() as conn:
            # FOR UPDATE is what Postgres needs for read-then-write under READ COMMITTED;
            # SQLAlchemy leaves it out on SQLite, where BEGIN IMMEDIATE already serialises us.
            query = select(counters.c.value).where(counters.c.id == 1).with_for_update()
            value = (await conn.execute(query)).scalar_one()
            await asyncio.sleep(0)
            await conn.execute(update(counters).where(counters.c.id == 1).values(value=value + 1))
        async with store.read() as conn:  # readers run alongside the writers
            await conn.execute(select(counters.c.value))


async def _increment_concurrently(url: str, tasks: int, rounds: int) -> int:
    store = Store(url)
    try:
        await asyncio.gather(*(_increment(store, rounds) for _ in range(tasks)))
    finally:
        await store.close()
    return tasks * rounds


def increment_in_process(url: str, tasks: int, rounds: int) -> int:
    """Entry point of a spawned process: its own loop, its own Store."""
    return asyncio.run(_increment_concurrently(url, tasks, rounds))


async def test_concurrent_processes_and_tasks_never_lose_an_update(scratch_store, database_url):
    processes = 3 if scratch_store.is_sqlite else 2
    tasks, rounds = 20, 5
    spawn = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    with concurrent.futures.ProcessPoolExecutor(processes, mp_context=spawn) as pool:
        done = await asyncio.gather(
            *(
                loop.run_in_executor(pool, increment_in_process, database_url, tasks, rounds)
                for _ in range(processes)
            ),
            # and this process's own store at the same time
            _increment_concurrently(database_url, tasks, rounds),
        )
    async with scratch_store.read() as conn:
        final = (await conn.execute(select(counters.c.value))).scalar_one()
    assert final == sum(done) == (processes + 1) * tasks * rounds


# -- transactions --------------------------------------------------------------------------


async def note_texts(store: Store) -> list[str]:
    async with store.read() as conn:
        return list((await conn.execute(select(notes.c.text).order_by(notes.c.text))).scalars())


async def test_read_rolls_back_whatever_it_did(scratch_store):
    async with scratch_store.read() as conn:
        await conn.execute(insert(notes).values(text="never kept"))
        assert (await conn.execute(select(notes.c.text))).scalars().all() == ["never kept"]
    assert await note_texts(scratch_store) == []


async def test_write_commits(scratch_store):
    async with scratch_store.write() as conn:
        await conn.execute(insert(notes).values(text="kept"))
    assert await note_texts(scratch_store) == ["kept"]


async def test_write_rolls_back_on_error_and_the_error_passes_through(scratch_store):
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with scratch_store.write() as conn:
            await conn.execute(insert(notes).values(text="half done"))
            raise Boom
    assert await note_texts(scratch_store) == []
    async with scratch_store.write() as conn:  # the store is still usable afterwards
        await conn.execute(insert(notes).values(text="after"))
    assert await note_texts(scratch_store) == ["after"]


async def test_a_constraint_violation_is_not_mistaken_for_an_outage(scratch_store):
    from sqlalchemy.exc import IntegrityError

    with pytest.raises(IntegrityError):
        async with scratch_store.write() as conn:
            await conn.execute(insert(counters).values(id=1, value=5))


# -- outages and passwords -----------------------------------------------------------------

PASSWORD = "hunter2-Sup3rSecret"  # noqa: S105


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nobody listens once the probe is closed


def assert_safe_sentence(error: StoreError, store: Store) -> None:
    message = str(error)
    assert PASSWORD not in message
    assert "\n" not in message and "Traceback" not in message
    assert store.describe() in message


@pytest.mark.parametrize("operation", ["ping", "read", "write"])
async def test_postgres_on_a_closed_port_raises_a_store_error_without_the_password(operation):
    store = Store(f"postgresql+asyncpg://aegis:{PASSWORD}@127.0.0.1:{closed_port()}/aegis")
    try:
        with pytest.raises(StoreError, match="unavailable") as raised:
            if operation == "ping":
                await store.ping()
            else:
                async with getattr(store, operation)() as conn:
                    await conn.exec_driver_sql("SELECT 1")
        assert_safe_sentence(raised.value, store)
    finally:
        await store.close()


async def test_postgres_refusing_the_login_raises_a_store_error_without_the_password(postgres_dsn):
    server = make_url(postgres_dsn).set(
        drivername="postgresql+asyncpg", username="aegis_no_such_role", password=PASSWORD
    )
    store = Store(server.render_as_string(hide_password=False))
    try:
        with pytest.raises(StoreError, match="refused") as raised:
            await store.ping()
        assert_safe_sentence(raised.value, store)
    finally:
        await store.close()


async def _backends_of(store: Store) -> list[int]:
    async with store.read() as conn:
        query = "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        return list((await conn.exec_driver_sql(query)).scalars())


async def test_connections_the_postgres_server_closed_are_replaced_before_use(postgres_dsn):
    """A restart closes every pooled connection; the next transactions get new ones and never
    see the closed ones (no outage for what happened while nothing was running)."""
    import asyncpg

    from tests.conftest import _create_database, _drop_database

    name, url = await _create_database(postgres_dsn)
    store = Store(url)
    try:
        async with store.write() as first, store.write() as second:  # two pooled connections
            await first.exec_driver_sql("SELECT 1")
            await second.exec_driver_sql("SELECT 1")
        before = await _backends_of(store)
        admin = await asyncpg.connect(postgres_dsn)
        try:
            closed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1",
                name,
            )
        finally:
            await admin.close()
        assert closed == 2
        await asyncio.sleep(0.2)  # the server's goodbye reaches the idle sockets
        for _ in range(3):
            async with store.write() as conn:
                assert (await conn.exec_driver_sql("SELECT 1")).scalar() == 1
        assert not set(before) & set(await _backends_of(store))
    finally:
        await store.close()
        await _drop_database(postgres_dsn, name)


async def test_a_database_taking_no_connections_is_an_outage_and_passes(postgres_dsn):
    """``ALLOW_CONNECTIONS false`` (SQLSTATE 55000) stops nothing for good: a StoreError while
    it lasts, as for a server down, and the next transaction after it works."""
    import asyncpg

    from tests.conftest import _create_database, _drop_database

    name, url = await _create_database(postgres_dsn)
    store = Store(url)
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        for operation in ("read", "write"):
            with pytest.raises(StoreError, match="refused the connection") as raised:
                async with getattr(store, operation)() as conn:
                    await conn.exec_driver_sql("SELECT 1")
            assert "not currently accepting connections" in str(raised.value)
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await store.ping()
    finally:
        await admin.close()
        await store.close()
        await _drop_database(postgres_dsn, name)


async def test_a_failed_sqlite_commit_frees_the_file_for_other_writers(tmp_path):
    """A deferred foreign key fails at COMMIT; the write lock must not outlive the failure."""
    path = tmp_path / "deferred.sqlite3"
    store = Store(f"sqlite+aiosqlite:///{path}")
    try:
        async with store.write() as conn:
            await conn.exec_driver_sql("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
            await conn.exec_driver_sql(
                "CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER"
                " REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)"
            )
        with pytest.raises(Exception, match="FOREIGN KEY"):
            async with store.write() as conn:
                await conn.exec_driver_sql("INSERT INTO child (id, parent) VALUES (1, 99)")

        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # "database is locked" if the failure kept the lock
        other.execute("INSERT INTO parent (id) VALUES (7)")
        other.execute("COMMIT")
        other.close()
        async with store.write() as conn:  # and this process writes again
            await conn.exec_driver_sql("INSERT INTO child (id, parent) VALUES (2, 7)")
        async with store.read() as conn:
            rows = (await conn.exec_driver_sql("SELECT id, parent FROM child")).all()
        assert [tuple(row) for row in rows] == [(2, 7)]
    finally:
        await store.close()


async def test_sqlite_in_a_missing_directory_raises_a_store_error(tmp_path):
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'aegis.db'}")
    before = set(threading.enumerate())
    try:
        with pytest.raises(StoreError, match="unavailable") as raised:
            await store.ping()
        assert_safe_sentence(raised.value, store)
    finally:
        await store.close()
        # aiosqlite stops the failed connection's thread, which then reports back to this
        # loop; let it finish while the loop still runs, or it complains after the test.
        for thread in set(threading.enumerate()) - before:
            await asyncio.to_thread(thread.join, 5)


secret_text = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=30
).map(lambda text: "Pw" + text)


@settings(max_examples=60, deadline=None)
@given(
    password=secret_text,
    user=st.sampled_from(["aegis", "u", "admin"]),
    host=st.sampled_from(["db", "10.0.0.5", "localhost"]),
    port=st.none() | st.integers(1, 65535),
)
def test_describe_never_contains_the_password(password, user, host, port):
    url = URL.create(
        "postgresql+asyncpg", username=user, password=password, host=host, port=port, database="a"
    )
    store = Store(url.render_as_string(hide_password=False))
    # No connection was made: disposing an unused engine is synchronous housekeeping.
    store.read_engine.sync_engine.dispose()
    description = store.describe()
    assert password not in description
    assert description.startswith("PostgreSQL at ")


def test_describe_names_the_sqlite_file(tmp_path):
    path = tmp_path / "aegis.sqlite3"
    assert Store(f"sqlite+aiosqlite:///{path}").describe() == f"SQLite at {path}"
