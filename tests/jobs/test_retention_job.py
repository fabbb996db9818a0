"""The hourly retention job through a real worker: a chat's old history is pruned and the chat
goes on as before."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select, update

from bot.store.tables import outbox, runs, updates
from bot.timeutil import now
from tests.helpers.stack import eventually


async def count(stack, table) -> int:
    async with stack.store.read() as conn:
        return (await conn.execute(select(func.count()).select_from(table))).scalar_one()


async def test_the_job_prunes_an_old_history_and_the_chat_goes_on(stack):
    for _ in range(3):
        [pong] = await stack.ask("/ping")
        assert pong["text"].startswith("pong")
    await eventually(lambda: _all_sent(stack))
    await eventually(lambda: _pings_recorded(stack, 3))  # the worker writes job runs in batches
    long_ago = now() - timedelta(days=40)
    async with stack.store.write() as conn:
        await conn.execute(update(outbox).values(created_at=long_ago))
        await conn.execute(update(updates).values(received_at=long_ago, retry_at=long_ago))
        await conn.execute(update(runs).values(started_at=long_ago))
    old = [await count(stack, table) for table in (outbox, updates)]
    async with stack.store.read() as conn:  # a job run recorded after the ageing is young
        aged = select(func.count()).where(runs.c.started_at < now() - timedelta(days=30))
        old.append((await conn.execute(aged)).scalar_one())
    assert all(old)

    await stack.services.platform.interactions.enqueue("prune_old_rows", "retention")

    async def pruned():
        async with stack.store.read() as conn:
            query = select(runs.c.summary).where(runs.c.job == "prune_old_rows")
            return (await conn.execute(query)).scalar()

    summary = await eventually(pruned, timeout=20)
    assert summary["outbox_pruned"] == old[0] and summary["updates_pruned"] == old[1]
    assert summary["job_runs_pruned"] == old[2] and summary["finished"] is True
    assert (await count(stack, outbox), await count(stack, updates)) == (0, 0)
    [pong] = await stack.ask("/ping")
    assert pong["text"].startswith("pong")


async def _all_sent(stack) -> bool:
    async with stack.store.read() as conn:
        statuses = (await conn.execute(select(outbox.c.status))).scalars().all()
    return bool(statuses) and set(statuses) == {"sent"}


async def _pings_recorded(stack, at_least: int) -> bool:
    async with stack.store.read() as conn:
        query = select(func.count()).where(runs.c.job == "ping")
        return (await conn.execute(query)).scalar_one() >= at_least
