"""The outbox: every message the bot sends is a row here first, then a delivery job sends it.

So a Telegram outage delays messages instead of losing them. A row is one logical message: a
text too long for one Telegram message is split at line boundaries into parts, or becomes a
file past ``file_over_chars``. A delivery job claims a row with a lease (a crashed worker's row
is picked up again when the lease runs out), records each part's Telegram message id as it
goes, so a rerun resumes after the last part sent instead of repeating it.

The outbox is the one way to send: ``Outbox.send`` (and ``send_file``, ``send_edit``) puts the
row and asks a worker to deliver it, through the ``deliver`` request the process gives it (the
delivery actor, behind the broker). A broker outage never fails the sender: the row waits and
the outbox sweep delivers it.

Every text the outbox keeps is Telegram HTML (bot/chat/text.py): a plain ``str`` given to it is
escaped as it is queued, an ``Html`` a view wrote is kept as it is.

A file an agent sends (``send_file``) is a copy under the data dir's ``outgoing/``, taken when
the call ran, so changing the file afterwards cannot change what arrives.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

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
    insert_unless_keyed,
    still_held,
)
from bot.chat.outgoing import (
    OWED,
    OutboxKind,
    OutboxStatus,
    OutgoingMessage,
    split_text,
)
from bot.chat.text import escape, plain
from bot.errors import BrokerError, LeaseLost
from bot.store.database import Store, sqlite_time
from bot.store.tables import outbox
from bot.timeutil import now

logger = logging.getLogger(__name__)
# Asks a worker to deliver one row (the delivery actor, by its id); raises BrokerError when the
# broker is down.
Deliver = Callable[[int], Awaitable[None]]
LEASE = timedelta(seconds=60)


@dataclass
class _Gathered:
    """The first row queued for each chat within a ``deliveries_gathered`` block. A task
    started inside the block keeps seeing it after the block ends (it has a copy of the
    context), so ``ended`` tells ``send`` to ask for a delivery itself from then on."""

    first_of_chat: dict[int, int]
    ended: bool = False


# While set, deliveries are asked for once per chat at the end (Outbox.deliveries_gathered).
_gathered: ContextVar[_Gathered | None] = ContextVar("gathered_deliveries", default=None)


class Outbox:
    """Queue messages, ask for their delivery, and track each one to the end.

    ``deliver`` is how this process asks for a delivery; without one (a test of the rows
    alone) nothing is asked for and the sweep would send what is queued.
    """

    def __init__(
        self, store: Store, *, file_over_chars: int = 12_000, deliver: Deliver | None = None
    ) -> None:
        self.store = store
        self.file_over_chars = file_over_chars
        self.deliver = deliver

    # Sending: the row, then a request for its delivery

    async def send(
        self,
        chat_id: int,
        text: str,
        *,
        key: str | None = None,
        reply_markup: dict[str, Any] | None = None,
        reply_to: int | None = None,
        reply_to_outbox: int | None = None,
        thread_id: int | None = None,
    ) -> int:
        """Queue a message and ask for its delivery; returns its row id. A repeated ``key``
        queues nothing and asks for nothing: the first send did. ``reply_to`` is a Telegram
        message id, ``reply_to_outbox`` an earlier row of the chat; ``thread_id`` a forum
        topic of the chat (bot/chat/topics.py)."""
        outbox_id, new = await self.put(
            chat_id,
            text,
            reply_markup=reply_markup,
            reply_to_message_id=reply_to,
            idempotency_key=key,
            reply_to_outbox=reply_to_outbox,
            thread_id=thread_id,
        )
        if new:
            await self.request_delivery(chat_id, outbox_id)
        return outbox_id

    async def request_delivery(self, chat_id: int, outbox_id: int) -> None:
        """Ask for the delivery of a committed row of ``chat_id`` now, or, within a
        ``deliveries_gathered`` block, once for the chat at its end."""
        gathered = _gathered.get()
        if gathered is None or gathered.ended:
            await self.ask_delivery(outbox_id)
        else:  # asked for at the end of the block, once for the chat
            gathered.first_of_chat.setdefault(chat_id, outbox_id)

    async def send_file(
        self,
        chat_id: int,
        stored: str,
        *,
        caption: str | None = None,
        thread_id: int | None = None,
    ) -> int:
        """Queue a file kept under outgoing/ (see ``put_file``) and ask for its delivery."""
        outbox_id = await self.put_file(chat_id, stored, caption=caption, thread_id=thread_id)
        await self.ask_delivery(outbox_id)
        return outbox_id

    async def send_edit(
        self,
        chat_id: int,
        text: str,
        *,
        edit_of: int | None = None,
        message_id: int | None = None,
        reply_markup: dict[str, Any] | None = None,
        key: str | None = None,
    ) -> int | None:
        """Queue an edit and ask for its delivery: of what the row ``edit_of`` sent, or of the
        Telegram message ``message_id`` (one a tap was on: no row of ours needs to be found).
        Without ``reply_markup`` the message loses its buttons. A repeated ``key`` queues
        nothing (None): a redelivered tap edits once."""
        if (edit_of is None) == (message_id is None):
            raise ValueError("an edit replaces one message: give edit_of or message_id")
        text = escape(text)
        if edit_of is not None and key is None:
            async with self.store.write() as conn:
                outbox_id = await self.add(
                    conn, chat_id, text, reply_markup=reply_markup, edit_of=edit_of
                )
        else:
            # An edit of a Telegram message keeps its target where a reply keeps the message
            # it answers (an edit answers nothing), so no column is added for it.
            row = self._row(chat_id, text, reply_markup, message_id, key)
            row.update(kind=OutboxKind.EDIT, parts=[text], edit_of=edit_of)
            async with self.store.write() as conn:
                statement = insert_unless_keyed(conn.dialect.name)
                outbox_id = (await conn.execute(statement, row)).scalar_one_or_none()
            if outbox_id is None:
                return None
        await self.ask_delivery(outbox_id)
        return outbox_id

    async def ask_delivery(self, outbox_id: int) -> bool:
        """Ask a worker to deliver the row (one queued with ``add``, once its transaction has
        committed); False when the broker is down. The row then stays in the outbox and the
        sweep delivers it later, so this does not fail the caller."""
        if self.deliver is None:
            return True
        try:
            await self.deliver(outbox_id)
        except BrokerError:
            logger.warning("broker down: outbox %s waits for the sweep", outbox_id)
            return False
        return True

    @contextlib.asynccontextmanager
    async def deliveries_gathered(self) -> AsyncIterator[None]:
        """Within, what ``send`` queues is delivered by one job per chat, asked for at the end.

        A delivery sends its chat's undelivered messages oldest first, draining the chat; when
        it is asked for at the end, every message queued within is committed, so one job per
        chat sends them all. Asked for one by one, the others would find nothing left to send.
        """
        gathered = _Gathered({})
        token = _gathered.set(gathered)
        try:
            yield
        finally:
            _gathered.reset(token)
            gathered.ended = True
            for outbox_id in gathered.first_of_chat.values():
                await self.ask_delivery(outbox_id)

    # The rows

    async def put(
        self,
        chat_id: int,
        text: str,
        *,
        reply_markup: dict[str, Any] | None = None,
        reply_to_message_id: int | None = None,
        idempotency_key: str | None = None,
        reply_to_outbox: int | None = None,
        thread_id: int | None = None,
    ) -> tuple[int, bool]:
        """Queue a message; returns its id and whether it is new (a repeated key is not).
        ``reply_to_outbox`` makes it a reply to what an earlier row of the chat sent."""
        async with self.store.write() as conn:
            outbox_id = await self.put_within(
                conn,
                chat_id,
                text,
                key=idempotency_key,
                reply_markup=reply_markup,
                reply_to=reply_to_message_id,
                reply_to_outbox=reply_to_outbox,
                thread_id=thread_id,
            )
        if outbox_id is None:
            return await self._id_for_key(idempotency_key), False
        return outbox_id, True

    async def put_within(
        self,
        conn: AsyncConnection,
        chat_id: int,
        text: str,
        *,
        key: str | None,
        reply_markup: dict[str, Any] | None = None,
        reply_to: int | None = None,
        reply_to_outbox: int | None = None,
        thread_id: int | None = None,
    ) -> int | None:
        """``put``'s row, queued inside the caller's transaction (one commit for what the
        message announces and the message); None when ``key`` was queued before. The caller
        asks for its delivery (``request_delivery``) once the transaction has committed."""
        row = self.row_of(
            chat_id,
            text,
            key=key,
            reply_markup=reply_markup,
            reply_to=reply_to,
            reply_to_outbox=reply_to_outbox,
            thread_id=thread_id,
        )
        statement = insert_unless_keyed(conn.dialect.name)
        return (await conn.execute(statement, row)).scalar_one_or_none()

    def row_of(
        self,
        chat_id: int,
        text: str,
        *,
        key: str | None,
        reply_markup: dict[str, Any] | None = None,
        reply_to: int | None = None,
        reply_to_outbox: int | None = None,
        thread_id: int | None = None,
    ) -> dict[str, Any]:
        """The row ``put_within`` inserts, for a caller that inserts it in a statement of its
        own (a capture and its receipt, bot/tasks/tasks.py); ``insert_unless_keyed`` is how."""
        row = self._row(chat_id, text, reply_markup, reply_to, key)
        row.update(reply_to_outbox=reply_to_outbox, thread_id=thread_id)
        return row

    async def add(
        self,
        conn: AsyncConnection,
        chat_id: int,
        text: str,
        *,
        reply_markup: dict[str, Any] | None = None,
        caption: str | None = None,
        edit_of: int | None = None,
        reply_to_outbox: int | None = None,
        thread_id: int | None = None,
    ) -> int:
        """Queue a message inside the caller's transaction, so it exists exactly when what it
        announces does. With ``caption`` the text goes as a file under that caption; with
        ``edit_of`` it replaces the message that row sent; with ``reply_to_outbox`` it answers
        the message that row sent; with ``thread_id`` it goes to that forum topic."""
        text = escape(text)
        row = self._row(chat_id, text, reply_markup, None, None)
        row.update(reply_to_outbox=reply_to_outbox, thread_id=thread_id)
        if caption is not None:
            row.update(kind=OutboxKind.DOCUMENT, parts=[text], caption=caption)
        if edit_of is not None:
            row.update(kind=OutboxKind.EDIT, parts=[text], edit_of=edit_of)
        result = await conn.execute(insert(outbox).values(**row).returning(outbox.c.id))
        return result.scalar_one()

    async def put_file(
        self,
        chat_id: int,
        stored: str,
        *,
        caption: str | None = None,
        thread_id: int | None = None,
    ) -> int:
        """Queue a file kept under the data dir's outgoing/ (``stored``: "<sha256>/<name>"), to
        be sent as a document under its own name."""
        row = self._row(chat_id, stored, None, None, None)
        row.update(
            kind=OutboxKind.FILE, parts=[stored], caption=caption or None, thread_id=thread_id
        )
        async with self.store.write() as conn:
            result = await conn.execute(insert(outbox).values(**row).returning(outbox.c.id))
            return result.scalar_one()

    def _row(self, chat_id, text, reply_markup, reply_to_message_id, idempotency_key) -> dict:
        text = escape(text)
        shown = plain(text)
        if not shown.strip():
            raise ValueError("an outgoing message needs some text")
        is_file = len(shown) > self.file_over_chars
        return {
            "chat_id": chat_id,
            "thread_id": None,
            "idempotency_key": idempotency_key,
            "kind": OutboxKind.DOCUMENT if is_file else OutboxKind.TEXT,
            "parts": [text] if is_file else split_text(text),
            "reply_markup": reply_markup,
            "reply_to_message_id": reply_to_message_id,
            "status": OutboxStatus.PENDING,
            "parts_sent": 0,
            "telegram_message_ids": [],
            "attempts": 0,
            "created_at": now(),
        }

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
        draining a chat spends one transaction per message, not two)."""
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
        """``record_part`` as one statement through the driver: the record and the claim of
        the chat's next row are one round trip, not BEGIN, two statements and COMMIT."""
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
                if recorded and claim_next and following is None:
                    following = await self._claim_after_record(pg, message.id, moment)
            else:
                status = await pg.execute(PG_RECORD_PART, *held, moment + LEASE)
                recorded = status == "UPDATE 1"
        if not recorded:
            raise LeaseLost(f"outbox {message.id} was taken over by another delivery")
        message.telegram_message_ids = ids
        message.parts_sent = len(ids)
        message.lease_until = None if done else moment + LEASE
        return following

    @staticmethod
    async def _claim_after_record(pg, message_id: int, moment: datetime):
        """The chat's next row, claimed in a statement of its own once the record committed.

        The record's statement sees the rows as they were when it began. A row committed
        while it ran is not in its view, and that row's own delivery, finding the recorded
        message still being sent, left the chat to this drain: nobody would claim it until
        the sweep. Claiming again with a fresh view closes that gap; it costs a round trip
        only when a drain ends."""
        row = await pg.fetchrow(PG_CLAIM_NEXT_IN_CHAT, message_id, moment, moment + LEASE)
        return _from_driver(row) if row is not None else None

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

    async def get(self, message_id: int) -> dict[str, Any] | None:
        async with self.store.read() as conn:
            row = (await conn.execute(select(outbox).where(outbox.c.id == message_id))).first()
        return dict(row._mapping) if row else None

    async def counts(self) -> dict[str, int]:
        """The rows not yet sent, by status (pending, sending, failed). Sent rows are not
        counted: there are as many as messages ever sent, until retention prunes them."""
        query = select(outbox.c.status, func.count()).where(UNSENT).group_by(outbox.c.status)
        async with self.store.read() as conn:
            return {status: count for status, count in (await conn.execute(query)).all()}

    async def oldest_owed_at(self) -> datetime | None:
        """When the oldest row still to be sent (pending or sending) was queued; None: none."""
        query = select(func.min(outbox.c.created_at)).where(UNSENT, outbox.c.status.in_(OWED))
        async with self.store.read() as conn:
            return (await conn.execute(query)).scalar()

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

    async def _id_for_key(self, key: str) -> int:
        async with self.store.read() as conn:
            query = select(outbox.c.id).where(outbox.c.idempotency_key == key)
            return (await conn.execute(query)).scalar_one()


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
