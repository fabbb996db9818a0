"""Secrets kept in the data dir, one file each, readable by the owner only.

They never appear in a log line or an error message; callers get bytes or a string back.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from bot.chat.callbacks import CallbackSigner


class SecretFiles:
    """Creates a secret the first time it is asked for and returns the same one after that."""

    def __init__(self, data_dir: Path) -> None:
        self.directory = data_dir / "secrets"

    def path(self, name: str) -> Path:
        return self.directory / name

    def get_or_create(self, name: str, *, nbytes: int = 32) -> str:
        existing = self.get(name)
        if existing is not None:
            return existing
        return self.put(name, secrets.token_urlsafe(nbytes), exclusive=True)

    def get(self, name: str) -> str | None:
        try:
            return self.path(name).read_text().strip()
        except FileNotFoundError:
            return None

    def put(self, name: str, value: str, *, exclusive: bool = False) -> str:
        """Write atomically with mode 0600; with ``exclusive`` the first writer wins a race."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self.directory / f".{name}.{secrets.token_hex(8)}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(value)
        try:
            if not exclusive:
                os.replace(temporary, self.path(name))
                return value
            try:
                os.link(temporary, self.path(name))
            except FileExistsError:
                return self.get(name) or value
            return value
        finally:
            temporary.unlink(missing_ok=True)


def callback_signer(files: SecretFiles) -> CallbackSigner:
    """The signer for inline buttons; every process of one instance shares its key."""
    return CallbackSigner(files.get_or_create("callback-key").encode())
