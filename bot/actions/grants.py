"""Grants: what an owner's approval buys, which is one call, for 15 minutes.

A grant is bound to the approval hash (policies/canonical.py) of the exact agent, tool and
arguments, and is consumed by the first call that uses it with one compare-and-set: of any
number of identical calls racing for it, one runs, and a retry after that is gated again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.store.database import Store
from bot.store.fast_paths import LIVE_GRANT, fetch, live_grant_where
from bot.store.tables import grants
from bot.timeutil import now

GRANT_LIFETIME = timedelta(minutes=15)


class Approvals:
    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    async def grant(
        conn: AsyncConnection,
        *,
        interaction_id: int,
        agent: str,
        tool: str,
        args_hash: str,
        granted_by: int,
        moment: datetime,
        step_up: bool = False,
    ) -> datetime:
        """Grant one call inside the caller's transaction; returns when the grant expires.
        ``step_up``: it was granted with a code, so it may run a call that needs one."""
        expires_at = moment + GRANT_LIFETIME
        await conn.execute(
            insert(grants).values(
                interaction_id=interaction_id,
                agent=agent,
                tool=tool,
                args_hash=args_hash,
                step_up=step_up,
                granted_by=granted_by,
                granted_at=moment,
                expires_at=expires_at,
            )
        )
        return expires_at

    async def used(self, card: int) -> bool:
        """Whether the grant card ``card`` gave has been used (a call ran on it), however long
        ago."""
        query = select(grants.c.id).where(
            grants.c.interaction_id == card, grants.c.used_at.is_not(None)
        )
        async with self.store.read() as conn:
            return (await conn.execute(query)).first() is not None

    async def has_live_grant(self, args_hash: str) -> bool:
        """Whether an unused, unexpired grant exists; the cheap read before ``consume``.

        Every gated call asks this, and an agent polling for its approval asks it often, so
        on SQLite it is one indexed read on this thread (Store.read_now), not an async trip.
        """
        return bool(await fetch(self.store, LIVE_GRANT, args_hash=args_hash, moment=now()))

    @staticmethod
    async def consume(
        conn: AsyncConnection, args_hash: str, *, step_up: bool = False
    ) -> int | None:
        """Use one live grant for this hash; returns its interaction id, or None if none was
        left. With ``step_up`` only a grant given with a code will do: a call whose policy
        was tightened since its approval needs a new one. The row's own ``used_at IS NULL``
        is re-checked by the UPDATE itself, so on Postgres a racer that picked the same row
        finds it used and gets nothing."""
        moment = now()
        live = live_grant_where(args_hash, moment)
        if step_up:
            live = (*live, grants.c.step_up.is_(True))
        oldest = select(grants.c.id).where(*live).order_by(grants.c.id)
        used = await conn.execute(
            update(grants)
            .where(grants.c.id == oldest.limit(1).scalar_subquery(), grants.c.used_at.is_(None))
            .values(used_at=moment)
            .returning(grants.c.interaction_id)
        )
        return used.scalar_one_or_none()
