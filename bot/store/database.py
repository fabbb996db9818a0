"""The database: SQLAlchemy 2 async engines for SQLite and Postgres, and their transactions.

SQLite needs care to never fail with "database is locked": a deferred transaction that reads
and then writes can be refused at once, without waiting, when another connection wrote in
between. So every write transaction starts with ``BEGIN IMMEDIATE``, which takes the write lock
up front; writes from one event loop queue on a single connection, and reads run on their own
pool under WAL, never blocked by the writer. Writers of one process, whatever their event loop,
take turns on a lock of the process first (bot/store/writelock.py), so they never spin on SQLite's.

A SQLite write transaction runs on the calling loop's thread, on a plain sqlite3 connection
(``SyncWrite``), not through aiosqlite: the write lock is the file's one scarce resource, and
aiosqlite holds it across a thread hop per statement (BEGIN, each statement, COMMIT), each a
turn of a busy event loop, so a transaction of two small statements held the file 1.5-3 ms.
Run directly it holds it for a fraction of a millisecond, the time SQLite itself needs (WAL,
``synchronous=NORMAL``: a commit writes the log without an fsync). Only the wait for the lock
is asynchronous. Reads stay on aiosqlite's threads.

When another connection holds the write lock (another process, or the worker's loop in
``aegis up``), ``BEGIN IMMEDIATE`` is retried here with sleeps of a fraction of a millisecond
to a few milliseconds, up to the busy timeout. SQLite's own busy handler would also wait, but it
sleeps 1, 2, 5, 10, 15, 20, 25 ms and more between tries, which turns light contention into
tens of milliseconds per transaction. Nothing has run yet when ``BEGIN`` is refused, so the
retry is always safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import URL, Connection, CursorResult, Engine, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from bot.errors import StoreError
from bot.store.writelock import lock_for

SQLITE_BUSY_TIMEOUT_MS = 30_000
WRITE_LOCK_FIRST_WAIT = 0.0002
WRITE_LOCK_LONGEST_WAIT = 0.005
OUTAGE_ERRORS = (
    OperationalError,
    sqlite3.OperationalError,  # raised as is by the write connection's BEGIN (_configure_sqlite)
    InterfaceError,
    OSError,
    ConnectionError,
)


class Store:
    """Both engines and the two kinds of transaction every caller uses."""

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = make_url(url)
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        if self.is_sqlite:
            self.read_engine = _sqlite_engine(url, begin="BEGIN", pool_size=4, echo=echo)
            self.write_engine = _sqlite_engine(
                url, begin="BEGIN IMMEDIATE", pool_size=1, echo=echo, busy_timeout_ms=0
            )
            self._process_lock = lock_for(str(self.url.database))
            self._sync_write_engine = _sqlite_sync_write_engine(self.url, echo)
        else:
            self.read_engine = self.write_engine = create_async_engine(
                url, echo=echo, pool_size=5, max_overflow=5
            )
            event.listen(self.write_engine.sync_engine, "checkout", _closed_by_server)
        self._writer: Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._reader_lock = threading.Lock()

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A transaction for reading; it is rolled back at the end."""
        async with _translate_outages(self):
            conn = await self._connect(self.read_engine)
            try:
                yield conn
            finally:
                await conn.close()

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A transaction that commits at the end, or rolls back on any error."""
        async with _translate_outages(self):
            if not self.is_sqlite:
                conn = await self._connect(self.write_engine)
                try:
                    async with conn.begin():
                        yield conn
                finally:
                    await conn.close()
                return
            async with self._sqlite_write_lock() as conn:
                yield conn

    @contextlib.asynccontextmanager
    async def driver(self) -> AsyncIterator[Any]:
        """Postgres only: a pooled connection's own asyncpg connection, outside any
        transaction, for the hottest statements (the outbox's claim and record).

        A transaction through SQLAlchemy is BEGIN, the statements and COMMIT, a round trip
        each, and every statement crosses a greenlet and SQLAlchemy's execution context: on
        the delivery's path that was most of the worker's database time. Here each statement
        is a transaction of its own, one round trip, prepared once per connection (asyncpg's
        statement cache); what must be atomic is one statement (a data-modifying CTE).
        Parameters and results are asyncpg's, through the codec SQLAlchemy installs on every
        connection: a JSON parameter is passed as text, a JSON column comes back decoded. A
        lost connection is dropped from the pool and raised as StoreError, as ``write`` raises
        it."""
        if self.is_sqlite:
            raise RuntimeError("driver() is for Postgres; use write() on SQLite")
        async with _translate_outages(self):
            conn = await self._connect(self.write_engine)
            try:
                raw = await conn.get_raw_connection()
                try:
                    yield raw.driver_connection
                except _driver_outages() as exc:
                    await conn.invalidate()
                    raise StoreError(
                        f"the database ({self.describe()}) is unavailable: {_reason(exc)}"
                    ) from exc
                except asyncio.CancelledError:
                    await conn.invalidate()  # a statement cut off may leave it mid-exchange
                    raise
            finally:
                await conn.close()

    async def _connect(self, engine: AsyncEngine) -> AsyncConnection:
        """A connection from the pool. Not getting one is always an outage, whatever the
        server's reason (a database that takes no connections answers 55000, one starting up
        57P03): nothing has run, so the caller waits and tries again, as for a server down."""
        try:
            return await engine.connect()
        except DBAPIError as exc:
            if self.is_sqlite or isinstance(exc, OUTAGE_ERRORS):
                raise  # said as an outage by _translate_outages
            raise StoreError(
                f"the database ({self.describe()}) refused the connection: {_reason(exc)}"
            ) from exc

    @contextlib.asynccontextmanager
    async def _sqlite_write_lock(self) -> AsyncIterator[SyncWrite]:
        """This process's turn at the file (its writers queue there, whatever their loop),
        then SQLite's own lock, retried briefly while another process has it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SQLITE_BUSY_TIMEOUT_MS / 1000
        wait = WRITE_LOCK_FIRST_WAIT
        while True:
            async with self._process_lock.held():
                sync = self._write_connection()
                try:
                    began = _began_now(sync, deadline, loop)
                except BaseException:
                    self._drop_write_connection()
                    raise
                if began:
                    try:
                        yield SyncWrite(sync)
                    except BaseException:
                        self._roll_back(sync)
                        raise
                    try:
                        sync.commit()
                    except BaseException:
                        # SQLAlchemy counts a failed COMMIT as the end of the transaction and
                        # would not roll it back: closing the file's connection does, and frees
                        # the write lock for the other processes.
                        self._drop_write_connection(discard=True)
                        raise
                    return
                self._drop_write_connection()  # a refused BEGIN leaves it half begun
            await asyncio.sleep(wait)
            wait = min(wait * 2, WRITE_LOCK_LONGEST_WAIT)

    def _write_connection(self) -> Connection:
        """The process's one write connection, kept between transactions (only the holder of
        the process's write lock uses it): checking it out of a pool for each transaction cost
        as much as a small transaction itself."""
        writer = self._writer
        if writer is None or writer.closed or writer.invalidated:
            self._drop_write_connection()
            writer = self._writer = self._sync_write_engine.connect()
        return writer

    def _drop_write_connection(self, *, discard: bool = False) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(Exception):
                if discard:
                    writer.invalidate()
                writer.close()

    def _roll_back(self, sync: Connection) -> None:
        try:
            sync.rollback()
        except Exception:
            self._drop_write_connection(discard=True)
            raise

    def describe(self) -> str:
        """Which database this is, for /status and doctor, without any password."""
        if self.is_sqlite:
            return f"SQLite at {self.url.database}"
        host = self.url.host or "localhost"
        port = f":{self.url.port}" if self.url.port else ""
        return f"PostgreSQL at {host}{port}/{self.url.database}"

    async def ping(self) -> None:
        async with self.read() as conn:
            await conn.exec_driver_sql("SELECT 1")

    def read_now(self, sql: str, params: tuple = ()) -> list[tuple]:
        """SQLite only: one small indexed read on the calling thread, for the hottest lookups.

        An async read crosses to the driver's thread and back eight times (BEGIN, the cursor,
        the query, the rows, ROLLBACK) and costs about 0.6 ms on a busy core; SQLite itself
        answers an indexed lookup in a few microseconds. Under WAL a reader never waits for the
        writer, so a read this small blocks the event loop less than a thread hop does. The
        connection is read-only (``query_only``); use this for point lookups, nothing larger.
        """
        if not self.is_sqlite:
            raise RuntimeError("read_now is for SQLite; use read() on other databases")
        with self._reader_lock:
            try:
                if self._reader is None:
                    self._reader = _sqlite_reader(str(self.url.database))
                return self._reader.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"the database refused a read: {exc}") from exc

    async def close(self) -> None:
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        await self.read_engine.dispose()
        if self.write_engine is not self.read_engine:
            await self.write_engine.dispose()
        if self.is_sqlite:
            self._drop_write_connection()
            self._sync_write_engine.dispose()


