"""One aegis per data dir: the web process and the clock each hold a lock for their whole life.

Two web processes on one data dir would both take the same Telegram updates and deliveries (one
sends another's replies to its own chat, and they are lost); two clocks would enqueue every
schedule twice. So ``aegis up`` (web and clock), ``aegis web`` and ``aegis clock`` each take an
exclusive ``flock`` on a file per role in the data dir before they start anything: no Redis, no
migration, no port. The kernel lets go of it when the process ends, however it ends (kill -9
included), so a stale lock cannot outlive its holder. Workers take none: more of them are
welcome.

A second start is refused with one sentence naming the holder's pid and command, and its chat
page (the holder writes where it listens into its lock file; the file holds no secret).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

from aegis.botapi.endpoint import EMULATOR_PREFIX, emulator_key
from bot.config.settings import Settings
from bot.errors import AlreadyRunning

ROLES = {"up": ("web", "clock"), "web": ("web",), "clock": ("clock",)}
_held: list[int] = []  # the locks' descriptors, open for the life of the process


def hold_for(command: str, settings: Settings) -> None:
    """Take the locks of ``command``'s roles, or raise AlreadyRunning naming who holds one."""
    for role in ROLES.get(command, ()):
        _take(settings, role, command)


def _take(settings: Settings, role: str, command: str) -> None:
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = data_dir / f"{role}.lock"
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise AlreadyRunning(_refusal(settings, path)) from None
    holder = {"pid": os.getpid(), "command": f"aegis {command}", "web": settings.web_url}
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, json.dumps(holder).encode(), 0)
    _held.append(descriptor)


def _refusal(settings: Settings, path: Path) -> str:
    holder: dict = {}
    with contextlib.suppress(OSError, ValueError):
        holder = json.loads(path.read_text(encoding="utf-8") or "{}")
    who = f"pid {holder.get('pid', '?')} ({holder.get('command', 'aegis')})"
    sentence = f"another aegis already runs on the data dir {settings.data_dir.resolve()} as {who}"
    if settings.uses_emulator and holder.get("web"):
        page = f"{holder['web']}{EMULATOR_PREFIX}/chat?key={emulator_key(settings)}"
        sentence += f"; its chat page is {page}"
    return sentence + ". Stop it first, or start this one with another AEGIS_DATA_DIR."


def release_all() -> None:
    """Let go of every lock this process holds (for tests; a process's end does it too)."""
    while _held:
        os.close(_held.pop())
