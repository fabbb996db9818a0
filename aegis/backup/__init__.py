"""``aegis backup``: an archive of one aegis (its database, aegis.yaml and, when asked, its
secrets) made while it runs, checked against its manifest, and restored into a data dir.

``archive.py`` is the file format, ``databases.py`` the copy of each engine, ``create.py`` and
``restore.py`` the commands.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from bot.config.settings import Settings
from bot.errors import BackupDamaged


def run_backup(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    from aegis.backup import create, restore

    if args.backup_command == "create":
        path = create.create(settings, out, output=args.output, with_secrets=args.with_secrets)
        if args.verify:
            with _naming(path, ""):
                create.verify(path, out)
    elif args.backup_command == "verify":
        with _naming(Path(args.archive), ""):
            create.verify(Path(args.archive), out)
    else:
        with _naming(Path(args.archive), ", so nothing was restored"):
            restore.restore(settings, Path(args.archive), out, force=args.force)
    return 0


@contextlib.contextmanager
def _naming(path: Path, consequence: str) -> Iterator[None]:
    """A damaged archive's sentence names the archive (and, for restore, that nothing changed:
    restore reads the whole archive before it touches anything)."""
    try:
        yield
    except BackupDamaged as exc:
        raise BackupDamaged(f"the archive {path} failed verification{consequence}: {exc}") from exc


def add_parser(commands) -> None:
    """``aegis backup`` and its three commands, for aegis/cli.py."""
    backup = commands.add_parser(
        "backup",
        help="back up this aegis, verify a backup, restore one",
        description="Archives of this data dir's aegis: its database, aegis.yaml and (when "
        "asked) its secrets, with a manifest of sha256 sums.",
    )
    actions = backup.add_subparsers(dest="backup_command", metavar="BACKUP_COMMAND", required=True)
    create = actions.add_parser(
        "create",
        help="write an archive (while aegis runs, too)",
        description="Write an archive of the database (SQLite through its online backup API, "
        "Postgres through pg_dump), aegis.yaml and a manifest, mode 0600, into the data dir's "
        "backups/ unless -o says elsewhere. aegis may keep running meanwhile. Without "
        "--with-secrets, pending cards' buttons and TOTP pairing do not survive a restore onto "
        "another machine.",
    )
    create.add_argument("-o", "--output", type=Path, help="the archive's path (or a folder)")
    create.add_argument(
        "--with-secrets",
        action="store_true",
        help="add the data dir's secrets/ (callback key, TOTP secret, keys)",
    )
    create.add_argument("--verify", action="store_true", help="then verify it, as `verify` does")
    verify = actions.add_parser(
        "verify",
        help="check an archive against its manifest",
        description="Re-read an archive, check every member's size and sha256 against its "
        "manifest (naming the first that differs) and the database's integrity (SQLite's "
        "PRAGMA integrity_check; pg_restore --list for Postgres). Exits 1 on any mismatch.",
    )
    verify.add_argument("archive", metavar="ARCHIVE")
    restore = actions.add_parser(
        "restore",
        help="restore an archive into this data dir",
        description="Verify an archive, then restore its database (and secrets, if it holds "
        "them) into this data dir and its configured database, and migrate forward. Refuses "
        "while aegis runs here, into a data dir or database that holds data (unless --force), "
        "and across engines (a SQLite backup into Postgres or back).",
    )
    restore.add_argument("archive", metavar="ARCHIVE")
    restore.add_argument(
        "--force", action="store_true", help="replace the data and secrets already here"
    )
