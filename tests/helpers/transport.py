"""Helpers for the transport and gate tests: strangers, raw updates, database look-ups and a
fault injector for database outages."""

from __future__ import annotations

import contextlib
import itertools
import time
from pathlib import Path
from typing import Any

from sqlalchemy import select

from bot.chat.outgoing import OutboxStatus
from bot.chat.text import plain
from bot.errors import StoreError
from bot.store.database import Store
from bot.store.tables import heartbeats, outbox, updates
from emulator import DEFAULT_USER
from tests.helpers.stack import Stack, eventually, free_port, make_settings

_stranger_ids = itertools.count(7_000_001)


def stranger(name: str = "Mallory") -> dict[str, Any]:
    """A Telegram user who is not an owner; their private chat has their id."""
    return {"id": next(_stranger_ids), "is_bot": False, "first_name": name}


def raw_message(
    text: str,
    *,
    user: dict[str, Any] = DEFAULT_USER,
    chat_id: int | None = None,
    message_id: int = 900_001,
) -> dict[str, Any]:
    """A ``message`` object as Telegram sends it, for updates injected verbatim."""
    chat = {"id": chat_id or user["id"], "type": "private", "first_name": user["first_name"]}
    message: dict[str, Any] = {
        "message_id": message_id,
        "date": int(time.time()),
        "chat": chat,
        "from": user,
        "text": text,
    }
    if text.startswith("/"):
        length = len(text.split(maxsplit=1)[0])
        message["entities"] = [{"type": "bot_command", "offset": 0, "length": length}]
    return message


async def all_rows(store: Store, table, *where) -> list[Any]:
    query = select(table).where(*where)
    if "id" in table.c:
        query = query.order_by(table.c.id)
    async with store.read() as conn:
        return list((await conn.execute(query)).all())


async def update_row(store: Store, update_id: int):
    rows = await all_rows(store, updates, updates.c.update_id == update_id)
    assert len(rows) <= 1
    return rows[0] if rows else None


async def update_status(store: Store, update_id: int) -> str | None:
    row = await update_row(store, update_id)
    return row.status if row else None


async def outbox_rows(store: Store, chat_id: int | None = None) -> list[Any]:
    where = [] if chat_id is None else [outbox.c.chat_id == chat_id]
    return await all_rows(store, outbox, *where)


async def outbox_texts(store: Store, chat_id: int) -> list[str]:
    """What each queued message of the chat shows (the outbox keeps HTML)."""
    return [plain("".join(row.parts)) for row in await outbox_rows(store, chat_id)]


async def drained(stack: Stack) -> list[Any]:
    """Wait until every outbox row is sent, so the chat transcripts are final; return them."""

    async def all_sent():
        rows = await outbox_rows(stack.store)
        return all(row.status == OutboxStatus.SENT for row in rows) and (rows or [True])

    await eventually(all_sent)
    return await outbox_rows(stack.store)


async def settled(stack: Stack) -> None:
    """Wait until the bot confirmed every update it was given (the emulator holds none).

    Long polling confirms by offset on its next getUpdates: once nothing is pending, the bot is
    inside (or about to make) a call that has already confirmed, so an update injected now is
    handed to it rather than confirmed unseen.
    """

    async def nothing_pending():
        return (await stack.emulator.stats())["pending_updates"] == 0

    await eventually(nothing_pending)


def webhook_settings(data_dir: Path, database_url: str, redis_url: str, **overrides: Any):
    """Settings for a stack that registers a webhook (its public URL is its own address)."""
    port = free_port()
    public_url = f"http://127.0.0.1:{port}"
    return make_settings(
        data_dir, database_url, redis_url, port=port, public_url=public_url, **overrides
    )


async def webhook_registered(stack: Stack) -> None:
    async def registered():
        return (await stack.emulator.bot_info())["webhook"]

    await eventually(registered)


async def worker_ready(stack: Stack) -> None:
    """Wait for the worker's first heartbeat: its store and Bot exist from then on.

    ``running_stack`` stops the worker synchronously on the loop that serves the emulator; a
    worker still creating its Bot then (getMe) would wait out its HTTP timeout.
    """
    await eventually(lambda: all_rows(stack.store, heartbeats, heartbeats.c.kind == "worker"))


async def owner_marker(stack: Stack, text: str = "/help") -> dict[str, Any]:
    """An owner message answered: every earlier update of the owner's chat is handled by now
    (intake handles a chat's updates in order). Other chats' are handled beside them: wait for
    those by their own effects."""
    [reply] = await stack.ask(text)
    return reply


class StoreOutage:
    """Fault injection: while ``down``, the store refuses reads and writes with StoreError,
    exactly what ``bot/store/database.py`` raises when the database cannot be reached."""

    def __init__(self, store: Store, monkeypatch) -> None:
        self.down = False
        self.refused = 0
        self._read, self._write = store.read, store.write
        monkeypatch.setattr(store, "read", self._guard(self._read))
        monkeypatch.setattr(store, "write", self._guard(self._write))

    def _guard(self, original):
        @contextlib.asynccontextmanager
        async def guarded():
            if self.down:
                self.refused += 1
                raise StoreError("injected outage: the database is unreachable")
            async with original() as conn:
                yield conn

        return guarded
