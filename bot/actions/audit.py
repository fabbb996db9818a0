"""The audit trail: every decision of the gate, every grant, use and refusal, in one table.

Events are written inside the transaction that did the thing they record, so the trail never
claims what did not happen and never misses what did. ``/audit`` reads the latest.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.store.database import Store
from bot.store.tables import audit_events
from bot.timeutil import now

DETAIL_LIMIT = 2000


class AuditEvent(enum.StrEnum):
    ALLOWED = "allowed"  # the gate let a call run unattended
    GATED = "gated"  # the gate asked the owner (a card)
    DENIED = "denied"  # the gate refused a call outright
    WAITING = "waiting"  # a gated call retried while its card is still open
    GRANTED = "granted"  # the owner approved: a grant for one call
    DECLINED = "declined"  # the owner said no
    USED = "used"  # a call consumed a grant and ran
    FAILED = "failed"  # a call that was allowed to run raised
    RESOLVED = "resolved"  # a choice, acknowledgement or question was answered
    EXPIRED = "expired"  # a card timed out: never a yes
    CODE_ASKED = "code_asked"  # Approve tapped on a step-up card; a code is owed
    CODE_REFUSED = "code_refused"  # a step-up code was wrong, replayed or locked out
    TAP_REFUSED = "tap_refused"  # a tap with bad callback data or on a missing card
    NOTE = "note"  # the owner replied to a card: kept for the agent
    PEER_REFUSED = "peer_refused"  # requests from a peer failed a check (federation/refusals.py)
    PEER_CHANGED = "peer_changed"  # a link with a peer was made, rotated or removed


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: datetime
    event: AuditEvent
    agent: str | None
    tool: str | None
    interaction_id: int | None
    user_id: int | None
    detail: str


class Audit:
    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    async def add(
        conn: AsyncConnection,
        event: AuditEvent,
        detail: str,
        *,
        agent: str | None = None,
        tool: str | None = None,
        args_hash: str | None = None,
        interaction_id: int | None = None,
        user_id: int | None = None,
    ) -> None:
        """Record an event inside the caller's transaction."""
        await conn.execute(
            insert(audit_events).values(
                at=now(),
                event=event,
                detail=detail[:DETAIL_LIMIT],
                agent=agent,
                tool=tool,
                args_hash=args_hash,
                interaction_id=interaction_id,
                user_id=user_id,
            )
        )

    async def record(self, event: AuditEvent, detail: str, **fields) -> None:
        """Record an event in a transaction of its own."""
        async with self.store.write() as conn:
            await self.add(conn, event, detail, **fields)

    async def latest(self, limit: int = 20, *, event: AuditEvent | None = None) -> list[AuditEntry]:
        query = select(audit_events).order_by(audit_events.c.id.desc()).limit(limit)
        if event is not None:
            query = query.where(audit_events.c.event == event)
        async with self.store.read() as conn:
            rows = (await conn.execute(query)).all()
        return [
            AuditEntry(
                row.id,
                row.at,
                AuditEvent(row.event),
                row.agent,
                row.tool,
                row.interaction_id,
                row.user_id,
                row.detail,
            )
            for row in rows
        ]


async def audit_card(
    conn: AsyncConnection,
    event: AuditEvent,
    detail: str,
    interaction: Any,
    user_id: int | None = None,
) -> None:
    """Record what happened to a card, naming its agent, tool and call."""
    await Audit.add(
        conn,
        event,
        detail,
        agent=interaction.agent,
        tool=interaction.tool,
        args_hash=interaction.args_hash,
        interaction_id=interaction.id,
        user_id=user_id,
    )
