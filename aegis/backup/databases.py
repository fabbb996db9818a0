"""The database's side of a backup: a consistent copy taken while aegis writes, its schema
revision, its integrity, whether a target already holds data, and putting a copy back.

SQLite is copied with its online backup API inside one read transaction: under WAL a reader
never blocks a writer (aegis's writers take the write lock up front, bot/store/writelock.py),
and the open transaction pins the snapshot, so the copy is consistent and the paged copy never
restarts however much is written meanwhile (sqlite3_backup_step only reopens, and restarts, a
source it had to open a transaction on itself). Postgres is copied with ``pg_dump``, whose
snapshot does not block writers either, and put back with ``pg_restore``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ProgrammingError

from bot.errors import BackupDamaged, BackupError, StoreError
from bot.store.database import Store
from bot.store.tables import metadata

PAGES_PER_STEP = 4096  # 16 MB at SQLite's default 4 KiB pages: a progress line per step
Progress = Callable[[int, int], None]  # (pages copied, pages in all)


def copy_sqlite(source: Path, target: Path, progress: Progress | None = None) -> str:
    """Copy the live database at ``source`` into a new file ``target``; returns its schema
    revision. Writers go on meanwhile; the copy is the database as it was when it began."""
    if not source.is_file():
        raise BackupError(
            f"there is no database at {source}: aegis has not run on this data dir "
            "(AEGIS_DATA_DIR), so there is nothing to back up"
        )
    reader = sqlite3.connect(source, isolation_level=None)
    writer = sqlite3.connect(target, isolation_level=None)
    try:
        # The copy is scratch until the archive (which is fsynced) holds it: flushing 100 MB of
        # it to disk would only compete with aegis's own commits and checkpoints for the disk.
        writer.execute("PRAGMA synchronous=OFF")
        writer.execute("PRAGMA journal_mode=OFF")
        reader.execute("PRAGMA query_only=1")
        reader.execute("PRAGMA busy_timeout=30000")
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM sqlite_schema").fetchone()  # pins the snapshot
        step = None if progress is None else (lambda _s, left, total: progress(total - left, total))
        reader.backup(writer, pages=PAGES_PER_STEP, progress=step)
        reader.execute("COMMIT")
        writer.execute("PRAGMA journal_mode=DELETE")  # one self-contained file in the archive
        return _sqlite_revision(writer, source)
    except sqlite3.Error as exc:
        raise BackupError(f"cannot copy the database at {source}: {exc}") from exc
    finally:
        reader.close()
        writer.close()


def _sqlite_revision(connection: sqlite3.Connection, where: Path) -> str:
    try:
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError:
        row = None
    if row is None:
        raise BackupError(f"the database at {where} holds no aegis schema")
    return row[0]


def check_sqlite(path: Path) -> None:
    """SQLite's own ``integrity_check`` on an unpacked copy; raises BackupDamaged if it fails."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
            findings = [row[0] for row in connection.execute("PRAGMA integrity_check")]
            _sqlite_revision(connection, path)
    except (sqlite3.Error, BackupError) as exc:
        raise BackupDamaged(f"its database fails to open: {exc}") from None
    if findings != ["ok"]:
        raise BackupDamaged(f"its database fails SQLite's integrity check: {findings[0]}")


def put_sqlite(copy: Path, target: Path) -> None:
    """Move the restored file into place. The old file's WAL and shared-memory files go first:
    SQLite would replay a WAL left beside the new file into it."""
    for leftover in (Path(f"{target}-wal"), Path(f"{target}-shm"), Path(f"{target}-journal")):
        leftover.unlink(missing_ok=True)
    os.chmod(copy, 0o600)
    os.replace(copy, target)


# -- Postgres ---------------------------------------------------------------------------------


def pg_tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise BackupError(
            f"{name} is not installed on this machine, and aegis needs it for a Postgres "
            f"database: install the PostgreSQL client tools (e.g. apt install postgresql-client), "
            "of the server's major version or newer"
        )
    return found


def _libpq(url: URL) -> tuple[list[str], dict[str, str]]:
    """pg_dump's and pg_restore's connection options; the password goes in the environment,
    never on a command line that ``ps`` shows."""
    options = []
    if url.host:
        options += ["--host", url.host]
    if url.port:
        options += ["--port", str(url.port)]
    if url.username:
        options += ["--username", url.username]
    options += ["--dbname", url.database or "postgres", "--no-password"]
    environment = dict(os.environ)
    if url.password is not None:
        environment["PGPASSWORD"] = str(url.password)
    return options, environment


def dump_postgres(database_url: str, target: Path) -> None:
    options, environment = _libpq(make_url(database_url))
    command = [pg_tool("pg_dump"), "--format=custom", "--file", str(target), *options]
    _run(command, environment, "pg_dump could not copy the database")


def restore_postgres(database_url: str, dump: Path) -> None:
    """Replace what the dump holds in the configured database, in one transaction."""
    options, environment = _libpq(make_url(database_url))
    command = [pg_tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--no-privileges"]
    command += ["--single-transaction", "--exit-on-error", *options, str(dump)]
    _run(command, environment, "pg_restore could not restore the database")


def check_postgres_dump(dump: Path) -> bool:
    """pg_restore reads the dump's table of contents; False when pg_restore is not installed."""
    if shutil.which("pg_restore") is None:
        return False
    command = [pg_tool("pg_restore"), "--list", str(dump)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0:
        raise BackupDamaged(f"pg_restore cannot read its database: {_first_line(result.stderr)}")
    return True


def _run(command: list[str], environment: dict[str, str], failure: str) -> None:
    # Our own arguments, no shell: the URL's parts are options' values, the password is in env.
    result = subprocess.run(  # noqa: S603
        command, env=environment, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BackupError(f"{failure}: {_first_line(result.stderr)}")


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else "no reason given"


# -- either database --------------------------------------------------------------------------


async def postgres_revision(store: Store) -> str:
    query = "SELECT version_num FROM alembic_version"
    try:
        async with store.read() as conn:
            revision = (await conn.exec_driver_sql(query)).scalar()
    except ProgrammingError:  # no such table: aegis never ran on this database
        revision = None
    except StoreError as exc:
        raise BackupError(f"{exc}; check AEGIS_DATABASE_URL") from exc
    if revision is None:
        raise BackupError(f"{store.describe()} holds no aegis schema")
    return revision


async def tables_with_rows(store: Store) -> list[str]:
    """aegis's tables that hold at least one row (a search index's own tables aside: they hold
    rows in a database that was only migrated)."""
    try:
        async with store.read() as conn:
            names = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
            found = []
            for name in sorted(set(names) & set(metadata.tables)):
                query = f'SELECT 1 FROM "{name}" LIMIT 1'  # noqa: S608 (our own tables' names)
                if (await conn.exec_driver_sql(query)).first():
                    found.append(name)
            return found
    except StoreError as exc:
        raise BackupError(f"{exc}; check AEGIS_DATABASE_URL") from exc