class SyncWrite:
    """A SQLite write transaction's connection, run on the caller's thread, with the awaitable
    methods of ``AsyncConnection`` that write transactions use, so callers are the same on
    SQLite and Postgres. Each call completes before it returns: nothing else runs on the loop
    while a statement holds the file."""

    def __init__(self, sync: Connection) -> None:
        self.sync = sync
        self.dialect = sync.dialect

    async def execute(self, statement, parameters=None, **options) -> CursorResult:
        return self.sync.execute(statement, parameters, **options)

    async def exec_driver_sql(self, statement: str, parameters=None) -> CursorResult:
        return self.sync.exec_driver_sql(statement, parameters)

    async def scalar(self, statement, parameters=None):
        return self.sync.scalar(statement, parameters)

    async def scalars(self, statement, parameters=None):
        return self.sync.scalars(statement, parameters)

    async def run_sync(self, fn, *args, **kwargs):
        return fn(self.sync, *args, **kwargs)

    @contextlib.asynccontextmanager
    async def begin_nested(self) -> AsyncIterator[None]:
        with self.sync.begin_nested():
            yield


@contextlib.asynccontextmanager
async def _translate_outages(store: Store) -> AsyncIterator[None]:
    try:
        yield
    except OUTAGE_ERRORS as exc:
        raise StoreError(
            f"the database ({store.describe()}) is unavailable: {_reason(exc)}"
        ) from exc
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise StoreError(f"lost the connection to {store.describe()}") from exc
        if _refused_us(exc):
            raise StoreError(
                f"the database ({store.describe()}) refused the connection: {_reason(exc)}"
            ) from exc
        raise


