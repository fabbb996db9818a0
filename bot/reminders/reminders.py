"""The ``reminders`` table: a reminder waits until it is due, the clock claims it (one claimer,
compare-and-set) and enqueues ``remind``, which queues its card; Done closes it, Snooze and
Tomorrow make it wait again.

Nothing lives only in Redis: a reminder claimed whose message was lost (a Redis that lost its
data, a worker killed) is claimed again a minute later, and its card is keyed by the reminder and
its due time, so it is sent once. A reminder that fell due while aegis was down fires once when
it is back, and its card says it is late.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, func, insert, or_, select, update

from bot.store.database import Store
from bot.store.tables import reminders
from bot.timeutil import now
from bot.upkeep.due import Due, Soonest

CLAIM_AGAIN_AFTER = timedelta(minutes=1)  # a claimed reminder whose card is not queued by then
SOONEST_READ = 100  # due reminders claimed per tick


class ReminderStatus(enum.StrEnum):
    WAITING = "waiting"
    DUE = "due"  # claimed by the clock, its card not queued yet
    SENT = "sent"  # its card is queued
    DONE = "done"


@dataclass(frozen=True)
class Reminder:
    id: int
    chat_id: int
    text: str
    status: str
    due_at: datetime
    fired_at: datetime | None
    card_outbox_id: int | None
    snoozes: int

    @classmethod
    def from_row(cls, row) -> Reminder:
        values = row._mapping
        return cls(**{name: values[name] for name in cls.__dataclass_fields__})


class Reminders:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def add(self, chat_id: int, text: str, due_at: datetime) -> Reminder:
        moment = now()
        values = {"chat_id": chat_id, "text": text, "due_at": due_at, "created_at": moment}
        async with self.store.write() as conn:
            result = await conn.execute(
                insert(reminders).values(**values, status=ReminderStatus.WAITING, snoozes=0)
            )
            row = await conn.execute(
                select(reminders).where(reminders.c.id == result.inserted_primary_key[0])
            )
            return Reminder.from_row(row.one())

    async def get(self, reminder_id: int) -> Reminder | None:
        async with self.store.read() as conn:
            row = (
                await conn.execute(select(reminders).where(reminders.c.id == reminder_id))
            ).first()
        return Reminder.from_row(row) if row else None

    async def waiting(self, chat_id: int) -> list[Reminder]:
        """The chat's reminders still to come, soonest first."""
        query = (
            select(reminders)
            .where(reminders.c.chat_id == chat_id, reminders.c.status == ReminderStatus.WAITING)
            .order_by(reminders.c.due_at)
        )
        async with self.store.read() as conn:
            return [Reminder.from_row(row) for row in (await conn.execute(query)).all()]

    async def enqueue_due(self, enqueue: Callable[..., Awaitable[None]]) -> list[int]:
        """Claim each due reminder (and any claimed a while ago whose card never came) and
        enqueue ``remind`` for it; a broker that refuses puts it back."""
        moment = now()
        due = or_(
            and_(reminders.c.status == ReminderStatus.WAITING, reminders.c.due_at <= moment),
            and_(
                reminders.c.status == ReminderStatus.DUE,
                reminders.c.claimed_at <= moment - CLAIM_AGAIN_AFTER,
            ),
        )
        query = select(reminders.c.id, reminders.c.status, reminders.c.claimed_at).where(due)
        async with self.store.read() as conn:
            rows = (await conn.execute(query.limit(SOONEST_READ))).all()
        enqueued = []
        for reminder_id, status, claimed_at in rows:
            if not await self._claim(reminder_id, status, claimed_at, moment):
                continue
            try:
                await enqueue("remind", reminder_id)
            except Exception:
                await self._set(reminder_id, ReminderStatus.WAITING, claimed_at=None)
                raise
            enqueued.append(reminder_id)
        return enqueued

    async def _claim(self, reminder_id: int, status: str, claimed_at, moment) -> bool:
        same = (
            reminders.c.claimed_at.is_(None)
            if claimed_at is None
            else (reminders.c.claimed_at == claimed_at)
        )
        async with self.store.write() as conn:
            moved = await conn.execute(
                update(reminders)
                .where(reminders.c.id == reminder_id, reminders.c.status == status, same)
                .values(status=ReminderStatus.DUE, claimed_at=moment)
            )
        return moved.rowcount == 1

    async def fired(self, reminder_id: int, card_outbox_id: int) -> None:
        """Its card is queued: it waits for a tap now."""
        await self._set(
            reminder_id, ReminderStatus.SENT, fired_at=now(), card_outbox_id=card_outbox_id
        )

    async def done(self, reminder_id: int) -> Reminder | None:
        """Close it; None if it is gone or already closed (the tap changes nothing)."""
        return await self._settle(reminder_id, status=ReminderStatus.DONE)

    async def snooze(self, reminder_id: int, until: datetime) -> Reminder | None:
        """Make it wait again until ``until``; None if it is closed or not out yet."""
        return await self._settle(
            reminder_id,
            status=ReminderStatus.WAITING,
            due_at=until,
            claimed_at=None,
            snoozes=reminders.c.snoozes + 1,
        )

    async def _settle(self, reminder_id: int, **values) -> Reminder | None:
        """A tap on its card: only a reminder whose card is out can be tapped into anything."""
        async with self.store.write() as conn:
            moved = await conn.execute(
                update(reminders)
                .where(reminders.c.id == reminder_id, reminders.c.status == ReminderStatus.SENT)
                .values(**values)
            )
            if moved.rowcount != 1:
                return None
            row = await conn.execute(select(reminders).where(reminders.c.id == reminder_id))
            return Reminder.from_row(row.one())

    async def _set(self, reminder_id: int, status: ReminderStatus, **values) -> None:
        async with self.store.write() as conn:
            await conn.execute(
                update(reminders)
                .where(reminders.c.id == reminder_id)
                .values(status=status, **values)
            )

    def due(self) -> Due:
        """The clock's part: the soonest waiting reminder, or a claimed one whose card never
        came, to claim again; and ``enqueue_due``."""
        waiting = select(func.min(reminders.c.due_at)).where(
            reminders.c.status == ReminderStatus.WAITING
        )
        claimed = select(func.min(reminders.c.claimed_at)).where(
            reminders.c.status == ReminderStatus.DUE
        )
        return Due(
            "reminders",
            (Soonest(waiting), Soonest(claimed, after=CLAIM_AGAIN_AFTER)),
            self.enqueue_due,
        )
