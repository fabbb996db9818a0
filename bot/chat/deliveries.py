"""Deliveries' hold on the outbox's rows (bot/chat/outbox.py queues them): a delivery claims a
chat's oldest undelivered row under a lease, records each part Telegram accepted, and marks the
row sent, failed for good, or given back for a later try. jobs/delivery.py is the delivery.

One sender per chat at a time keeps a chat's order: a delivery finding its chat's oldest row
being sent leaves the row to the delivery sending it, which claims the chat's next row as it
records each one (one transaction per message, not two). A crashed worker's row is taken again
once its lease runs out, and its recorded parts are not sent again.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update

from bot.chat.outbox_statements import (
    CLAIM_NEXT_IN_CHAT,
    OLDEST_IN_CHAT_SQL,
    PG_CLAIM_NEXT_IN_CHAT,
    PG_RECORD_LAST_PART,
    PG_RECORD_PART,
    RECORD_LAST_PART,
    RECORD_PART,
    UNSENT,
    claimable,
    still_held,
)
from bot.chat.outgoing import OutboxKind, OutboxStatus, OutgoingMessage
from bot.errors import LeaseLost, StoreError
from bot.store.database import Store, sqlite_time
from bot.store.tables import outbox
from bot.timeutil import now

logger = logging.getLogger(__name__)
LEASE = timedelta(seconds=60)


class Deliveries:
    """The rows as deliveries take, record and give them back (``Outbox.deliveries``)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def claim_next_in_chat(self, message_id: int) -> OutgoingMessage | None:
        """Take the oldest undelivered row of the chat ``message_id`` belongs to, unless a
        delivery to that chat is under way: one sender per chat at a time keeps the order.

        The row's own state is part of the condition too, so on Postgres, where two of these
        can run at once, the second finds the row taken when it re-reads it.
        """
        moment = now()
        if not self.store.is_sqlite:
            async with self.store.driver() as pg:
                row = await pg.fetchrow(PG_CLAIM_NEXT_IN_CHAT, message_id, moment, moment + LEASE)
            return _from_driver(row) if row is not None else None
        if self._nothing_to_claim(message_id, moment):
            return None
        async with self.store.write() as conn:
            return await _claim_next_in_chat(conn, message_id, moment)

    def _nothing_to_claim(self, message_id: int, moment: datetime) -> bool:
        """SQLite: True when a read shows the claim would find nothing, so no write is spent.

        While a chat is busy most deliveries find its oldest row being sent by the delivery
        draining it (which claims the next row as it records each one): a write transaction
        each, on the file's one write lock, for nothing. Only "nothing undelivered" and "being
        sent under a live lease" are trusted; anything else goes to the claim, which decides.
        """
        if not self.store.is_sqlite:
            return False
        rows = self.store.read_now(OLDEST_IN_CHAT_SQL, (message_id,))
        if not rows:
            return True
        status, lease_until = rows[0]
        return (
            status == OutboxStatus.SENDING
            and lease_until is not None
            and lease_until >= sqlite_time(moment)
        )

    async def record_part(
        self, message: OutgoingMessage, telegram_message_id: int, *, claim_next: bool = False
    ) -> OutgoingMessage | None:
        """Record a part as sent; the last part also marks the message sent. With
        ``claim_next``, the chat's next message is claimed in the same transaction (a delivery
        draining a chat spends one transaction per message, not two; on Postgres a drain's
        last message takes a second, see ``_claim_after_record``)."""
        ids = [*message.telegram_message_ids, telegram_message_id]
        moment = now()
        done = len(ids) == len(message.parts)
        if not self.store.is_sqlite:
            return await self._record_on_postgres(message, ids, moment, claim_next=claim_next)
        held = {"id_": message.id, "held_lease": message.lease_until}
        async with self.store.write() as conn:
            if done:
                values = {"status": OutboxStatus.SENT, "sent_at": moment, "last_error": None}
                statement = RECORD_LAST_PART
            else:
                values = {"lease_until": moment + LEASE}
                statement = RECORD_PART
            values.update(held, parts_sent=len(ids), telegram_message_ids=ids)
            recorded = await conn.execute(statement, values)
            if recorded.rowcount != 1:
                raise LeaseLost(f"outbox {message.id} was taken over by another delivery")
            following = None
            if done and claim_next:
                following = await _claim_next_in_chat(conn, message.id, moment)
        message.telegram_message_ids = ids
        message.parts_sent = len(ids)
        message.lease_until = None if done else values["lease_until"]
        return following

    async def _record_on_postgres(
        self, message: OutgoingMessage, ids: list[int], moment: datetime, *, claim_next: bool
    ) -> OutgoingMessage | None:
        """``record_part`` through the driver: the record and the claim of the chat's next row
        in one statement, a round trip rather than BEGIN, two statements and COMMIT (and a
        second claim when that one found nothing: ``_claim_after_record``)."""
        done = len(ids) == len(message.parts)
        held = (message.id, message.lease_until, len(ids), json.dumps(ids))
        following = None
        async with self.store.driver() as pg:
            if done:
                row = await pg.fetchrow(
                    PG_RECORD_LAST_PART, *held, moment, moment + LEASE, claim_next
                )
                recorded = row["recorded"] == 1
                following = _from_driver(row) if row["id"] is not None else None
            else:
                status = await pg.execute(PG_RECORD_PART, *held, moment + LEASE)
                recorded = status == "UPDATE 1"
        if not recorded:
            raise LeaseLost(f"outbox {message.id} was taken over by another delivery")
        message.telegram_message_ids = ids
        message.parts_sent = len(ids)
        message.lease_until = None if done else moment + LEASE
        if done and claim_next and following is None:
            following = await self._claim_after_record(message.id)
        return following

    async def _claim_after_record(self, message_id: int) -> OutgoingMessage | None:
        """The chat's next row, claimed in a statement of its own once the record committed.

        The record's statement sees the rows as they were when it began. A row committed
        while it ran is not in its view, and that row's own delivery, finding the recorded
        message still being sent, left the chat to this drain: nobody would claim it until
        the sweep. Claiming again with a fresh view closes that gap, at a second round trip
        whenever a drain ends (for most deliveries, one message, at every one). The record
        has committed by now: a database that fails this claim leaves the row to the sweep
        and must not fail the record."""
        try:
            return await self.claim_next_in_chat(message_id)
        except StoreError as exc:
            logger.warning(
                "outbox %s: sent; the chat's next row waits for the sweep: %s", message_id, exc
            )
            return None

    # A delivery passes the message it claimed (``held``): the change then applies only while
    # its lease is still the row's, so a delivery that stalled past its lease cannot undo what
    # the delivery that took the row over has done. They return False when the lease was lost.

    async def mark_sent(self, message_id: int, *, held: OutgoingMessage | None = None) -> bool:
        return await self._finish(message_id, OutboxStatus.SENT, None, held, sent_at=now())

    async def mark_failed(
        self, message_id: int, error: str, *, held: OutgoingMessage | None = None
    ) -> bool:
        return await self._finish(message_id, OutboxStatus.FAILED, error, held)

    async def release(
        self,
        message_id: int,
        error: str | None = None,
        *,
        not_before: datetime | None = None,
        held: OutgoingMessage | None = None,
    ) -> bool:
        """Give the row back for a later attempt (rate limit, 429, network trouble); with
        ``not_before`` nothing takes it sooner, the sweep included (a 429 names the second)."""
        return await self._finish(
            message_id, OutboxStatus.PENDING, error, held, lease_until=not_before
        )

    async def leave_topic(self, message_id: int, *, held: OutgoingMessage | None = None) -> bool:
        """Give the row back to go to its chat's General topic: its forum topic is gone."""
        return await self._finish(
            message_id,
            OutboxStatus.PENDING,
            "its topic is gone",
            held,
            thread_id=None,
            lease_until=None,
        )

    async def due_for_retry(self, *, older_than: timedelta, limit: int = 100) -> list[int]:
        """Rows a delivery should have sent by now: pending for a while, or a lapsed lease."""
        moment = now()
        query = (
            select(outbox.c.id)
            .where(
                UNSENT,
                or_(
                    and_(
                        claimable(outbox, moment),
                        outbox.c.status == OutboxStatus.PENDING,
                        outbox.c.created_at < moment - older_than,
                    ),
                    and_(outbox.c.status == OutboxStatus.SENDING, outbox.c.lease_until < moment),
                ),
            )
            .order_by(outbox.c.id)
            .limit(limit)
        )
        async with self.store.read() as conn:
            return list((await conn.execute(query)).scalars())

    async def _finish(
        self,
        message_id: int,
        status: str,
        error: str | None,
        held: OutgoingMessage | None = None,
        **values: Any,
    ) -> bool:
        async with self.store.write() as conn:
            changed = await conn.execute(
                update(outbox)
                .where(outbox.c.id == message_id, *still_held(held))
                .values(status=status, last_error=error and error[:1000], **values)
            )
        return changed.rowcount == 1


async def _claim_next_in_chat(conn, message_id: int, moment) -> OutgoingMessage | None:
    """Claim the oldest undelivered row of ``message_id``'s chat, if it is claimable now."""
    params = {"of_message": message_id, "moment": moment, "lease_until": moment + LEASE}
    row = (await conn.execute(CLAIM_NEXT_IN_CHAT, params)).first()
    return OutgoingMessage.from_row(row) if row else None


def _from_driver(row) -> OutgoingMessage:
    """A row as asyncpg returns it (Store.driver), its JSON decoded by SQLAlchemy's codec."""
    return OutgoingMessage(
        id=row["id"],
        chat_id=row["chat_id"],
        kind=OutboxKind(row["kind"]),
        parts=list(row["parts"]),
        reply_markup=row["reply_markup"],
        reply_to_message_id=row["reply_to_message_id"],
        parts_sent=row["parts_sent"],
        telegram_message_ids=list(row["telegram_message_ids"]),
        attempts=row["attempts"],
        lease_until=row["lease_until"],
        caption=row["caption"],
        edit_of=row["edit_of"],
        reply_to_outbox=row["reply_to_outbox"],
        idempotency_key=row["idempotency_key"],
        last_error=row["last_error"],
        thread_id=row["thread_id"],
    )
