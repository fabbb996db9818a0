"""The backup archive: one tar holding ``manifest.json`` first, then the database, ``aegis.yaml``
and, when asked for, the secrets; the manifest names every other member with its size and
sha256, so a damaged byte is found and named before anything is restored.

Members are read by name from a short list, never extracted blindly: an archive from elsewhere
cannot write outside the folder it is unpacked into (no ``..``, no links, no devices).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from bot.errors import BackupDamaged, BackupError

FORMAT = 1
MANIFEST = "manifest.json"
SQLITE_MEMBER = "database/aegis.sqlite3"
POSTGRES_MEMBER = "database/aegis.pgdump"
CONFIG_MEMBER = "aegis.yaml"
SECRETS_PREFIX = "secrets/"
SUFFIX = ".tar.gz"
# gzip's fastest level: a SQLite file of aegis's rows shrinks about 4x at level 1, and higher
# levels cost several times the time for a few per cent more (bench/backup.py measures both).
COMPRESS_LEVEL = 1
CHUNK = 1 << 20
_SECRET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
READ_ERRORS = (tarfile.TarError, zlib.error, EOFError, gzip.BadGzipFile, UnicodeDecodeError)


@dataclass(frozen=True)
class Manifest:
    """What the archive says about itself."""

    aegis_version: str
    schema_revision: str
    database: str  # "sqlite" or "postgresql"
    created_at: str
    members: dict[str, dict] = field(default_factory=dict)  # name -> {"sha256", "size"}
    format: int = FORMAT

    @property
    def database_member(self) -> str:
        return SQLITE_MEMBER if self.database == "sqlite" else POSTGRES_MEMBER

    @property
    def secrets(self) -> list[str]:
        return sorted(n.removeprefix(SECRETS_PREFIX) for n in self.members if is_secret(n))

    @property
    def has_config(self) -> bool:
        return CONFIG_MEMBER in self.members

    def to_json(self) -> bytes:
        values = {
            "format": self.format,
            "aegis_version": self.aegis_version,
            "schema_revision": self.schema_revision,
            "database": self.database,
            "created_at": self.created_at,
            "members": self.members,
        }
        return json.dumps(values, indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Manifest:
        try:
            values = json.loads(raw)
            manifest = cls(**values)
        except (ValueError, TypeError) as exc:
            raise BackupDamaged(f"its {MANIFEST} cannot be read ({exc})") from None
        if manifest.format != FORMAT:
            raise BackupError(
                f"it is in backup format {manifest.format}, which this aegis does not read "
                f"(it reads format {FORMAT}); use the aegis version that made it"
            )
        if manifest.database not in ("sqlite", "postgresql"):
            raise BackupDamaged(f"its {MANIFEST} names an unknown database {manifest.database!r}")
        for name in manifest.members:
            _check_name(name)
        if manifest.database_member not in manifest.members:
            raise BackupDamaged(f"its {MANIFEST} lists no database")
        return manifest


def is_secret(name: str) -> bool:
    return name.startswith(SECRETS_PREFIX)


def _check_name(name: str) -> None:
    if name in (SQLITE_MEMBER, POSTGRES_MEMBER, CONFIG_MEMBER):
        return
    if is_secret(name) and _SECRET_NAME.match(name.removeprefix(SECRETS_PREFIX)):
        return
    raise BackupDamaged(f"it holds a member aegis never writes: {name!r}")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write(
    target: Path, files: dict[str, Path], manifest: Manifest, *, level: int = COMPRESS_LEVEL
) -> Manifest:
    """Write ``files`` (member name -> file) under ``target``, mode 0600, manifest first;
    ``level`` 0 writes a plain tar (bench/backup.py compares the two).

    The archive is written beside ``target`` and renamed into place when complete, so a
    half-written archive never carries the final name."""
    members = {
        name: {"sha256": sha256_of(path), "size": path.stat().st_size}
        for name, path in sorted(files.items())
    }
    manifest = Manifest(**{**manifest.__dict__, "members": members})
    partial = target.with_name(f".{target.name}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as raw:
            options = {"mode": "w:gz", "compresslevel": level} if level else {"mode": "w"}
            with tarfile.open(fileobj=raw, **options) as tar:
                _add_bytes(tar, MANIFEST, manifest.to_json())
                for name, path in sorted(files.items()):
                    with path.open("rb") as handle:
                        tar.addfile(_info(name, members[name]["size"]), handle)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return manifest


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o600, int(time.time())
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_info(name, len(data)), io.BytesIO(data))


def read_manifest(path: Path) -> Manifest:
    """The manifest alone (the archive's first member), without reading the rest."""
    with _reading(path) as tar, _naming(path, MANIFEST):
        first = tar.next()
        if first is None or first.name != MANIFEST or not first.isfile():
            raise BackupDamaged(f"it does not start with a {MANIFEST}: it is not an aegis backup")
        return Manifest.from_json(tar.extractfile(first).read())


def unpack(path: Path, into: Path) -> tuple[Manifest, dict[str, Path]]:
    """Every member into ``into``, each checked against the manifest as it is read.

    Raises BackupDamaged naming the first member whose size or sum is wrong, or that is missing,
    unlisted or unreadable."""
    manifest = read_manifest(path)
    unpacked: dict[str, Path] = {}
    with _reading(path) as tar:
        tar.next()  # the manifest, read above
        current = MANIFEST
        with _naming(path, lambda: current):
            while (member := tar.next()) is not None:
                current = member.name
                unpacked[member.name] = _unpack_member(tar, member, manifest, into, unpacked)
    missing = sorted(set(manifest.members) - set(unpacked))
    if missing:
        raise BackupDamaged(f"it lacks {', '.join(missing)}, which its manifest lists")
    return manifest, unpacked


def _unpack_member(tar, member, manifest: Manifest, into: Path, seen: dict) -> Path:
    name = member.name
    expected = manifest.members.get(name)
    if expected is None or name in seen or not member.isfile():
        raise BackupDamaged(f"{name!r} is not in the manifest (or not once, or not a file)")
    target = into / name
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    digest, size = hashlib.sha256(), 0
    source = tar.extractfile(member)
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
            handle.write(chunk)
    if size != expected["size"] or digest.hexdigest() != expected["sha256"]:
        raise BackupDamaged(
            f"its member {name} does not match the manifest: its sha256 is "
            f"{digest.hexdigest()[:16]}… ({size} bytes), the manifest says "
            f"{expected['sha256'][:16]}… ({expected['size']} bytes)"
        )
    return target


@contextlib.contextmanager
def _reading(path: Path):
    try:
        tar = tarfile.open(path, mode="r|*")
    except FileNotFoundError:
        raise BackupError(f"there is no archive at {path}") from None
    except READ_ERRORS as exc:
        raise BackupDamaged(f"it is not a readable tar archive ({exc})") from None
    with tar:
        yield tar


@contextlib.contextmanager
def _naming(path: Path, member):
    """A read error becomes a sentence naming the member being read when it happened."""
    try:
        yield
    except READ_ERRORS as exc:
        where = member() if callable(member) else member
        raise BackupDamaged(
            f"it is damaged in or just after {where}: {exc or type(exc).__name__}"
        ) from None
