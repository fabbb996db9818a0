"""The live-grant lookup: SQLite's fast path (Store.read_now) says exactly what the
SQLAlchemy condition says, at every moment around a grant's expiry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from bot.actions.grants import Approvals
from bot.errors import StoreError
from bot.store.database import Store, sqlite_time
from bot.store.fast_paths import LIVE_GRANT, live_grant_where
from bot.store.tables import grants
from bot.timeutil import now


async def grant(store: Store, interaction_id: int, args_hash: str, moment) -> None:
    async with store.write() as conn:
        await Approvals.grant(
            conn,
            interaction_id=interaction_id,
            agent="scribe",
            tool="notes.write",
            args_hash=args_hash,
            granted_by=1,
            moment=moment,
        )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_fast_lookup_agrees_with_the_sqlalchemy_condition(store):
    granted = now() - timedelta(minutes=5)
    await grant(store, 1, "live", granted)
    await grant(store, 2, "used", granted)
    async with store.write() as conn:
        await conn.execute(update(grants).where(grants.c.args_hash == "used").values(used_at=now()))
    expiry = granted + timedelta(minutes=15)
    steps = (-timedelta(seconds=1), -timedelta(microseconds=1), timedelta(0))
    moments = [expiry + step for step in steps]
    moments += [expiry + timedelta(microseconds=1), expiry + timedelta(days=1)]
    for moment in moments:
        for args_hash in ("live", "used", "never"):
            fast = bool(store.read_now(LIVE_GRANT.sql, (args_hash, sqlite_time(moment))))
            query = select(grants.c.id).where(*live_grant_where(args_hash, moment))
            async with store.read() as conn:
                slow = (await conn.execute(query)).first() is not None
            assert fast == slow, (args_hash, moment - expiry)
    assert await Approvals(store).has_live_grant("live")
    assert not await Approvals(store).has_live_grant("used")


async def test_has_live_grant_on_either_database(store):
    await grant(store, 1, "fresh", now())
    await grant(store, 2, "stale", now() - timedelta(hours=1))
    approvals = Approvals(store)
    assert await approvals.has_live_grant("fresh")
    assert not await approvals.has_live_grant("stale")
    assert not await approvals.has_live_grant("never")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_fast_lookup_reads_only(store):
    with pytest.raises(StoreError, match="refused"):
        store.read_now("DELETE FROM grants")
