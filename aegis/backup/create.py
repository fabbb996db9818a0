"""``aegis backup create`` and ``aegis backup verify``."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TextIO

from sqlalchemy.engine import make_url

from aegis.backup import archive, databases
from aegis.backup.archive import Manifest
from bot.config.settings import Settings
from bot.errors import BackupError
from bot.store.database import Store

PROGRESS_OVER_BYTES = 64 * 1024 * 1024  # a smaller database is copied before a line would help


def create(
    settings: Settings,
    out: TextIO,
    *,
    output: Path | None = None,
    with_secrets: bool = False,
    err: TextIO = sys.stderr,
    level: int = archive.COMPRESS_LEVEL,
) -> Path:
    """Write an archive of the running (or stopped) aegis of ``settings``; returns its path.
    ``level``: gzip's, 0 for a plain tar."""
    target = archive_path(settings, output)
    kind = database_kind(settings)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".backup-") as work:
        files, revision = _copy_database(settings, kind, Path(work), err)
        if settings.config_file.is_file():
            files[archive.CONFIG_MEMBER] = settings.config_file
        if with_secrets:
            files.update(_secret_files(settings))
        manifest = Manifest(
            aegis_version=aegis_version(),
            schema_revision=revision,
            database=kind,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        manifest = archive.write(target, files, manifest, level=level)
    _describe(target, manifest, out)
    return target


def verify(path: Path, out: TextIO) -> Manifest:
    """Re-read the archive: every member against its sum, then the database's own check."""
    with tempfile.TemporaryDirectory(dir=_scratch_for(path), prefix=".verify-") as work:
        manifest, files = archive.unpack(path, Path(work))
        checked = check_database(manifest, files)
    out.write(
        f"{path} is whole: its {len(manifest.members)} member(s) match the manifest's sha256 "
        f"sums{checked}.\n"
    )
    return manifest


def check_database(manifest: Manifest, files: dict[str, Path]) -> str:
    """The database's own check on an unpacked copy; returns what was checked, in words."""
    dump = files[manifest.database_member]
    if manifest.database == "sqlite":
        databases.check_sqlite(dump)
        return ", and its SQLite database passes PRAGMA integrity_check"
    if databases.check_postgres_dump(dump):
        return ", and pg_restore reads its Postgres dump"
    return " (pg_restore is not installed here, so the dump itself was not read)"


def database_kind(settings: Settings) -> str:
    backend = make_url(settings.effective_database_url).get_backend_name()
    return "sqlite" if backend == "sqlite" else "postgresql"


def sqlite_file(settings: Settings) -> Path:
    return Path(make_url(settings.effective_database_url).database or "")


def aegis_version() -> str:
    try:
        return metadata.version("aegis")
    except metadata.PackageNotFoundError:
        return "unknown"


def archive_path(settings: Settings, output: Path | None) -> Path:
    """Where the archive goes: ``-o`` (a file, or a folder to put it in), else the data dir's
    ``backups/``; an existing file is never overwritten."""
    name = f"aegis-{datetime.now(UTC):%Y%m%d-%H%M%S}{archive.SUFFIX}"
    if output is None:
        folder = settings.ensure_data_dir() / "backups"
        folder.mkdir(exist_ok=True, mode=0o700)
        target = folder / name
    elif output.is_dir():
        target = output / name
    else:
        target = output
    if target.exists():
        raise BackupError(f"{target} already exists; choose another path with -o")
    if not target.parent.is_dir():
        raise BackupError(f"the folder {target.parent} does not exist; create it or choose -o")
    return target


def _copy_database(
    settings: Settings, kind: str, work: Path, err: TextIO
) -> tuple[dict[str, Path], str]:
    if kind == "sqlite":
        source = sqlite_file(settings)
        copy = work / "aegis.sqlite3"
        show = _progress(err) if _size(source) > PROGRESS_OVER_BYTES else None
        revision = databases.copy_sqlite(source, copy, show)
        return {archive.SQLITE_MEMBER: copy}, revision
    dump = work / "aegis.pgdump"
    databases.pg_tool("pg_dump")  # before anything else: the sentence that says to install it
    # The revision is read first: a migration between the two would be named one behind, and
    # restore migrates forward from there, which is harmless.
    revision = asyncio.run(_postgres_revision(settings))
    databases.dump_postgres(settings.effective_database_url, dump)
    return {archive.POSTGRES_MEMBER: dump}, revision


async def _postgres_revision(settings: Settings) -> str:
    store = Store(settings.effective_database_url)
    try:
        return await databases.postgres_revision(store)
    finally:
        await store.close()


def _secret_files(settings: Settings) -> dict[str, Path]:
    folder = settings.data_dir / "secrets"
    if not folder.is_dir():
        return {}
    return {
        archive.SECRETS_PREFIX + path.name: path
        for path in sorted(folder.iterdir())
        if path.is_file() and not path.name.startswith(".")  # a dot: a secret being written
    }


def _progress(err: TextIO):
    shown = [-1]

    def show(copied: int, total: int) -> None:
        percent = copied * 100 // max(total, 1)
        if percent // 10 > shown[0]:
            shown[0] = percent // 10
            err.write(f"copying the database: {percent}%\n")
            err.flush()

    return show


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _scratch_for(path: Path) -> str | None:
    """Unpack beside the archive when possible (its disk has room for it), else in /tmp."""
    folder = path.resolve().parent
    return str(folder) if os.access(folder, os.W_OK) else None


def human_size(size: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} bytes"


def _describe(target: Path, manifest: Manifest, out: TextIO) -> None:
    engine = "SQLite" if manifest.database == "sqlite" else "Postgres"
    inside = [f"the {engine} database (schema {manifest.schema_revision})"]
    if manifest.has_config:
        inside.append("aegis.yaml")
    if manifest.secrets:
        inside.append(f"the secrets ({', '.join(manifest.secrets)})")
    out.write(f"Backed up to {target} ({human_size(target.stat().st_size)}, mode 0600).\n")
    out.write(f"Inside: {', '.join(inside)}.\n")
    if manifest.secrets:
        out.write("It holds your secrets: keep it as safe as the data dir itself.\n")
    else:
        out.write(
            "Not inside: the secrets (--with-secrets adds them). Restored onto a new machine "
            "without them, the buttons of pending cards will not work (/pending sends the cards "
            "again) and TOTP pairing must be set up again (aegis totp init).\n"
        )
    out.write("Queued jobs and logs are not backed up. Keep a copy off this machine.\n")
