"""``aegis backup`` as a user runs it: a backup taken during a burst of writes restores the same
rows, a pending card still answers after a restore with its secrets, a damaged archive is named,
and every refusal is a sentence."""

from __future__ import annotations

import asyncio
import io
import os
import sqlite3
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, func, select

from aegis.backup import archive, databases
from bot.chat.callbacks import CallbackSigner
from bot.config.secrets import SecretFiles, callback_signer
from bot.config.settings import Settings
from bot.core import Platform
from bot.interactions.interaction import InteractionStatus
from bot.store import migrate
from bot.store.database import Store
from bot.store.tables import grants, interactions, notes, outbox, schedules, tasks
from bot.tasks.notes import NoteKind, add_note
from bot.upkeep.schedules import Schedule
from tests.conftest import _create_database, _drop_database
from tests.helpers.cli import run_aegis
from tests.helpers.interactions import ALICE, CONFIG, RecordingEnqueue, approval, card_rows
from tests.helpers.stack import free_port

COUNTED = {
    "tasks": tasks,
    "notes": notes,
    "interactions": interactions,
    "grants": grants,
    "schedules": schedules,
    "outbox": outbox,
}


def settings_for(folder: Path, database_url: str | None) -> Settings:
    return Settings(
        data_dir=folder,
        config_file=folder / "aegis.yaml",
        database_url=database_url,
        _env_file=None,
    )


def environment(settings: Settings) -> dict[str, str]:
    """The AEGIS_* a user would set for this instance (ports free for doctor's check)."""
    values = {
        "AEGIS_DATA_DIR": str(settings.data_dir),
        "AEGIS_CONFIG_FILE": str(settings.config_file),
        "AEGIS_PORT": str(free_port()),
        "AEGIS_MCP_PORT": str(free_port()),
    }
    if settings.database_url is not None:
        values["AEGIS_DATABASE_URL"] = settings.database_url
    return values


def aegis(settings: Settings, *args: str) -> subprocess.CompletedProcess:
    result = run_aegis(list(args), settings.data_dir.parent, **environment(settings))
    assert "Traceback" not in result.stderr, result.stderr
    return result


@pytest.fixture
async def fresh_database_url(request: pytest.FixtureRequest, database_url: str):
    """A second, empty database of the same engine, to restore into."""
    if database_url.startswith("sqlite"):
        yield None  # the fresh data dir's own SQLite file
        return
    admin = request.getfixturevalue("postgres_dsn")
    name, url = await _create_database(admin)
    try:
        yield url
    finally:
        await _drop_database(admin, name)


def own_url(database_url: str) -> str | None:
    """None on SQLite: the instance uses its data dir's own file, as a user's does."""
    return None if database_url.startswith("sqlite") else database_url


async def running_platform(settings: Settings) -> Platform:
    settings.ensure_data_dir()
    settings.config_file.write_text(CONFIG)
    store = Store(settings.effective_database_url)
    await migrate.upgrade(store)
    signer = callback_signer(SecretFiles(settings.data_dir))
    return Platform.build(settings, store, signer, RecordingEnqueue())


async def write_a_little_of_everything(platform: Platform, n: int) -> None:
    """What aegis writes in use: a task, a card (and its outbox row), a note, now and then a
    granted approval and a schedule."""
    await platform.tasks.create(f"task {n}", f"body of task {n}", by_agent="scribe")
    card = await platform.interactions.create(approval({"text": f"note {n}"}))
    async with platform.store.write() as conn:
        await add_note(conn, NoteKind.AGENT, f"note {n}", agent="scribe", interaction_id=card.id)
    if n % 3 == 0:
        await platform.interactions.tap(card.id, "approve", ALICE, "Alice", codes_ready=True)
    if n % 5 == 0:
        await platform.schedules.seed([Schedule(f"burst-{n}", "sweep_outbox", 3600)])


async def counts(store: Store) -> dict[str, int]:
    async with store.read() as conn:
        return {
            name: (await conn.execute(select(func.count()).select_from(table))).scalar_one()
            for name, table in COUNTED.items()
        }