def _driver_outages() -> tuple[type[BaseException], ...]:
    """What asyncpg raises, used directly (``Store.driver``), when the server is away: the
    connection lost or refused (class 08), the server shutting down (class 57), the socket."""
    import asyncpg

    return (
        asyncpg.InterfaceError,
        asyncpg.PostgresConnectionError,
        asyncpg.exceptions.OperatorInterventionError,
        OSError,
        TimeoutError,
    )


def _closed_by_server(dbapi_connection, _record, _proxy) -> None:
    """A pooled Postgres connection the server has closed (a restart, a failover, an idle
    timeout) is replaced before it is used, without a round trip: asyncpg knows, from its
    socket, that the server hung up. SQLAlchemy's ``pool_pre_ping`` would ask the server
    instead, one more round trip per transaction (a third of an update's on the web process).
    A server that vanished without closing the socket is found by the first statement, which
    fails as an outage (StoreError) and has SQLAlchemy drop every connection of that pool."""
    if dbapi_connection.driver_connection.is_closed():
        raise DisconnectionError("the database server closed this connection")


def _refused_us(exc: DBAPIError) -> bool:
    """A wrong user, password or database name, or a server shutting down: a setting to fix.

    SQLSTATE classes 08, 28, 3D and 57P (postgresql.org/docs/current/errcodes-appendix.html);
    asyncpg reports them as plain DBAPIError, not OperationalError.
    """
    sqlstate = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    return isinstance(sqlstate, str) and sqlstate.startswith(("08", "28", "3D", "57P"))


