"""The clock's turn over its parts (bot/upkeep/due.py), on SQLite and Postgres: one statement
when nothing is due, each part's work once it is, a reminder whose card never came claimed
again a minute later, and an outage in one part leaving the others to work."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest
from sqlalchemy import event, update

from bot.chat.callbacks import CallbackSigner
from bot.chat.outbox import Outbox
from bot.errors import BrokerError
from bot.monitors.incidents import Incidents
from bot.monitors.monitor import MonitorKind, MonitorSpec
from bot.monitors.monitors import Monitors
from bot.reminders.reminders import CLAIM_AGAIN_AFTER, Reminders
from bot.store.tables import reminders as reminders_table
from bot.timeutil import now
from bot.upkeep.due import Due, soonest, turn
from bot.upkeep.schedules import BUILTIN_SCHEDULES, Schedules

CHAT = 4242


@pytest.fixture
async def parts(store):
    schedules = Schedules(store, None)
    await schedules.seed(BUILTIN_SCHEDULES)
    reminders = Reminders(store)
    monitors = Monitors(store, Incidents(store, Outbox(store), CallbackSigner(b"k" * 32)))
    return schedules, reminders, monitors


class Enqueued(list):
    async def __call__(self, actor, *args):
        self.append((actor, *args))


@contextlib.contextmanager
def statements(store):
    """The SQL statements run on either engine meanwhile."""
    seen: list[str] = []

    def count(conn, cursor, statement, *args):
        seen.append(statement)

    engines = {store.read_engine.sync_engine, store.write_engine.sync_engine}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", count)


def clock_parts(schedules, reminders, monitors) -> list[Due]:
    return [schedules.due(), reminders.due(), monitors.due(), monitors.processes.due()]


async def test_a_turn_with_nothing_due_reads_one_statement_and_sleeps_until_the_soonest(
    store, parts
):
    enqueued = Enqueued()
    await turn(store, clock_parts(*parts), enqueued, ceiling=1.0)  # the seeded schedules run
    started = len(enqueued)
    assert started == sum(schedule.first_at_once for schedule in BUILTIN_SCHEDULES)
    with statements(store) as seen:
        wait = await turn(store, clock_parts(*parts), enqueued, ceiling=3600.0)
    assert [s.split()[0].upper() for s in seen if not s.startswith(("BEGIN", "SAVEPOINT"))] == [
        "SELECT"
    ]
    assert len(enqueued) == started  # nothing twice
    # It sleeps until the soonest built-in schedule, not the ceiling.
    found = await soonest(store, [parts[0].due()])
    assert abs(wait - (found[0] - now()).total_seconds()) < 1.0
    assert 0 < wait < 3600


async def test_each_part_works_once_it_is_due_and_a_monitor_a_second_ahead(store, parts):
    schedules, reminders, monitors = parts
    all_parts = clock_parts(*parts)
    enqueued = Enqueued()
    await turn(store, all_parts, enqueued, ceiling=1.0)
    enqueued.clear()
    reminder = await reminders.add(CHAT, "call the bank", now() + timedelta(minutes=5))
    assert await turn(store, all_parts, enqueued, ceiling=1.0) == 1.0
    assert enqueued == []  # five minutes ahead: only read
    async with store.write() as conn:
        await conn.execute(
            update(reminders_table)
            .where(reminders_table.c.id == reminder.id)
            .values(due_at=now() - timedelta(seconds=1))
        )
    monitor, _ = await monitors.watch(MonitorSpec("db", MonitorKind.TCP, "db.test:5432"))
    await turn(store, all_parts, enqueued, ceiling=1.0)
    assert [actor for actor, *_ in enqueued] == ["remind", "check_monitors"]
    assert enqueued[0][1] == reminder.id and enqueued[1][1][0][0] == monitor.id


async def test_a_claimed_reminder_whose_card_never_came_is_claimed_again_a_minute_on(store, parts):
    _, reminders, _ = parts
    enqueued = Enqueued()
    reminder = await reminders.add(CHAT, "water the plants", now() - timedelta(seconds=1))
    await turn(store, [reminders.due()], enqueued, ceiling=1.0)
    assert enqueued == [("remind", reminder.id)]  # claimed; its message is lost
    wait = await turn(store, [reminders.due()], enqueued, ceiling=3600.0)
    assert len(enqueued) == 1
    assert CLAIM_AGAIN_AFTER.total_seconds() - 5 < wait <= CLAIM_AGAIN_AFTER.total_seconds()
    async with store.write() as conn:  # a minute passes
        await conn.execute(
            update(reminders_table)
            .where(reminders_table.c.id == reminder.id)
            .values(claimed_at=now() - CLAIM_AGAIN_AFTER - timedelta(seconds=1))
        )
    await turn(store, [reminders.due()], enqueued, ceiling=1.0)
    assert enqueued == [("remind", reminder.id)] * 2


async def test_an_outage_in_one_part_skips_it_and_the_others_work(store, parts):
    schedules, reminders, _ = parts
    reminder = await reminders.add(CHAT, "stretch", now() - timedelta(seconds=1))
    enqueued = Enqueued()

    async def refusing(actor, *args):
        if actor != "remind":
            raise BrokerError("Redis is unavailable: ConnectionError")
        await enqueued(actor, *args)

    wait = await turn(store, [schedules.due(), reminders.due()], refusing, ceiling=1.0)
    assert enqueued == [("remind", reminder.id)]
    # The schedules are still due (given back), but the clock tries them again a turn later
    # rather than at once: an outage does not make it spin.
    assert wait == 1.0
    [found] = await soonest(store, [schedules.due()])
    assert found <= now()
