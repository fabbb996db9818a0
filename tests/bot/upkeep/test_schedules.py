"""Schedules: the clock enqueues what is due, once, never a burst after downtime."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from bot.errors import BrokerError
from bot.store.tables import schedules
from bot.timeutil import now
from bot.upkeep.schedules import Schedule, Schedules

SWEEP = Schedule("sweep", "sweep_outbox", 30)


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, str]] = []
        self.fail = fail

    async def __call__(self, actor: str, name: str) -> None:
        if self.fail:
            raise BrokerError("Redis is unavailable")
        self.sent.append((actor, name))


async def next_run(store):
    async with store.read() as conn:
        return (await conn.execute(select(schedules.c.next_run_at))).scalar_one()


async def test_due_schedule_is_enqueued_once_then_waits_its_interval(store):
    clock = Schedules(store)
    await clock.seed([SWEEP])
    enqueue = Recorder()
    assert await clock.enqueue_due(enqueue) == ["sweep"]
    assert await clock.enqueue_due(enqueue) == []
    assert enqueue.sent == [("sweep_outbox", "sweep")]
    assert timedelta(seconds=29) < await next_run(store) - now() <= timedelta(seconds=30)


async def test_after_downtime_a_missed_schedule_runs_once_not_a_burst(store):
    clock = Schedules(store)
    await clock.seed([SWEEP])
    async with store.write() as conn:
        await conn.execute(update(schedules).values(next_run_at=now() - timedelta(hours=3)))
    enqueue = Recorder()
    await clock.enqueue_due(enqueue)
    await clock.enqueue_due(enqueue)
    assert len(enqueue.sent) == 1
    assert await next_run(store) > now()


async def test_a_broker_outage_leaves_the_schedule_due(store):
    clock = Schedules(store)
    await clock.seed([SWEEP])
    due_at = await next_run(store)
    with pytest.raises(BrokerError):
        await clock.enqueue_due(Recorder(fail=True))
    assert await next_run(store) == due_at
    assert await clock.enqueue_due(Recorder()) == ["sweep"]


async def test_seeding_again_keeps_the_on_off_switch_and_off_means_off(store):
    clock = Schedules(store)
    await clock.seed([SWEEP])
    async with store.write() as conn:
        await conn.execute(update(schedules).values(enabled=False))
    await clock.seed([SWEEP])
    async with store.read() as conn:
        assert (await conn.execute(select(schedules.c.enabled))).scalar_one() is False
    assert await clock.enqueue_due(Recorder()) == []
