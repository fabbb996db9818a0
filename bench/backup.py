"""Backup benchmarks: ``aegis backup create``, ``create --verify`` and ``restore`` of a ~100 MB
SQLite database, each beside a plain file copy, and what a concurrent writer sees meanwhile.

    python bench/backup.py [--megabytes 100] [--rounds 3]

1. Builds a migrated SQLite database in a temp data dir and fills it to ``--megabytes`` with
   realistic rows: updates (a Telegram message as JSON), outbox rows (a reply of a few hundred
   characters) and tasks (title, body, search text, labels).
2. Times, ``--rounds`` times interleaved (the median is printed):
   - the baseline: ``shutil.copyfile`` of the database file (not a safe backup of a live
     database: it only says what reading and writing the bytes costs here);
   - the SQLite online copy alone (create's first step), then ``create`` (gzip level 1, the
     default) and ``create`` writing a plain tar, with sizes;
   - ``create --verify``;
   - ``restore`` into a fresh data dir, beside a plain copy of the file back.
3. The write lock: a writer process of its own (aegis's Store, one outbox row per transaction,
   every 2 ms) runs while the database is idle, while it is copied with ``copyfile`` and while
   ``create`` runs (gzip, then a plain tar: less CPU taken from the writer on a small machine);
   the p50, p99 and longest time it waited for and held its transaction, for each. The backup
   never takes the write lock (a WAL reader), so any difference is CPU, disk and checkpoints.

Numbers are only comparable within one run; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, insert

from aegis.backup import create, databases, restore
from bot.config.settings import Settings
from bot.store import migrate
from bot.store.database import Store
from bot.store.tables import outbox, tasks, updates

BATCH = 2000


def settings_for(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, config_file=data_dir / "aegis.yaml", _env_file=None)


def build(data_dir: Path, megabytes: int) -> Path:
    settings = settings_for(data_dir)
    settings.ensure_data_dir()

    async def migrated() -> None:
        store = Store(settings.effective_database_url)
        await migrate.upgrade(store)
        await store.close()

    asyncio.run(migrated())
    engine = create_engine(f"sqlite:///{settings.sqlite_path}")
    moment, n = datetime.now(UTC), 0
    while settings.sqlite_path.stat().st_size < megabytes * 1024 * 1024:
        with engine.begin() as conn:
            conn.execute(insert(updates), [_update(n + i, moment) for i in range(BATCH)])
            conn.execute(insert(outbox), [_reply(n + i, moment) for i in range(BATCH)])
            conn.execute(insert(tasks), [_task(n + i, moment) for i in range(BATCH // 4)])
        n += BATCH
    engine.dispose()
    return settings.sqlite_path


_RANDOM = random.Random(18)
_VOCABULARY = [
    "".join(_RANDOM.choice(string.ascii_lowercase) for _ in range(_RANDOM.randint(2, 10)))
    for _ in range(5000)
]


def _words(_i: int, count: int) -> str:
    """Text that compresses about as a chat's does (a few thousand words, often repeated)."""
    return " ".join(_RANDOM.choices(_VOCABULARY, k=count))


def _update(i: int, moment: datetime) -> dict:
    message = {
        "message_id": i,
        "from": {"id": 1001, "is_bot": False, "first_name": "Owner", "username": "owner"},
        "chat": {"id": 1001, "type": "private", "first_name": "Owner"},
        "date": 1_700_000_000 + i,
        "text": _words(i, 40),
    }
    return {
        "bot_id": 1,
        "update_id": i,
        "kind": "message",
        "sender_id": 1001,
        "payload": {"update_id": i, "message": message},
        "status": "handled",
        "attempts": 1,
        "received_at": moment,
        "retry_at": moment,
        "handled_at": moment,
    }


def _reply(i: int, moment: datetime) -> dict:
    return {
        "chat_id": 1001,
        "kind": "text",
        "parts": [_words(i + 1, 60)],
        "status": "sent",
        "parts_sent": 1,
        "telegram_message_ids": [i],
        "attempts": 1,
        "created_at": moment,
        "sent_at": moment,
    }


def _task(i: int, moment: datetime) -> dict:
    body = _words(i + 2, 80)
    return {
        "title": _words(i, 6),
        "body": body,
        "search_text": body.lower(),
        "state": "@next",
        "labels": ["@next", "home"],
        "attachments": [],
        "origin_kind": "message",
        "created_at": moment,
        "updated_at": moment,
    }


# -- the concurrent writer ---------------------------------------------------------------------


