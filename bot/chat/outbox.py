"""The outbox: every message the bot sends is a row here first, then a delivery job sends it.

So a Telegram outage delays messages instead of losing them. A row is one logical message: a
text too long for one Telegram message is split at line boundaries into parts, or becomes a
file past ``file_over_chars``. A delivery job claims a row with a lease and records each part
as it goes (bot/chat/deliveries.py), so a crashed worker's row is taken again and resumes after
the last part sent instead of repeating it.

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
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.chat.deliveries import Deliveries
from bot.chat.outbox_statements import UNSENT, insert_unless_keyed
from bot.chat.outgoing import OWED, OutboxKind, OutboxStatus, split_text
from bot.chat.text import escape, plain
from bot.errors import BrokerError
from bot.store.database import Store
from bot.store.tables import outbox
from bot.timeutil import now

logger = logging.getLogger(__name__)
# Asks a worker to deliver one row (the delivery actor, by its id); raises BrokerError when the
# broker is down.
Deliver = Callable[[int], Awaitable[None]]


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
        self.deliveries = Deliveries(store)  # how a delivery takes the rows and gives them back

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

    async def _id_for_key(self, key: str) -> int:
        async with self.store.read() as conn:
            query = select(outbox.c.id).where(outbox.c.idempotency_key == key)
            return (await conn.execute(query)).scalar_one()
