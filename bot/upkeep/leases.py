"""Leases: a role that one process plays at a time across every machine sharing the database.

The clock is the one that needs it: the data dir's file lock (aegis/instance.py) keeps a second
clock off one machine, but two machines on one Postgres would both enqueue what falls due. The
holder renews its lease well before it runs out; a clock that finds the lease held by another
stands by and takes it over once the holder has let it run out (stopped, or killed: a killed
holder renews no more). Every schedule is still claimed with a compare-and-set
(bot/upkeep/schedules.py), so even the moment of a takeover enqueues nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, insert, select, update

from bot.store.database import Store, serialize_on
from bot.store.tables import leases
from bot.timeutil import now


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    expires_at: datetime


class Leases:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def hold(self, name: str, holder: str, ttl: timedelta) -> Lease:
        """Take the lease if it is free or has run out, or renew it if ``holder`` has it.
        Returns the lease as it now is: held by ``holder``, or by whoever else has it."""
        moment = now()
        async with self.store.write() as conn:
            await serialize_on(conn, f"lease:{name}")
            row = (await conn.execute(select(leases).where(leases.c.name == name))).first()
            mine = Lease(name, holder, moment + ttl)
            if row is None:
                await conn.execute(insert(leases).values(**mine.__dict__))
                return mine
            if row.holder != holder and row.expires_at > moment:
                return Lease(name, row.holder, row.expires_at)
            await conn.execute(
                update(leases)
                .where(leases.c.name == name)
                .values(holder=holder, expires_at=mine.expires_at)
            )
            return mine

    async def release(self, name: str, holder: str) -> None:
        """Let go at once (a clean stop), so a standby takes over without waiting it out."""
        async with self.store.write() as conn:
            await conn.execute(
                delete(leases).where(leases.c.name == name, leases.c.holder == holder)
            )

    async def get(self, name: str) -> Lease | None:
        async with self.store.read() as conn:
            row = (await conn.execute(select(leases).where(leases.c.name == name))).first()
        return Lease(row.name, row.holder, row.expires_at) if row else None