WRITER = """
import asyncio, json, os, sys, time
from datetime import UTC, datetime
from sqlalchemy import insert
from bot.store.database import Store
from bot.store.tables import outbox

async def main(url, stop):
    store = Store(url)
    waits = []
    while not os.path.exists(stop):
        began = time.perf_counter()
        async with store.write() as conn:
            await conn.execute(insert(outbox).values(
                chat_id=1, kind="text", parts=["x" * 200], status="sent",
                telegram_message_ids=[], created_at=datetime.now(UTC)))
        waits.append((began, time.perf_counter() - began))
        if len(waits) == 1:
            print("ready", flush=True)
        await asyncio.sleep(0.002)
    await store.close()
    print(json.dumps(waits), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def with_writer(database: Path, work) -> tuple[float, list[float], float]:
    """Run ``work`` while a writer process writes; returns work's time, the writer's waits
    during it, and when (seconds into the work) the longest of them began."""
    stop = database.with_name("stop-writer")
    stop.unlink(missing_ok=True)
    url = f"sqlite+aiosqlite:///{database}"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, str(stop)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout.readline().strip() == "ready"
    time.sleep(0.3)  # the writer's steady state
    began = time.perf_counter()
    work()
    took = time.perf_counter() - began
    time.sleep(0.3)
    stop.touch()
    # perf_counter is CLOCK_MONOTONIC on Linux: the same clock in both processes.
    during = [(at, wait) for at, wait in json.loads(writer.stdout.readline()) if at >= began]
    writer.wait()
    stop.unlink()
    longest = max(during, key=lambda pair: pair[1])
    return took, [wait for _, wait in during], longest[0] - began


# -- the runs ----------------------------------------------------------------------------------


def median_time(work, rounds: int, before=None) -> float:
    """The median of ``rounds`` timings of ``work``, each after an untimed ``before``."""
    times = []
    for _ in range(rounds):
        if before is not None:
            before()
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aegis-bench-backup-") as folder:
        run(Path(folder), options)


def run(root: Path, options: argparse.Namespace) -> None:
    began = time.perf_counter()
    database = build(root / "source", options.megabytes)
    size = database.stat().st_size
    print(f"database: {size / 2**20:.1f} MB, built in {time.perf_counter() - began:.1f} s")
    settings = settings_for(root / "source")
    archives = root / "archives"
    archives.mkdir()
    made: list[Path] = []

    def backup(level: int = 1, verify: bool = False) -> None:
        target = archives / f"{len(made)}.tar.gz"
        path = create.create(settings, io.StringIO(), output=target, err=io.StringIO(), level=level)
        if verify:
            create.verify(path, io.StringIO())
        made.append(path)

    def copy() -> None:
        shutil.copyfile(database, root / "copy.sqlite3")

    def online_copy() -> None:
        (root / "online.sqlite3").unlink(missing_ok=True)
        databases.copy_sqlite(database, root / "online.sqlite3")

    rows = []
    rows.append(("copyfile (baseline)", median_time(copy, options.rounds), size))
    rows.append(("online copy alone", median_time(online_copy, options.rounds), size))
    rows.append(("create (gzip 1)", median_time(backup, options.rounds), made[-1].stat().st_size))
    gzipped = made[-1]
    plain = median_time(lambda: backup(0), options.rounds)
    rows.append(("create (plain tar)", plain, made[-1].stat().st_size))
    verified = median_time(lambda: backup(1, True), options.rounds)
    rows.append(("create --verify", verified, made[-1].stat().st_size))
    rows += restore_rows(root, gzipped, database, options.rounds)
    baseline = rows[0][1]
    print(f"\n{'':24} {'seconds':>8} {'x copyfile':>11} {'size MB':>8}")
    for name, seconds, bytes_ in rows:
        print(f"{name:24} {seconds:8.2f} {seconds / baseline:11.1f} {bytes_ / 2**20:8.1f}")
    stalls(root, database, settings, archives)


def restore_rows(root: Path, archive: Path, database: Path, rounds: int) -> list[tuple]:
    counter = iter(range(1000))

    def put_back() -> None:
        target = root / f"restored-{next(counter)}"
        restore.restore(settings_for(target), archive, io.StringIO())
        shutil.rmtree(target)

    def copy_back() -> None:
        target = root / "copied-back"
        target.mkdir()
        shutil.copyfile(database, target / "aegis.sqlite3")
        shutil.rmtree(target)

    return [
        ("copy back (baseline)", median_time(copy_back, rounds), database.stat().st_size),
        ("restore (gzip 1)", median_time(put_back, rounds), archive.stat().st_size),
    ]


def stalls(root: Path, database: Path, settings: Settings, archives: Path) -> None:
    print("\nA writer's transactions (wait for the lock + insert + commit), ms:")
    print(f"{'while':24} {'writes':>7} {'p50':>7} {'p99':>7} {'max':>7} {'at s':>6} {'work s':>7}")
    idle = lambda: time.sleep(3)  # noqa: E731
    copy = lambda: shutil.copyfile(database, root / "copy.sqlite3")  # noqa: E731

    def made(level: int) -> None:
        target = archives / f"during-{level}-{time.monotonic_ns()}.tar.gz"
        create.create(settings, io.StringIO(), output=target, err=io.StringIO(), level=level)

    runs = [
        ("idle (3 s)", idle),
        ("copyfile", copy),
        ("backup create", lambda: made(1)),
        ("create (plain tar)", lambda: made(0)),
    ]
    for name, work in runs:
        took, waits, longest_at = with_writer(database, work)
        waits_ms = sorted(w * 1000 for w in waits)
        p99 = waits_ms[int(len(waits_ms) * 0.99) - 1]
        print(
            f"{name:24} {len(waits_ms):7} {statistics.median(waits_ms):7.2f} {p99:7.2f} "
            f"{waits_ms[-1]:7.2f} {longest_at:6.2f} {took:7.2f}"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("PTB_TIMEDELTA", "1")
    main()
