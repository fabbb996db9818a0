"""Two clocks on one database (two machines, or a second ``aegis clock`` the data dir lock could
not see), on SQLite and Postgres: one works and the other stands by, taking over when the first
stops or is killed; every schedule, monitor slot and process watch look that falls due is
enqueued once, never twice."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

from sqlalchemy import update

from aegis.clock import LEASE, STANDBY, run_clock
from bot.chat.callbacks import CallbackSigner
from bot.chat.outbox import Outbox
from bot.monitors.incidents import Incidents
from bot.monitors.monitor import MonitorKind, MonitorSpec
from bot.monitors.monitors import Monitors
from bot.monitors.specs import process_watch
from bot.store.tables import schedules
from bot.timeutil import now
from bot.upkeep.heartbeats import Heartbeats
from bot.upkeep.leases import Leases
from bot.upkeep.schedules import BUILTIN_SCHEDULES
from tests.helpers.stack import eventually

RUN_FOR = 3.0  # seconds: every sweep and slot is due once in it, none twice


async def test_two_clocks_on_one_database_enqueue_each_due_thing_once(store):
    monitors = Monitors(store, Incidents(store, Outbox(store), CallbackSigner(b"k" * 32)))
    for number in range(20):
        await monitors.watch(MonitorSpec(f"m{number}", MonitorKind.TCP, f"h{number}:80"))
    spec = process_watch({"done": "true", "deadline": "1h"})
    watch = await monitors.processes.start(spec, agent="a", run_id=1, chat_id=1)
    enqueued: list[tuple] = []

    async def enqueue(actor, *args):
        enqueued.append((actor, *args))

    stop = asyncio.Event()
    # One process, one name: the lease cannot tell these two apart and both tick, so the
    # claims alone must keep each due thing to one enqueue (the moment of a takeover).
    clocks = [
        asyncio.create_task(run_clock(store, enqueue, stop, None, monitors)) for _ in range(2)
    ]
    await asyncio.sleep(RUN_FOR)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*clocks), timeout=10)

    actors = Counter(entry[0] for entry in enqueued)
    at_once = [s.actor for s in BUILTIN_SCHEDULES if s.first_at_once]
    assert {actor: actors[actor] for actor in at_once} == dict.fromkeys(at_once, 1)
    slots = Counter(
        (check[0], check[1])
        for actor, *args in enqueued
        if actor == "check_monitors"
        for check in args[0]
    )
    # Every monitor's first slot, and any next one that fell in the window: each slot once.
    assert {monitor for monitor, _ in slots} == {m.id for m in await monitors.all()}
    assert set(slots.values()) == {1}
    assert [args for actor, *args in enqueued if actor == "check_process"] == [[watch.id]]


async def clock_kinds(store) -> list[str]:
    return sorted(process.kind for process in await Heartbeats(store).alive())


async def test_one_clock_works_the_other_stands_by_and_takes_over_when_it_stops(store):
    enqueued: list[str] = []

    async def enqueue(actor, *args):
        enqueued.append(actor)

    stops = [asyncio.Event(), asyncio.Event()]
    quick = {"lease_ttl": timedelta(seconds=2), "renew_every": timedelta(seconds=0.2)}
    first = asyncio.create_task(run_clock(store, enqueue, stops[0], **quick, name="clock@a:1"))
    await eventually(lambda: enqueued)  # the first clock took the lease and works
    second = asyncio.create_task(run_clock(store, enqueue, stops[1], **quick, name="clock@b:2"))
    await eventually(lambda: _kinds_are(store, ["clock", STANDBY]))
    assert (await Leases(store).get(LEASE)).holder == "clock@a:1"
    stops[0].set()
    await asyncio.wait_for(first, timeout=10)
    await eventually(lambda: _kinds_are(store, ["clock"]))
    assert (await Leases(store).get(LEASE)).holder == "clock@b:2"  # the second took over
    async with store.write() as conn:  # make a schedule due: the new holder enqueues it
        await conn.execute(update(schedules).values(next_run_at=now()))
    before = len(enqueued)
    await eventually(lambda: len(enqueued) > before)
    stops[1].set()
    await asyncio.wait_for(second, timeout=10)
    assert await Leases(store).get(LEASE) is None  # a clean stop lets go at once


async def test_a_clock_waits_out_the_lease_of_one_that_was_killed_then_works(store):
    """A holder killed outright renews no more: its lease runs out and the standby works."""
    await Leases(store).hold(LEASE, "clock@elsewhere:1", timedelta(seconds=1.5))
    enqueued: list[str] = []

    async def enqueue(actor, *args):
        enqueued.append(actor)

    stop = asyncio.Event()
    quick = {"lease_ttl": timedelta(seconds=2), "renew_every": timedelta(seconds=0.2)}
    clock = asyncio.create_task(run_clock(store, enqueue, stop, **quick))
    await asyncio.sleep(0.8)
    assert enqueued == [] and await clock_kinds(store) == [STANDBY]
    await eventually(lambda: enqueued, timeout=5)
    assert (await Leases(store).get(LEASE)).holder != "clock@elsewhere:1"
    stop.set()
    await asyncio.wait_for(clock, timeout=10)


async def _kinds_are(store, kinds: list[str]) -> bool:
    return await clock_kinds(store) == kinds
