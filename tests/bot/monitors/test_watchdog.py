"""The watchdog over aegis itself, on SQLite and Postgres, with an injected clock: a stopped
clock, three completed runs that changed nothing, a stuck outbox, a silent model and a stale
monitor each raise one card, and the card is closed once the finding is over."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import insert, select, update

from bot.chat.callbacks import CallbackSigner
from bot.chat.outbox import Outbox
from bot.chat.text import plain
from bot.monitors.incidents import Incidents
from bot.monitors.monitor import CheckResult, MonitorKind, MonitorSpec
from bot.monitors.monitors import Monitors
from bot.monitors.process_watch import Look, WatchStatus
from bot.monitors.specs import process_watch
from bot.monitors.watchdog import Watchdog
from bot.store.tables import agent_runs, model_calls, monitor_hours, outbox, schedules
from bot.timeutil import now
from bot.upkeep.schedules import BUILTIN_SCHEDULES, Schedules

CHAT = 4242


@pytest.fixture
async def watchdog(store):
    monitors = Monitors(store, Incidents(store, Outbox(store), CallbackSigner(b"k" * 32)))
    return Watchdog(monitors)


async def cards(store) -> list[str]:
    async with store.read() as conn:
        rows = (await conn.execute(select(outbox.c.parts).order_by(outbox.c.id))).scalars()
        return [plain(parts[0]) for parts in rows]


async def test_a_stopped_clock_raises_one_card_until_the_schedules_run_again(watchdog, store):
    await Schedules(store).seed(BUILTIN_SCHEDULES)
    assert (await watchdog.watch(CHAT))["findings"] == 0  # just seeded: nothing is late
    later = now() + timedelta(minutes=20)  # the outbox sweep runs every 30 s: 20 min is late
    await watchdog.watch(CHAT, later)
    await watchdog.watch(CHAT, later + timedelta(minutes=1))
    # (Its own card, never delivered here, is a finding too by then: a stuck outbox.)
    [card] = [card for card in await cards(store) if "Schedules" in card]
    assert card.startswith("⚠️ Schedules have not run on time")
    assert "outbox-sweep" in card and "Is aegis clock running?" in card
    async with store.write() as conn:  # the clock is back: every schedule moved on
        await conn.execute(update(schedules).values(next_run_at=later + timedelta(seconds=30)))
    assert (await watchdog.watch(CHAT, later + timedelta(minutes=2)))["incidents_closed"] == 1
    assert (await cards(store))[-1].startswith("✅ Schedules have not run on time: over")


async def add_run(store, agent: str, status: str, effects: dict) -> None:
    moment = now()
    async with store.write() as conn:
        await conn.execute(
            insert(agent_runs).values(
                agent=agent,
                request="look",
                origin="schedule",
                chat_id=CHAT,
                status=status,
                step="end",
                state={},
                effects=effects,
                deadline_seconds=60,
                attempts=1,
                cancel_requested=False,
                created_at=moment,
                finished_at=moment,
            )
        )


async def test_three_completed_runs_with_zero_effect_raise_a_card(watchdog, store):
    await add_run(store, "scout", "completed", {"messages_sent": 1})
    await add_run(store, "scout", "completed", {})
    await add_run(store, "scout", "completed", {"tool_calls": 0})
    assert (await watchdog.watch(CHAT))["findings"] == 0  # two in a row, not three
    await add_run(store, "scout", "completed", {"cards": 0, "tool_calls": 0})
    await add_run(store, "other", "failed", {})
    assert (await watchdog.watch(CHAT))["incidents_opened"] == 1
    [card] = await cards(store)
    assert card.startswith("⚠️ scout completed 3 runs in a row that changed nothing")


async def test_a_stuck_outbox_and_a_silent_model_raise_cards(watchdog, store):
    await Outbox(store).put(CHAT, "hello")  # never delivered: no worker here
    async with store.write() as conn:
        await conn.execute(
            insert(model_calls),
            [
                {
                    "agent": "scout",
                    "provider": "https://llm.test",
                    "model": "m1",
                    "status": "http 500",
                    "latency_ms": 10,
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                    "at": now(),
                }
            ],
        )
    summary = await watchdog.watch(CHAT, now() + timedelta(minutes=16))
    assert summary["incidents_opened"] == 2
    titles = sorted(card.splitlines()[0] for card in (await cards(store))[1:])
    assert titles == [
        "⚠️ Messages are stuck in the outbox",
        "⚠️ Model m1 has not answered for a day",
    ]


async def test_a_stale_monitor_raises_a_card(watchdog, store):
    monitor, _ = await watchdog.monitors.watch(MonitorSpec("db", MonitorKind.TCP, "db.test:5432"))
    assert (await watchdog.watch(CHAT, monitor.created_at + timedelta(minutes=2)))["findings"] == 0
    summary = await watchdog.watch(CHAT, monitor.created_at + timedelta(minutes=4))
    assert summary["incidents_opened"] == 1
    [card] = await cards(store)
    assert card.startswith("⚠️ Monitor db is stale")


async def test_many_stale_monitors_raise_one_card_until_none_is_stale(watchdog, store):
    """A stopped worker makes every monitor stale at once: one card, not one each."""
    monitors = watchdog.monitors
    made = [
        (await monitors.watch(MonitorSpec(f"m{n:02}", MonitorKind.TCP, f"h{n}.test:80")))[0]
        for n in range(12)
    ]
    later = made[-1].created_at + timedelta(minutes=4)
    summary = await watchdog.watch(CHAT, later)
    assert summary["findings"] == 1 and summary["incidents_opened"] == 1
    [card] = await cards(store)
    assert card.splitlines()[0] == "⚠️ 12 monitors are stale"
    assert "m00, m01" in card and "m09 and 2 more" in card and "m10" not in card
    assert (await watchdog.watch(CHAT, later + timedelta(minutes=1)))["incidents_opened"] == 0
    for monitor in made:
        await monitors.record(monitor.id, CheckResult(True, 1.0), chat_id=None, moment=later)
    assert (await watchdog.watch(CHAT, later + timedelta(minutes=2)))["incidents_closed"] == 1


async def test_stale_picks_by_each_monitors_own_interval_and_skips_paused_ones(watchdog):
    monitors = watchdog.monitors
    made = {}
    for name, every in (("fast", 10), ("slow", 600), ("checked", 10), ("paused", 10)):
        spec = MonitorSpec(name, MonitorKind.TCP, f"{name}.test:80", interval_seconds=every)
        made[name], _ = await monitors.watch(spec)
    start = made["fast"].created_at
    await monitors.record(made["checked"].id, CheckResult(True, 1.0), chat_id=None, moment=start)
    await monitors.pause(made["paused"].id, True)
    # Three of 10 s and the grace (what a restarted worker may have held back) are 75 s.
    assert await monitors.stale(start + timedelta(seconds=74)) == []
    later = start + timedelta(seconds=80)  # three of 10 s are over, not three of 600 s
    await monitors.record(made["checked"].id, CheckResult(True, 1.0), chat_id=None, moment=later)
    assert [monitor.name for monitor in await monitors.stale(later)] == ["fast"]
    assert {m.name for m in await monitors.stale(start + timedelta(minutes=31))} == {
        "fast",
        "slow",
        "checked",
    }


async def test_each_pass_forgets_uptime_older_than_a_week_and_watches_over_for_a_month(
    watchdog, store
):
    monitor, _ = await watchdog.monitors.watch(MonitorSpec("db", MonitorKind.TCP, "db.test:5432"))
    moment = now()
    hour = moment.replace(minute=0, second=0, microsecond=0)
    kept = [hour - timedelta(hours=h) for h in (0, 24 * 7, 24 * 8)]
    forgotten = [hour - timedelta(hours=24 * 8 + h) for h in (1, 2, 200)]
    async with store.write() as conn:
        await conn.execute(
            insert(monitor_hours),
            [
                {"monitor_id": monitor.id, "hour": at, "checks": 60, "ups": 60}
                for at in kept + forgotten
            ],
        )
    processes = watchdog.monitors.processes
    spec = process_watch({"done": "true", "deadline": "1h"})
    old = await processes.start(
        spec, agent="a", run_id=1, chat_id=CHAT, moment=moment - timedelta(days=40)
    )
    await processes.record(old.id, Look(WatchStatus.PASSED), moment - timedelta(days=31))
    recent = await processes.start(spec, agent="a", run_id=2, chat_id=CHAT, moment=moment)
    summary = await watchdog.watch(CHAT, moment)
    assert (summary["uptime_hours_pruned"], summary["process_watches_pruned"]) == (3, 1)
    async with store.read() as conn:
        left = (await conn.execute(select(monitor_hours.c.hour))).scalars().all()
    assert sorted(left) == sorted(kept)
    assert await processes.get(old.id) is None and await processes.get(recent.id) is not None
    again = await watchdog.watch(CHAT, moment)
    assert (again["uptime_hours_pruned"], again["process_watches_pruned"]) == (0, 0)
