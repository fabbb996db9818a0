"""Backup benchmarks on Postgres: ``aegis backup create`` and ``restore`` beside bare ``pg_dump``
and ``pg_restore`` of the same database, in the same run.

    python bench/backup_postgres.py [--megabytes 100] [--rounds 3] [--dsn postgresql://127.0.0.1/test]

Creates a database of its own on the server at ``--dsn`` (dropped at the end), migrates it and
fills it server-side (``generate_series``) with updates, outbox rows and tasks to about
``--megabytes`` (``pg_database_size``). Then, ``--rounds`` times interleaved, medians printed:
- the baseline: ``pg_dump --format=custom`` to a file, as aegis runs it;
- ``create`` (the dump, its sum, the tar.gz and the manifest) and ``create --verify`` (which also
  reads the dump back with ``pg_restore --list``);
- ``restore`` into a fresh database, beside a bare ``pg_restore --single-transaction`` into one.

aegis's share is what it adds to pg_dump and pg_restore: hashing, archiving and the checks.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import secrets
import subprocess
import tempfile
import time
from pathlib import Path

import asyncpg
from backup import median_time  # bench/backup.py, beside this one

from aegis.backup import create, restore
from bot.config.settings import Settings
from bot.store import migrate
from bot.store.database import Store

FILL = [
    """INSERT INTO updates (bot_id, update_id, kind, sender_id, payload, status, attempts,
           received_at, retry_at, handled_at)
       SELECT 1, i, 'message', 1001, json_build_object('update_id', i, 'message',
           json_build_object('message_id', i, 'chat', json_build_object('id', 1001),
           'text', md5(i::text) || ' ' || md5((i * 7)::text) || ' please ' || md5((i * 3)::text))),
           'handled', 1, now(), now(), now()
       FROM generate_series($1::bigint, $2::bigint) AS i""",
    """INSERT INTO outbox (chat_id, kind, parts, status, parts_sent, telegram_message_ids,
           attempts, created_at, sent_at)
       SELECT 1001, 'text', json_build_array('Noted: ' || md5(i::text) || ' ' ||
           md5((i * 5)::text) || ' and ' || md5((i * 11)::text)), 'sent', 1,
           json_build_array(i), 1, now(), now()
       FROM generate_series($1::bigint, $2::bigint) AS i""",
    """INSERT INTO tasks (title, body, search_text, state, labels, attachments, origin_kind,
           created_at, updated_at)
       SELECT 'task ' || md5(i::text), repeat(md5(i::text) || ' ', 6),
           repeat(md5(i::text) || ' ', 6), '@next', '["@next"]', '[]', 'message', now(), now()
       FROM generate_series($1::bigint, $2::bigint) AS i WHERE i % 4 = 0""",
]
BATCH = 20_000


def url_of(dsn: str, name: str) -> str:
    return dsn.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://") + f"/{name}"


async def new_database(dsn: str) -> str:
    name = f"aegis_bench_{secrets.token_hex(4)}"
    connection = await asyncpg.connect(dsn)
    await connection.execute(f'CREATE DATABASE "{name}"')
    await connection.close()
    return name


async def drop_database(dsn: str, name: str) -> None:
    connection = await asyncpg.connect(dsn)
    await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await connection.close()


async def build(dsn: str, megabytes: int) -> str:
    name = await new_database(dsn)
    store = Store(url_of(dsn, name))
    await migrate.upgrade(store)
    await store.close()
    connection = await asyncpg.connect(dsn.rsplit("/", 1)[0] + f"/{name}")
    first = 0
    while await connection.fetchval("SELECT pg_database_size(current_database())") < (
        megabytes * 2**20
    ):
        for statement in FILL:
            await connection.execute(statement, first, first + BATCH - 1)
        first += BATCH
    await connection.close()
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", default="postgresql://127.0.0.1:5432/test")
    options = parser.parse_args()
    began = time.perf_counter()
    name = asyncio.run(build(options.dsn, options.megabytes))
    made: list[str] = [name]
    try:
        with tempfile.TemporaryDirectory(prefix="aegis-bench-backup-pg-") as folder:
            run(Path(folder), options, name, made, began)
    finally:
        for database in made:
            asyncio.run(drop_database(options.dsn, database))


def run(root: Path, options, name: str, made: list[str], began: float) -> None:
    dsn, rounds = options.dsn, options.rounds
    size = asyncio.run(_size(dsn, name))
    print(f"database: {size / 2**20:.1f} MB, built in {time.perf_counter() - began:.1f} s")
    settings = Settings(data_dir=root / "source", database_url=url_of(dsn, name), _env_file=None)
    host = dsn.rsplit("/", 1)[0].removeprefix("postgresql://")
    host_options = ["--host", host.split(":")[0], "--port", host.split(":")[1]]
    dump = root / "bare.pgdump"
    archives = []

    def bare_dump() -> None:
        dump.unlink(missing_ok=True)
        subprocess.run(["pg_dump", "-Fc", "-f", str(dump), *host_options, "-d", name], check=True)

    def backup(verify: bool = False) -> None:
        target = root / f"{len(archives)}.tar.gz"
        create.create(settings, io.StringIO(), output=target, err=io.StringIO())
        if verify:
            create.verify(target, io.StringIO())
        archives.append(target)

    fresh: list[str] = []

    def new_target() -> None:
        fresh.append(asyncio.run(new_database(dsn)))
        made.append(fresh[-1])

    def bare_restore() -> None:
        command = ["pg_restore", "--single-transaction", *host_options, "-d", fresh[-1]]
        subprocess.run([*command, str(dump)], check=True)

    def put_back() -> None:
        target = Settings(
            data_dir=root / fresh[-1], database_url=url_of(dsn, fresh[-1]), _env_file=None
        )
        restore.restore(target, archives[0], io.StringIO())

    rows = [
        ("pg_dump (baseline)", median_time(bare_dump, rounds), dump.stat().st_size),
        ("create", median_time(backup, rounds), archives[-1].stat().st_size),
        ("create --verify", median_time(lambda: backup(True), rounds), archives[-1].stat().st_size),
        ("pg_restore (baseline)", median_time(bare_restore, rounds, new_target), 0),
        ("restore", median_time(put_back, rounds, new_target), 0),
    ]
    print(f"\n{'':24} {'seconds':>8} {'x baseline':>11} {'size MB':>8}")
    for index, (label, seconds, bytes_) in enumerate(rows):
        baseline = rows[0][1] if index < 3 else rows[3][1]
        shown = f"{bytes_ / 2**20:8.1f}" if bytes_ else ""
        print(f"{label:24} {seconds:8.2f} {seconds / baseline:11.2f} {shown}")


async def _size(dsn: str, name: str) -> int:
    connection = await asyncpg.connect(dsn.rsplit("/", 1)[0] + f"/{name}")
    try:
        return await connection.fetchval("SELECT pg_database_size(current_database())")
    finally:
        await connection.close()


if __name__ == "__main__":
    main()
