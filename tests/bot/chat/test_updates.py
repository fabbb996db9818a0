"""The update log: duplicates dropped, outages retried with backoff and never given up early."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from bot.chat.updates import GIVE_UP_AFTER, LONGEST_BACKOFF, UpdateLog
from bot.store.tables import updates
from bot.timeutil import now


def message(update_id: int) -> dict:
    return {"update_id": update_id, "message": {"from": {"id": 7}, "text": "hi"}}


async def retry_at(store, update_id):
    async with store.read() as conn:
        query = select(updates.c.retry_at).where(updates.c.update_id == update_id)
        return (await conn.execute(query)).scalar_one()


async def test_a_batch_keeps_only_new_updates_in_order(store):
    log = UpdateLog(store, bot_id=1)
    first = await log.record_many([message(1), message(2)])
    assert [p["update_id"] for p in first] == [1, 2]
    fresh = await log.record_many([message(2), message(3), message(3), message(1)])
    assert [p["update_id"] for p in fresh] == [3]
    other_bot = UpdateLog(store, bot_id=2)
    assert await other_bot.record(message(1)) is True  # update ids are per bot


async def test_an_outage_backs_off_and_never_gives_up_within_a_day(store):
    log = UpdateLog(store, bot_id=1, first_retry=timedelta(seconds=1))
    await log.record(message(1))
    gaps = []
    for attempt in range(1, 30):
        before = now()
        await log.mark_unhandled(1, "Redis is unavailable", attempt)
        gaps.append(round((await retry_at(store, 1) - before).total_seconds(), 1))
    assert gaps == sorted(gaps)  # never sooner than the attempt before
    assert max(gaps) <= LONGEST_BACKOFF.total_seconds() + 1
    assert gaps[0] < 2
    [row] = [r async for r in _rows(store)]
    assert row.status == "pending" and row.attempts == 29


async def test_pending_lists_what_is_due_and_says_when_it_is_stale(store):
    log = UpdateLog(store, bot_id=1, first_retry=timedelta(seconds=60))
    await log.record_many([message(1), message(2)])
    assert await log.pending() == []  # not due yet
    async with store.write() as conn:
        await conn.execute(
            update(updates)
            .where(updates.c.update_id == 2)
            .values(retry_at=now(), received_at=now() - GIVE_UP_AFTER - timedelta(minutes=1))
        )
    [due] = await log.pending()
    assert due.update_id == 2 and due.is_stale
    await log.mark_failed(2, "gave up after a day")
    assert await log.pending() == []


async def _rows(store):
    async with store.read() as conn:
        for row in (await conn.execute(select(updates))).all():
            yield row
