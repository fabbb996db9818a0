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
import errno
import fcntl
import json
import os
import socket
from pathlib import Path

from aegis.botapi.endpoint import EMULATOR_PREFIX, emulator_key
from bot.config.settings import Settings
from bot.errors import AlreadyRunning, ConfigError

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


def holder(settings: Settings, role: str) -> str | None:
    """Who holds the data dir's lock for ``role`` ("pid 12 (aegis up)"), or None."""
    path = settings.data_dir / f"{role}.lock"
    if not path.exists():
        return None
    descriptor = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _who(path)
    finally:
        os.close(descriptor)  # a lock taken here to look is let go at once
    return None


def _who(path: Path) -> str:
    written = _written(path)
    return f"pid {written.get('pid', '?')} ({written.get('command', 'aegis')})"


def _written(path: Path) -> dict:
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_text(encoding="utf-8") or "{}")
    return {}


def _refusal(settings: Settings, path: Path) -> str:
    written = _written(path)
    who = _who(path)
    sentence = f"another aegis already runs on the data dir {settings.data_dir.resolve()} as {who}"
    if settings.uses_emulator and written.get("web"):
        page = f"{written['web']}{EMULATOR_PREFIX}/chat?key={emulator_key(settings)}"
        sentence += f"; its chat page is {page}"
    return sentence + ". Stop it first, or start this one with another AEGIS_DATA_DIR."


def chat_page(settings: Settings) -> str | None:
    """The chat page of the aegis running on this data dir (where its web process said it
    listens), or None when none runs here."""
    path = settings.data_dir / "web.lock"
    if holder(settings, "web") is None:
        return None
    web = _written(path).get("web") or settings.web_url
    return f"{web}{EMULATOR_PREFIX}/chat?key={emulator_key(settings)}"


def ports_taken(settings: Settings) -> list[str]:
    """The ports ``aegis up``/``aegis web`` would listen on that another program holds, each as
    a sentence naming its setting."""
    wanted = [("AEGIS_PORT", settings.host, settings.port)]
    wanted.append(("AEGIS_MCP_PORT", "127.0.0.1", settings.mcp_port))
    taken = []
    for name, host, port in wanted:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
            try:
                probe.bind((host, port))
            except OSError as exc:
                why = (
                    "is taken by another program" if exc.errno == errno.EADDRINUSE else exc.strerror
                )
                taken.append(f"{name}={port} on {host} {why}; choose another with {name}")
    return taken


def refuse_taken_ports(settings: Settings) -> None:
    """Before anything starts: a port that cannot be had is named, never a traceback later."""
    taken = ports_taken(settings)
    if taken:
        raise ConfigError(" ".join(sentence + "." for sentence in taken))


def release_all() -> None:
    """Let go of every lock this process holds (for tests; a process's end does it too)."""
    while _held:
        os.close(_held.pop())