def counts_in_archive(path: Path, into: Path) -> dict[str, int]:
    """The row counts of the archive's own database, read without aegis's restore."""
    with tarfile.open(path) as tar:
        names = tar.getnames()
        member = next(n for n in names if n.startswith("database/"))
        tar.extract(member, into, filter="data")
    copy = into / member
    if member == archive.SQLITE_MEMBER:
        with sqlite3.connect(copy) as connection:
            return {
                name: connection.execute(f"SELECT count(*) FROM {name}").fetchone()[0]  # noqa: S608
                for name in COUNTED
            }
    script = subprocess.run(
        ["pg_restore", "--data-only", "--file", "-", str(copy)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {name: _copied_rows(script, name) for name in COUNTED}


def _copied_rows(script: str, table: str) -> int:
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"COPY public.{table} "))
    return lines.index("\\.", start) - start - 1


@pytest.fixture
def pg_tools() -> None:
    for tool in ("pg_dump", "pg_restore"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            pytest.skip(f"{tool} is not installed")


async def test_a_backup_taken_during_a_burst_restores_the_same_rows(
    tmp_path, database_url, fresh_database_url, pg_tools
):
    source = settings_for(tmp_path / "source", own_url(database_url))
    platform = await running_platform(source)
    for n in range(10):
        await write_a_little_of_everything(platform, n)
    before = await counts(platform.store)
    stop, written = asyncio.Event(), [0]

    async def burst() -> None:
        n = 10
        while not stop.is_set():
            await write_a_little_of_everything(platform, n)
            n, written[0] = n + 1, written[0] + 1
            await asyncio.sleep(0)  # SQLite's writes never yield: let the loop see the end

    writer = asyncio.create_task(burst())
    await asyncio.sleep(0.2)
    target = tmp_path / "burst.tar.gz"
    at_start = written[0]
    made = await asyncio.to_thread(aegis, source, "backup", "create", "-o", str(target))
    during = written[0] - at_start
    stop.set()
    await writer
    after = await counts(platform.store)
    await platform.store.close()
    assert made.returncode == 0, made.stderr
    assert during > 0  # aegis kept writing while the backup ran

    restored = settings_for(tmp_path / "restored", fresh_database_url)
    result = aegis(restored, "backup", "restore", str(target))
    assert result.returncode == 0, result.stderr
    store = Store(restored.effective_database_url)
    try:
        got = await counts(store)
    finally:
        await store.close()
    assert got == counts_in_archive(target, tmp_path / "unpacked")
    assert all(before[name] <= got[name] <= after[name] for name in COUNTED), (before, got, after)
    assert got["grants"] > 0 and got["schedules"] > 0
    doctor = aegis(restored, "doctor")
    assert doctor.returncode == 0, doctor.stdout


async def test_a_pending_card_is_answered_after_a_restore_with_its_secrets(
    tmp_path, database_url, fresh_database_url, pg_tools
):
    source = settings_for(tmp_path / "source", own_url(database_url))
    platform = await running_platform(source)
    card = await platform.interactions.create(approval({"text": "ship it"}))
    [sent] = await card_rows(platform.store, card.id)
    await platform.store.close()
    [[approve, _deny]] = sent["reply_markup"]["inline_keyboard"]
    target = tmp_path / "with-secrets.tar.gz"
    made = aegis(source, "backup", "create", "--with-secrets", "--verify", "-o", str(target))
    assert made.returncode == 0, made.stderr
    assert "callback-key" in made.stdout and "is whole" in made.stdout

    restored = settings_for(tmp_path / "elsewhere", fresh_database_url)
    result = aegis(restored, "backup", "restore", str(target))
    assert result.returncode == 0, result.stderr
    secrets = restored.data_dir / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    assert stat.S_IMODE((secrets / "callback-key").stat().st_mode) == 0o600
    assert (restored.config_file).read_text() == CONFIG

    again = await running_platform(restored)
    try:
        data = callback_signer(SecretFiles(restored.data_dir)).verify(approve["callback_data"])
        assert data is not None  # the button the owner holds is still ours
        assert CallbackSigner(os.urandom(32)).verify(approve["callback_data"]) is None
        await again.interactions.tap(int(data.id), data.choice, ALICE, "Alice", codes_ready=True)
        answered = await again.interactions.get(card.id)
        assert answered.status is InteractionStatus.RESOLVED and answered.resolved_by == ALICE
        async with again.store.read() as conn:
            granted = (await conn.execute(select(grants.c.interaction_id))).scalars().all()
        assert granted == [card.id]
    finally:
        await again.store.close()


@pytest.fixture
async def sqlite_backup(tmp_path) -> tuple[Settings, Path]:
    """An instance on SQLite with a few rows and its secrets, and an archive of it."""
    source = settings_for(tmp_path / "source", None)
    platform = await running_platform(source)
    for n in range(20):
        await write_a_little_of_everything(platform, n)
    await platform.store.close()
    made = aegis(source, "backup", "create", "--with-secrets")
    assert made.returncode == 0, made.stderr
    [path] = (source.data_dir / "backups").iterdir()
    return source, path


def test_the_archive_is_0600_in_a_0700_folder_and_says_what_it_holds(sqlite_backup, tmp_path):
    source, path = sqlite_backup
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with tarfile.open(path) as tar:
        names = tar.getnames()
    assert names[0] == archive.MANIFEST
    assert {archive.SQLITE_MEMBER, archive.CONFIG_MEMBER, "secrets/callback-key"} <= set(names)
    plain = aegis(source, "backup", "create", "-o", str(tmp_path / "plain.tar.gz"))
    assert plain.returncode == 0
    assert stat.S_IMODE((tmp_path / "plain.tar.gz").stat().st_mode) == 0o600
    with tarfile.open(tmp_path / "plain.tar.gz") as tar:
        assert not [n for n in tar.getnames() if n.startswith("secrets/")]
    assert "pending cards will not work" in plain.stdout.replace("\n", " ")
    assert "TOTP pairing" in plain.stdout


def test_one_damaged_byte_is_named_by_verify(sqlite_backup, tmp_path):
    source, path = sqlite_backup
    assert aegis(source, "backup", "verify", str(path)).returncode == 0
    damaged = tmp_path / "damaged.tar.gz"
    data = bytearray(path.read_bytes())
    data[len(data) * 2 // 3] ^= 0x01
    damaged.write_bytes(bytes(data))
    result = aegis(source, "backup", "verify", str(damaged))
    assert result.returncode == 1
    assert archive.SQLITE_MEMBER in result.stderr, result.stderr


def test_a_member_that_differs_from_its_sum_is_named(sqlite_backup, tmp_path):
    source, path = sqlite_backup
    forged = tmp_path / "forged.tar.gz"
    with tarfile.open(path) as original, tarfile.open(forged, "w:gz") as copy:
        for member in original.getmembers():
            content = original.extractfile(member).read()
            if member.name == archive.CONFIG_MEMBER:
                content = content.replace(b"scribe", b"scribf")
            copy.addfile(member, io.BytesIO(content))
    result = aegis(source, "backup", "verify", str(forged))
    assert result.returncode == 1
    assert "aegis.yaml does not match the manifest" in result.stderr


def test_restore_is_refused_while_aegis_runs_on_the_data_dir(sqlite_backup, tmp_path):
    source, path = sqlite_backup
    target = settings_for(tmp_path / "busy", None)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_CLOCK_LOCK, str(target.data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        result = aegis(target, "backup", "restore", str(path))
    finally:
        holder.stdin.close()
        holder.wait()
    assert result.returncode == 1
    assert f"aegis is running on the data dir {target.data_dir}" in result.stderr
    assert f"pid {holder.pid}" in result.stderr
    assert not target.sqlite_path.exists()


HOLD_THE_CLOCK_LOCK = """
import sys
from aegis.instance import hold_for
from bot.config.settings import Settings
hold_for("clock", Settings(data_dir=sys.argv[1], _env_file=None))
print("held", flush=True)
sys.stdin.read()
"""


def test_restore_into_a_data_dir_holding_data_needs_force(sqlite_backup):
    source, path = sqlite_backup
    refused = aegis(source, "backup", "restore", str(path))
    assert refused.returncode == 1
    assert "already holds a database" in refused.stderr and "--force" in refused.stderr
    forced = aegis(source, "backup", "restore", "--force", str(path))
    assert forced.returncode == 0, forced.stderr
    assert aegis(source, "doctor").returncode == 0


def test_a_sqlite_backup_is_refused_by_an_aegis_on_postgres(sqlite_backup, tmp_path):
    _source, path = sqlite_backup
    postgres = settings_for(tmp_path / "pg", "postgresql+asyncpg://aegis@127.0.0.1:1/aegis")
    result = aegis(postgres, "backup", "restore", str(path))
    assert result.returncode == 1
    assert "holds a SQLite database" in result.stderr
    assert "does not convert" in result.stderr


def test_create_on_postgres_without_pg_dump_says_what_to_install(tmp_path):
    postgres = settings_for(tmp_path / "pg", "postgresql+asyncpg://aegis@127.0.0.1:1/aegis")
    result = run_aegis(["backup", "create"], tmp_path, PATH=str(tmp_path), **environment(postgres))
    assert result.returncode == 1
    assert "pg_dump is not installed" in result.stderr and "Traceback" not in result.stderr


def test_refusals_of_a_missing_or_foreign_archive_are_sentences(tmp_path):
    settings = settings_for(tmp_path / "d", None)
    missing = aegis(settings, "backup", "verify", str(tmp_path / "nope.tar.gz"))
    assert missing.returncode == 1 and "there is no archive at" in missing.stderr
    (tmp_path / "foreign.tar.gz").write_bytes(b"not a tar at all")
    foreign = aegis(settings, "backup", "restore", str(tmp_path / "foreign.tar.gz"))
    assert foreign.returncode == 1 and "not a readable tar archive" in foreign.stderr
    empty = aegis(settings, "backup", "create")
    assert empty.returncode == 1 and "nothing to back up" in empty.stderr


@pytest.mark.parametrize("command", ["create", "verify", "restore"])
def test_each_backup_command_has_help(tmp_path, command):
    result = run_aegis(["backup", command, "--help"], tmp_path)
    assert result.returncode == 0
    assert len(result.stdout.split("\n\n", 1)[1].split()) >= 20


def test_an_archive_of_an_older_schema_is_migrated_forward(tmp_path):
    source = settings_for(tmp_path / "old", None)
    source.ensure_data_dir()
    config = migrate.alembic_config()
    engine = create_engine(f"sqlite:///{source.sqlite_path}")
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0006")
    engine.dispose()
    made = aegis(source, "backup", "create", "-o", str(tmp_path / "old.tar.gz"))
    assert made.returncode == 0, made.stderr
    assert "(schema 0006)" in made.stdout
    restored = settings_for(tmp_path / "new", None)
    result = aegis(restored, "backup", "restore", str(tmp_path / "old.tar.gz"))
    assert result.returncode == 0, result.stderr
    assert "Migrated the schema forward: 0007, 0008, " in result.stdout  # … to the head
    assert aegis(restored, "doctor").returncode == 0


def test_the_online_copy_keeps_its_snapshot_while_another_connection_writes(tmp_path, monkeypatch):
    """Between every page the copy takes, another connection commits a write: the copy goes on
    from its one read transaction (no restart) and holds the database as it was at its start.
    Without that transaction SQLite restarts a paged copy after each such write."""
    source = settings_for(tmp_path / "source", None)
    source.ensure_data_dir()
    config = migrate.alembic_config()
    engine = create_engine(f"sqlite:///{source.sqlite_path}")
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    engine.dispose()
    writer = sqlite3.connect(source.sqlite_path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE scratch (x TEXT)")
    writer.executemany("INSERT INTO scratch VALUES (?)", [("x" * 500,)] * 200)
    seen: list[tuple[int, int]] = []

    def write_between_steps(copied: int, total: int) -> None:
        assert not seen or copied > seen[-1][0], "the copy started again"
        seen.append((copied, total))
        writer.execute("INSERT INTO scratch VALUES ('written during the copy')")

    monkeypatch.setattr(databases, "PAGES_PER_STEP", 1)
    copy = tmp_path / "copy.sqlite3"
    databases.copy_sqlite(source.sqlite_path, copy, write_between_steps)
    writer.close()
    assert len(seen) > 10 and seen[-1][0] == seen[-1][1]
    with sqlite3.connect(copy) as connection:
        assert connection.execute("SELECT count(*) FROM scratch").fetchone() == (200,)
