"""The update log: every Telegram update is recorded under its unique ``update_id`` before
it is handled, so a duplicate is dropped and a crash or an outage mid-handling loses nothing.

An update moves ``pending`` → ``handled``. A handler that failed because something it needs was
down (the database, Redis) leaves it ``pending`` with a ``retry_at`` that backs off, doubling up
to five minutes, so an outage of any length short of a day costs a delay, not the update. Only
after ``GIVE_UP_AFTER`` (Telegram itself keeps an update for a day) does it become ``failed``;
an update that is malformed, or whose handler has a bug, is ``failed`` at once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite

from bot.store.database import Store
from bot.store.tables import updates
from bot.timeutil import now

GIVE_UP_AFTER = timedelta(days=1)
LONGEST_BACKOFF = timedelta(minutes=5)
FIRST_RETRY = timedelta(seconds=10)
UPDATE_KINDS = (
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "callback_query",
    "inline_query",
    "chosen_inline_result",
    "my_chat_member",
    "chat_member",
)


class UpdateStatus(enum.StrEnum):
    PENDING = "pending"
    HANDLED = "handled"
    FAILED = "failed"


@dataclass(frozen=True)
class RecordedUpdate:
    update_id: int
    payload: dict[str, Any]
    attempts: int
    received_at: datetime

    @property
    def is_stale(self) -> bool:
        return now() - self.received_at > GIVE_UP_AFTER


def describe_update(payload: dict[str, Any]) -> tuple[str, int | None]:
    """The update's kind and who sent it, read from the raw JSON (any shape is tolerated)."""
    for kind in UPDATE_KINDS:
        body = payload.get(kind)
        if isinstance(body, dict):
            sender = body.get("from") if isinstance(body.get("from"), dict) else {}
            sender_id = sender.get("id")
            return kind, sender_id if isinstance(sender_id, int) else None
    kinds = sorted(key for key in payload if key != "update_id")
    return (kinds[0][:40] if kinds else "empty"), None


def _insert_new(dialect: str):
    """INSERT … ON CONFLICT DO NOTHING, which both SQLite and Postgres speak."""
    module = postgresql if dialect == "postgresql" else sqlite
    return module.insert(updates).on_conflict_do_nothing(index_elements=["bot_id", "update_id"])


class UpdateLog:
    """Records updates and their outcome."""

    def __init__(self, store: Store, bot_id: int, *, first_retry: timedelta = FIRST_RETRY) -> None:
        self.store = store
        self.bot_id = bot_id
        self.first_retry = first_retry

    async def record(self, payload: dict[str, Any]) -> bool:
        """True if this update is new; False if it was seen before and must be dropped."""
        return bool(await self.record_many([payload]))

    async def record_many(self, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Record a batch in one transaction; returns the new ones, in order (duplicates and
        repeats within the batch are dropped)."""
        moment = now()
        rows = {}
        for payload in payloads:
            rows.setdefault(payload["update_id"], self._row(payload, moment))
        if not rows:
            return []
        async with self.store.write() as conn:
            statement = _insert_new(conn.dialect.name).returning(updates.c.update_id)
            result = await conn.execute(statement, list(rows.values()))
            new_ids = set(result.scalars())
        return [rows[update_id]["payload"] for update_id in rows if update_id in new_ids]

    async def mark_handled(self, update_id: int) -> None:
        await self.mark_handled_many([update_id])

    async def mark_handled_many(self, update_ids: list[int]) -> None:
        if not update_ids:
            return
        async with self.store.write() as conn:
            await conn.execute(
                update(updates)
                .where(updates.c.bot_id == self.bot_id, updates.c.update_id.in_(update_ids))
                .values(status=UpdateStatus.HANDLED, handled_at=now(), error=None)
            )

    def _row(self, payload: dict[str, Any], moment: datetime) -> dict[str, Any]:
        kind, sender_id = describe_update(payload)
        return {
            "bot_id": self.bot_id,
            "update_id": payload["update_id"],
            "kind": kind,
            "sender_id": sender_id,
            "payload": payload,
            "status": UpdateStatus.PENDING,
            "attempts": 0,
            "received_at": moment,
            # Handling normally ends long before this; if the process dies first, it is retried.
            "retry_at": moment + self.first_retry,
        }

    async def mark_unhandled(self, update_id: int, error: str, attempts: int) -> None:
        """An outage stopped the handler: try again later, backing off with each attempt."""
        backoff = min(self.first_retry * 2 ** max(attempts - 1, 0), LONGEST_BACKOFF)
        await self._set(update_id, attempts=attempts, error=error[:1000], retry_at=now() + backoff)

    async def mark_failed(self, update_id: int, error: str) -> None:
        """Never to be retried: malformed, a handler's bug, or too old to matter."""
        await self._set(update_id, status=UpdateStatus.FAILED, error=error[:1000])

    async def pending(self, *, limit: int = 50) -> list[RecordedUpdate]:
        """Updates recorded but not handled whose retry is due, oldest first."""
        query = (
            select(
                updates.c.update_id, updates.c.payload, updates.c.attempts, updates.c.received_at
            )
            .where(
                updates.c.bot_id == self.bot_id,
                updates.c.status == UpdateStatus.PENDING,
                updates.c.retry_at <= now(),
            )
            .order_by(updates.c.update_id)
            .limit(limit)
        )
        async with self.store.read() as conn:
            rows = (await conn.execute(query)).all()
        return [RecordedUpdate(*row) for row in rows]

    async def _set(self, update_id: int, **values: Any) -> None:
        async with self.store.write() as conn:
            await conn.execute(
                update(updates)
                .where(updates.c.bot_id == self.bot_id, updates.c.update_id == update_id)
                .values(**values)
            )
