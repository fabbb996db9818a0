"""Who may use the bot: ``AEGIS_OWNER_IDS`` plus accounts paired with a TOTP code.

Everyone else is an unknown sender: recorded, refused at most once an hour, and nothing they
send reaches a handler. The gate itself (``handlers/gate.py``) asks this module.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import timedelta

from sqlalchemy import case, insert, literal, select
from sqlalchemy.dialects import postgresql, sqlite

from bot.chat.codes import CodeVerifier
from bot.store.database import Store
from bot.store.tables import owners, unknown_senders
from bot.timeutil import now

REFUSAL_INTERVAL = timedelta(hours=1)
PAIRED_CACHE_SECONDS = 5.0


class Owners:
    """The owner list, with paired accounts cached briefly (the gate asks on every update)."""

    def __init__(self, store: Store, configured: Iterable[int]) -> None:
        self.store = store
        self.configured = frozenset(configured)
        self._paired: frozenset[int] = frozenset()
        self._paired_loaded_at = float("-inf")

    async def is_owner(self, user_id: int | None) -> bool:
        if user_id is None:
            return False
        if user_id in self.configured:
            return True
        return user_id in await self._paired_ids()

    async def pair(
        self, user_id: int, display_name: str, code: str, verifier: CodeVerifier
    ) -> bool:
        """Make the account an owner if the code is good; False if it already was one."""
        if await self.is_owner(user_id):
            return False
        # One transaction: an outage cannot spend a good code without pairing the account.
        async with self.store.write() as conn:
            refusal = await verifier.check(conn, user_id, code, purpose="pair")
            if refusal is None:
                await conn.execute(
                    insert(owners).values(
                        user_id=user_id, display_name=display_name[:200], paired_at=now()
                    )
                )
        if refusal is not None:
            raise refusal
        self._paired_loaded_at = float("-inf")
        return True

    async def note_unknown(
        self, user_id: int, display_name: str, *, refusable: bool = True
    ) -> bool:
        """Record an update from a stranger; True when they are due their (hourly) refusal.

        Only a ``refusable`` update (one in a private chat, where the refusal is sent) uses up
        the hour's refusal: a stranger first seen in a group still hears it when they write in
        private.
        """
        moment = now()
        existing = unknown_senders.c
        refused_before = existing.last_refused_at
        refusal_due = refused_before.is_(None) | (refused_before < moment - REFUSAL_INTERVAL)
        async with self.store.write() as conn:
            # One statement, so two first updates from a stranger at once (webhook deliveries
            # run in parallel) cannot both insert or both be refused.
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            statement = (
                dialect.insert(unknown_senders)
                .values(
                    user_id=user_id,
                    display_name=display_name[:200],
                    first_seen_at=moment,
                    last_seen_at=moment,
                    updates_seen=1,
                    last_refused_at=moment if refusable else None,
                )
                .on_conflict_do_update(
                    index_elements=["user_id"],
                    set_={
                        "last_seen_at": moment,
                        "display_name": display_name[:200],
                        "updates_seen": existing.updates_seen + 1,
                        "last_refused_at": case(
                            (literal(refusable) & refusal_due, moment), else_=refused_before
                        ),
                    },
                )
                .returning(unknown_senders.c.last_refused_at)
            )
            refused_at = (await conn.execute(statement)).scalar_one()
        return refusable and refused_at == moment

    async def names(self) -> dict[int, str]:
        """The paired accounts' names as they were when they paired (owners from
        AEGIS_OWNER_IDS have none on record)."""
        async with self.store.read() as conn:
            rows = await conn.execute(select(owners.c.user_id, owners.c.display_name))
        return {row.user_id: row.display_name for row in rows if row.display_name}

    async def _paired_ids(self) -> frozenset[int]:
        if time.monotonic() - self._paired_loaded_at > PAIRED_CACHE_SECONDS:
            async with self.store.read() as conn:
                rows = await conn.execute(select(owners.c.user_id))
            self._paired = frozenset(row.user_id for row in rows)
            self._paired_loaded_at = time.monotonic()
        return self._paired
