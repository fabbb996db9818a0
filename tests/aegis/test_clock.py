"""Two clocks by mistake on one database (two machines, or a second ``aegis clock`` the data dir
lock could not see), on SQLite and Postgres: every schedule, monitor slot and process watch
look that falls due is enqueued once, never twice."""

from __future__ import annotations

import asyncio
from collections import Counter

from aegis.clock import run_clock
from bot.chat.callbacks import CallbackSigner
from bot.chat.outbox import Outbox
from bot.monitors.incidents import Incidents
from bot.monitors.monitor import MonitorKind, MonitorSpec
from bot.monitors.monitors import Monitors
from bot.monitors.specs import process_watch
from bot.upkeep.schedules import BUILTIN_SCHEDULES

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