def _reason(exc: BaseException) -> str:
    original = getattr(exc, "orig", None) or exc
    text = str(original).splitlines()[0] if str(original) else type(original).__name__
    return text[:200]


def _began_now(sync: Connection, deadline: float, loop) -> bool:
    """BEGIN IMMEDIATE; False if another process holds the write lock (and time is left)."""
    try:
        sync.begin()
    except (OperationalError, sqlite3.OperationalError) as exc:
        if not _is_busy(exc) or loop.time() > deadline:
            raise
        return False
    return True


def _is_busy(exc: Exception) -> bool:
    reason = str(getattr(exc, "orig", exc))
    return "database is locked" in reason or "database is busy" in reason


SQLITE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"  # how SQLAlchemy stores UTCDateTime in SQLite


def sqlite_time(moment: datetime) -> str:
    """A time as SQLite holds it, to compare with in ``read_now`` queries."""
    return moment.astimezone(UTC).strftime(SQLITE_TIME_FORMAT)


def _sqlite_reader(path: str) -> sqlite3.Connection:
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    reader.execute("PRAGMA query_only=1")
    reader.execute("PRAGMA busy_timeout=1000")
    return reader


def _enable_wal(cursor) -> None:
    """Switch a new connection to WAL. On a brand-new file, connections opening at once race
    to convert it, and SQLite can refuse one with "database is locked" without calling the
    busy handler; that is retried here for a few seconds (once per connection, at connect)."""
    for attempt in range(100):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == 99:
                raise
            time.sleep(0.02)


def _sqlite_engine(
    url: str,
    *,
    begin: str,
    pool_size: int,
    echo: bool,
    busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
) -> AsyncEngine:
    engine = create_async_engine(
        url,
        echo=echo,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=SQLITE_BUSY_TIMEOUT_MS / 1000 * 2,
        connect_args={"timeout": busy_timeout_ms / 1000},
    )
    _configure_sqlite(engine.sync_engine, begin=begin, busy_timeout_ms=busy_timeout_ms)
    return engine


def _configure_sqlite(
    sync_engine: Engine, *, begin: str, busy_timeout_ms: int, raw_begin: bool = False
) -> None:
    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # Let SQLAlchemy, not the driver, decide when a transaction begins (SQLAlchemy docs,
        # "Serializable isolation / Savepoints / Transactional DDL" for pysqlite).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _enable_wal(cursor)
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn) -> None:
        if raw_begin:  # straight to the driver: SQLAlchemy's statement machinery costs more
            conn.connection.driver_connection.execute(begin)
        else:
            conn.exec_driver_sql(begin)


def _sqlite_sync_write_engine(url: URL, echo: bool) -> Engine:
    """The synchronous connection writes run on; one is enough, as writers take turns."""
    engine = create_engine(
        url.set(drivername="sqlite+pysqlite"),
        echo=echo,
        pool_size=1,
        max_overflow=0,
        # Used by whichever loop holds the process's write lock, one at a time.
        connect_args={"check_same_thread": False, "timeout": 0},
    )
    _configure_sqlite(engine, begin="BEGIN IMMEDIATE", busy_timeout_ms=0, raw_begin=True)
    return engine


async def wait_for(store: Store, *, attempts: int = 30, delay: float = 1.0) -> None:
    """Wait for the database at start-up (a container may still be booting)."""
    for attempt in range(attempts):
        try:
            await store.ping()
            return
        except StoreError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(delay)


async def serialize_on(conn: AsyncConnection, key: str) -> None:
    """Make write transactions that name the same ``key`` take turns until they commit.

    SQLite already runs one write transaction at a time; Postgres takes a transaction-scoped
    advisory lock on a 64-bit digest of the key, so check-then-insert stays one step.
    """
    if conn.dialect.name != "postgresql":
        return
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)
    await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": digest})
