"""Incidents: opened when a monitor goes down (or flaps, or the watchdog finds aegis itself in
trouble), shown as one card, reminded about in time, and closed by editing that card in place.

Every change is a compare-and-set on the row, inside the caller's transaction where the caller
decided it, and every message is an outbox row of that same transaction: a crash after the
decision delivers the message (the outbox sweep), and a decision made twice by two racing
checks opens one incident (``open_key`` is unique while it is open) and sends one card.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.chat.callbacks import CallbackSigner
from bot.chat.outbox import Outbox
from bot.chat.views import monitors as views
from bot.monitors.incident import SILENCES, Incident, IncidentKind, Tap, next_reminder
from bot.store.database import Store
from bot.store.tables import incidents
from bot.timeutil import now, short_time

Asked = list[int]  # outbox rows to ask a delivery for once the transaction has committed


class Incidents:
    def __init__(self, store: Store, outbox: Outbox, signer: CallbackSigner) -> None:
        self.store = store
        self.outbox = outbox
        self.signer = signer

    # Deciding, inside the caller's transaction

    async def open_in(
        self,
        conn: AsyncConnection,
        *,
        subject: str,
        kind: IncidentKind,
        chat_id: int,
        title: str,
        detail: str | None,
        moment: datetime,
        asked: Asked,
        monitor_id: int | None = None,
        agents: tuple[str, ...] = (),
        remind_every: timedelta | None = None,
    ) -> Incident | None:
        """Open an incident and queue its card; None when one is open on this subject."""
        values = {
            "subject": subject,
            "open_key": subject,
            "kind": kind,
            "monitor_id": monitor_id,
            "chat_id": chat_id,
            "title": title,
            "detail": detail,
            "agents": list(agents),
            "opened_at": moment,
            "next_remind_at": moment + remind_every if remind_every else None,
            "reminders": 0,
            "restart_notice": False,
        }
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        statement = (
            dialect.insert(incidents)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["open_key"])
            .returning(incidents.c.id)
        )
        new_id = (await conn.execute(statement)).scalar_one_or_none()
        if new_id is None:
            return None
        incident = await self.get_in(conn, new_id)
        text, markup = views.incident_card(incident, self.signer, moment)
        card = await self.outbox.add(conn, chat_id, text, reply_markup=markup)
        await conn.execute(
            update(incidents).where(incidents.c.id == new_id).values(card_outbox_id=card)
        )
        asked.append(card)
        return dataclasses.replace(incident, card_outbox_id=card)

    async def close_in(
        self, conn: AsyncConnection, incident: Incident, note: str, moment: datetime, asked: Asked
    ) -> bool:
        """Close it once (of two racing closes, one wins) and edit its card to say how."""
        closed = await conn.execute(
            update(incidents)
            .where(incidents.c.id == incident.id, incidents.c.closed_at.is_(None))
            .values(closed_at=moment, open_key=None, close_note=note)
        )
        if closed.rowcount != 1:
            return False
        await self._edit_card_in(conn, incident.id, moment, asked)
        return True

    async def remind_in(
        self,
        conn: AsyncConnection,
        incident: Incident,
        every: timedelta,
        text: str,
        moment: datetime,
        asked: Asked,
    ) -> bool:
        """A "still down" reply to the card if one is due (or owed after a restart), at most
        one per call; the next stays on the schedule anchored at the opening."""
        due = incident.next_remind_at is not None and incident.next_remind_at <= moment
        if incident.quiet(moment) or not (due or incident.restart_notice):
            return False
        values = {"restart_notice": False, "reminders": incidents.c.reminders + 1}
        if due:
            values["next_remind_at"] = next_reminder(incident.opened_at, every, moment)
        condition = (incidents.c.id == incident.id) & incidents.c.closed_at.is_(None)
        if due:
            condition &= incidents.c.next_remind_at == incident.next_remind_at
        else:
            condition &= incidents.c.restart_notice.is_(True)
        moved = await conn.execute(update(incidents).where(condition).values(**values))
        if moved.rowcount != 1:
            return False
        asked.append(
            await self.outbox.add(
                conn, incident.chat_id, text, reply_to_outbox=incident.card_outbox_id
            )
        )
        return True

    async def note_error_in(self, conn: AsyncConnection, incident: Incident, detail: str) -> None:
        """Keep the latest error for the reminders and the watchdog; the card is not edited
        for it (an edit per failed check would be noise)."""
        if detail != incident.detail:
            await conn.execute(
                update(incidents).where(incidents.c.id == incident.id).values(detail=detail)
            )

    async def open_for_in(self, conn: AsyncConnection, subject: str) -> Incident | None:
        row = (await conn.execute(select(incidents).where(incidents.c.open_key == subject))).first()
        return Incident.from_row(row) if row else None

    # The owner's taps

    async def ack(self, incident_id: int, user_name: str) -> str:
        """Acknowledge: no more reminders for this incident. Returns the answer to show."""
        moment = now()
        changes = {"acked_at": moment, "acked_by_name": user_name}
        if await self._tap(incident_id, changes, moment):
            return "Acknowledged: no more reminders for this incident."
        return _not_changed(await self.get(incident_id))

    async def silence(self, incident_id: int, tap: Tap) -> str:
        """No reminders for an hour or a day; then they resume on their schedule."""
        moment = now()
        until = moment + SILENCES[tap]
        if await self._tap(incident_id, {"silenced_until": until}, moment):
            return f"Silenced until {short_time(until)}."
        return _not_changed(await self.get(incident_id))

    async def _tap(self, incident_id: int, changes: dict, moment: datetime) -> bool:
        """Change an open, unacknowledged incident and edit its card; False: it was not."""
        asked: Asked = []
        async with self.store.write() as conn:
            changed = await conn.execute(
                update(incidents)
                .where(
                    incidents.c.id == incident_id,
                    incidents.c.closed_at.is_(None),
                    incidents.c.acked_at.is_(None),
                )
                .values(**changes)
            )
            if changed.rowcount == 1:
                await self._edit_card_in(conn, incident_id, moment, asked)
        await self.deliver(asked)
        return changed.rowcount == 1

    # Upkeep and reading

    async def after_restart(self) -> int:
        """Every open down incident owes one "still down" once aegis is back: the owner learns
        it is still down without a reminder early, and the schedule is kept."""
        async with self.store.write() as conn:
            marked = await conn.execute(
                update(incidents)
                .where(incidents.c.closed_at.is_(None), incidents.c.kind == IncidentKind.DOWN)
                .values(restart_notice=True)
            )
        return marked.rowcount

    async def deliver(self, asked: Asked) -> None:
        for outbox_id in asked:
            if not await self.outbox.ask_delivery(outbox_id):
                return  # the broker is down: the outbox sweep sends them

    async def get(self, incident_id: int) -> Incident | None:
        async with self.store.read() as conn:
            return await self.get_in(conn, incident_id)

    async def open_ones(self) -> list[Incident]:
        async with self.store.read() as conn:
            rows = await conn.execute(
                select(incidents).where(incidents.c.closed_at.is_(None)).order_by(incidents.c.id)
            )
            return [Incident.from_row(row) for row in rows.all()]

    @staticmethod
    async def get_in(conn: AsyncConnection, incident_id: int) -> Incident | None:
        row = (await conn.execute(select(incidents).where(incidents.c.id == incident_id))).first()
        return Incident.from_row(row) if row else None

    async def _edit_card_in(self, conn, incident_id: int, moment: datetime, asked: Asked) -> None:
        incident = await self.get_in(conn, incident_id)
        if incident is None or incident.card_outbox_id is None:
            return
        text, markup = views.incident_card(incident, self.signer, moment)
        asked.append(
            await self.outbox.add(
                conn, incident.chat_id, text, reply_markup=markup, edit_of=incident.card_outbox_id
            )
        )


def _not_changed(incident: Incident | None) -> str:
    """The honest answer to a tap that changed nothing."""
    if incident is None:
        return "There is no such incident any more."
    if incident.closed_at is not None:
        return f"Already over: {incident.close_note} (at {short_time(incident.closed_at)})."
    if incident.acked_at is not None:
        return f"Already acknowledged at {short_time(incident.acked_at)}."
    return "Nothing changed."
