"""``aegis backup restore``: put an archive back into this data dir (and its database).

It refuses, with a sentence and before it changes anything, a data dir that an aegis serves, a
database or secrets it would overwrite (unless ``--force``), an archive of the other engine
(aegis does not convert SQLite to Postgres or back) and an archive from a newer aegis. It then
verifies the whole archive, puts the database and the secrets back, and migrates forward.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import TextIO

from alembic.script import ScriptDirectory
from alembic.util import CommandError

from aegis import instance
from aegis.backup import archive, databases
from aegis.backup.archive import Manifest
from aegis.backup.create import aegis_version, check_database, database_kind, sqlite_file
from bot.config.settings import Settings
from bot.errors import BackupError
from bot.store import migrate
from bot.store.database import Store

ENGINES = {"sqlite": "SQLite", "postgresql": "Postgres"}


def restore(settings: Settings, path: Path, out: TextIO, *, force: bool = False) -> None:
    manifest = archive.read_manifest(path)
    _refuse_other_engine(settings, manifest)
    _refuse_unknown_schema(manifest)
    _refuse_in_use(settings)
    data_dir = settings.ensure_data_dir()
    if not force:
        _refuse_not_empty(settings, manifest)
    with tempfile.TemporaryDirectory(dir=data_dir, prefix=".restore-") as work:
        manifest, files = archive.unpack(path, Path(work))
        check_database(manifest, files)
        _put_database(settings, manifest, files)
        _put_secrets(settings, manifest, files)
        config = _put_config(settings, files)
    applied = asyncio.run(_migrate(settings))
    _describe(settings, path, manifest, applied, config, out)


def _refuse_other_engine(settings: Settings, manifest: Manifest) -> None:
    here = database_kind(settings)
    if manifest.database == here:
        return
    raise BackupError(
        f"this backup holds a {ENGINES[manifest.database]} database, and this aegis is set up "
        f"for {ENGINES[here]} (AEGIS_DATABASE_URL); aegis does not convert one into the other, "
        f"so restore it into an aegis that uses {ENGINES[manifest.database]}"
    )


def _refuse_unknown_schema(manifest: Manifest) -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config())
    try:
        known = script.get_revision(manifest.schema_revision) is not None
    except CommandError:
        known = False
    if not known:
        raise BackupError(
            f"this backup was made by aegis {manifest.aegis_version} with schema "
            f"{manifest.schema_revision}, which this aegis ({aegis_version()}) does not know; "
            "upgrade aegis, then restore"
        )


def _refuse_in_use(settings: Settings) -> None:
    for role in ("web", "clock"):
        holder = instance.holder(settings, role)
        if holder is not None:
            raise BackupError(
                f"aegis is running on the data dir {settings.data_dir.resolve()} as {holder}; "
                "stop it (and its workers) before restoring"
            )


def _refuse_not_empty(settings: Settings, manifest: Manifest) -> None:
    held = asyncio.run(_tables_with_rows(settings))
    present = [n for n in manifest.secrets if (settings.data_dir / "secrets" / n).exists()]
    if not held and not present:
        return
    what = []
    if held:
        what.append(f"a database with rows in {len(held)} table(s) ({', '.join(held[:4])}…)")
    if present:
        what.append(f"secrets the backup would replace ({', '.join(present)})")
    raise BackupError(
        f"the data dir {settings.data_dir.resolve()} already holds {' and '.join(what)}; "
        "restore into an empty AEGIS_DATA_DIR (and database), or add --force to replace them"
    )


async def _tables_with_rows(settings: Settings) -> list[str]:
    if database_kind(settings) == "sqlite" and not sqlite_file(settings).exists():
        return []
    store = Store(settings.effective_database_url)
    try:
        return await databases.tables_with_rows(store)
    finally:
        await store.close()


def _put_database(settings: Settings, manifest: Manifest, files: dict[str, Path]) -> None:
    copy = files[manifest.database_member]
    if manifest.database == "sqlite":
        databases.put_sqlite(copy, sqlite_file(settings))
    else:
        databases.restore_postgres(settings.effective_database_url, copy)


def _put_secrets(settings: Settings, manifest: Manifest, files: dict[str, Path]) -> None:
    if not manifest.secrets:
        return
    folder = settings.data_dir / "secrets"
    folder.mkdir(exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    for name in manifest.secrets:
        copy = files[archive.SECRETS_PREFIX + name]
        os.chmod(copy, 0o600)
        os.replace(copy, folder / name)


def _put_config(settings: Settings, files: dict[str, Path]) -> str:
    """aegis.yaml where there is none; beside an existing one that differs, never over it."""
    copy = files.get(archive.CONFIG_MEMBER)
    target = settings.config_file
    if copy is None:
        return ""
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(copy, target)
        return f"{target} from the backup"
    if target.read_bytes() == copy.read_bytes():
        return f"{target} (the same as the backup's)"
    aside = target.with_name(target.name + ".from-backup")
    os.replace(copy, aside)
    return f"the backup's aegis.yaml as {aside}, as {target} differs from it (compare them)"


async def _migrate(settings: Settings) -> list[str]:
    store = Store(settings.effective_database_url)
    try:
        return await migrate.upgrade(store)
    finally:
        await store.close()


def _describe(settings, path, manifest, applied, config, out: TextIO) -> None:
    engine = ENGINES[manifest.database]
    out.write(
        f"Restored {path} (made {manifest.created_at} by aegis {manifest.aegis_version}) into "
        f"{settings.data_dir.resolve()}: the {engine} database"
    )
    out.write(f", the secrets ({', '.join(manifest.secrets)})" if manifest.secrets else "")
    out.write(f", and {config}.\n" if config else ".\n")
    if applied:
        out.write(f"Migrated the schema forward: {', '.join(applied)}.\n")
    if not manifest.secrets:
        out.write(
            "The backup holds no secrets: buttons of cards sent before it will be refused "
            "(/pending sends them again) and TOTP pairing needs aegis totp init.\n"
        )
    out.write("Check it with `aegis doctor`, then start aegis.\n")
