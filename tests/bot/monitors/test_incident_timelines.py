"""Incidents played as timelines with an injected clock, on SQLite and Postgres: the monitor's
verdicts, its one card, the reminders measured in time, the recovery edited in place, restarts,
flapping and racing checks. Each check is ``record`` at a chosen moment; the outbox rows are
what the owner would be sent (nothing here delivers them)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from bot.chat.callbacks import CallbackSigner
from bot.chat.outbox import Outbox
from bot.chat.outgoing import OutboxKind
from bot.chat.text import plain
from bot.monitors.incident import Tap
from bot.monitors.incidents import Incidents
from bot.monitors.monitor import CheckResult, Counters, MonitorKind, MonitorSpec, MonitorState
from bot.monitors.monitors import Monitors
from bot.store.tables import incidents, monitor_hours, outbox
from bot.store.tables import monitors as monitors_table
from bot.timeutil import now
from bot.upkeep.due import turn

CHAT = 4242
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
OK = CheckResult(True, 12.0, detail="200 in 12 ms")
FAIL = CheckResult.down("503 Service Unavailable", 40.0)
SPEC = MonitorSpec("site", MonitorKind.HTTP, "https://site.test/")


@pytest.fixture
async def monitors(store):
    return Monitors(store, Incidents(store, Outbox(store), CallbackSigner(b"k" * 32)))


class Timeline:
    """One monitor checked every ``step`` from T0 on."""

    def __init__(self, monitors: Monitors, monitor_id: int, step=timedelta(minutes=1)):
        self.monitors, self.id, self.step, self.at = monitors, monitor_id, step, T0
        self.queued_at: list[datetime] = []  # the moment of the check that queued each message

    async def check(self, result: CheckResult, times: int = 1) -> None:
        for _ in range(times):
            await self.monitors.record(self.id, result, chat_id=CHAT, moment=self.at)
            count = len(await sent(self.monitors.store))
            self.queued_at += [self.at] * (count - len(self.queued_at))
            self.at += self.step


async def timeline(monitors: Monitors, spec: MonitorSpec = SPEC, **step) -> Timeline:
    monitor, _ = await monitors.watch(spec)
    return Timeline(monitors, monitor.id, **step)


async def sent(store) -> list:
    async with store.read() as conn:
        return (await conn.execute(select(outbox).order_by(outbox.c.id))).all()


def cards(rows) -> list:
    return [row for row in rows if row.kind == OutboxKind.TEXT and row.reply_to_outbox is None]


def labels(row) -> list[str]:
    markup = row.reply_markup or {"inline_keyboard": []}
    return [button["text"] for line in markup["inline_keyboard"] for button in line]


async def test_three_failures_send_one_card_and_a_steady_down_sends_no_more_before_4h(
    monitors, store
):
    line = await timeline(monitors)
    await line.check(OK)
    await line.check(FAIL, 2)
    assert await sent(store) == []  # a new monitor that is up says nothing; two failures neither
    await line.check(FAIL)
    [card] = await sent(store)
    assert plain(card.parts[0]).startswith("🔴 site is down")
    assert "503 Service Unavailable" in plain(card.parts[0])
    assert labels(card) == ["Ack", "Silence 1h", "Silence 1d"]
    await line.check(FAIL, 60 * 4 - 2)  # up to just before +4 h
    assert len(await sent(store)) == 1


async def test_a_steady_down_reminds_every_4h_by_the_clock_not_by_checks(monitors, store):
    line = await timeline(monitors)
    await line.check(FAIL, 3)
    opened = line.at - line.step
    await line.check(FAIL, 60 * 8 + 5)  # a little past +8 h
    rows = await sent(store)
    reminders = [row for row in rows if row.reply_to_outbox is not None]
    assert [plain(r.parts[0]).split(",")[0] for r in reminders] == ["🔴 Still down: site"] * 2
    first, second = (line.queued_at[rows.index(row)] for row in reminders)
    # ± one tick of the clock (a check a minute): at +4 h and +8 h from the opening.
    assert timedelta(hours=4) <= first - opened < timedelta(hours=4, minutes=1)
    assert timedelta(hours=8) <= second - opened < timedelta(hours=8, minutes=1)


async def test_recovery_after_two_successes_edits_the_card_once(monitors, store):
    line = await timeline(monitors)
    await line.check(FAIL, 3)  # down from the third, at 09:02
    await line.check(FAIL, 11)
    await line.check(OK)
    assert len(await sent(store)) == 1  # one success is not a recovery; the second, at 09:15, is
    await line.check(OK, 30)
    rows = await sent(store)
    [card, edit] = rows
    assert edit.kind == OutboxKind.EDIT and edit.edit_of == card.id
    assert plain(edit.parts[0]).startswith("🟢 site recovered after 13 min\n")
    assert edit.reply_markup is None  # its buttons are gone with the incident


async def test_a_steady_up_for_24_hours_sends_nothing(monitors, store):
    line = await timeline(monitors)
    await line.check(OK, 24 * 60)
    assert await sent(store) == []
    [monitor] = await monitors.all()
    assert monitor.state is MonitorState.UP
    uptime = (await monitors.uptimes(line.at))[monitor.id]
    assert (uptime.day, uptime.week) == (1.0, 1.0)


async def test_a_restart_owes_exactly_one_still_down_then_the_original_schedule(monitors, store):
    line = await timeline(monitors)
    await line.check(FAIL, 3)
    opened = line.at - line.step
    await line.check(FAIL, 90)  # 1.5 h into the incident: aegis restarts
    assert await monitors.incidents.after_restart() == 1
    await line.check(FAIL, 5)
    notices = [row for row in await sent(store) if row.reply_to_outbox is not None]
    assert len(notices) == 1 and "aegis restarted meanwhile" in plain(notices[0].parts[0])
    await line.check(FAIL, 60 * 3)  # to 4.5 h: the reminder came at +4 h, not restart + 4 h
    rows = await sent(store)
    later = [row for row in rows if row.reply_to_outbox is not None][1:]
    assert len(later) == 1
    reminded = line.queued_at[rows.index(later[0])]
    assert timedelta(hours=4) <= reminded - opened < timedelta(hours=4, minutes=1)


async def test_ack_stops_reminders_and_a_second_tap_gets_an_honest_answer(monitors, store):
    line = await timeline(monitors)
    await line.check(FAIL, 3)
    [incident] = await monitors.incidents.open_ones()
    assert await monitors.incidents.ack(incident.id, "Ada") == (
        "Acknowledged: no more reminders for this incident."
    )
    assert (await monitors.incidents.ack(incident.id, "Ada")).startswith("Already acknowledged")
    assert (await monitors.incidents.silence(incident.id, Tap.SILENCE_HOUR)).startswith(
        "Already acknowledged"
    )
    await line.check(FAIL, 60 * 9)
    rows = await sent(store)
    assert [row.kind for row in rows] == [OutboxKind.TEXT, OutboxKind.EDIT]  # the card, the ack
    assert "Acknowledged by Ada" in plain(rows[1].parts[0])
    assert labels(rows[1]) == []  # nothing left to tap: no agent handles monitors here


async def test_twenty_changes_in_ten_minutes_make_one_flapping_card_and_at_most_two_others(
    monitors, store
):
    line = await timeline(monitors, step=timedelta(seconds=20))
    await line.check(OK)
    await line.check(FAIL, 3)  # down: the card
    await line.check(OK, 2)  # recovered: the edit
    for _ in range(8):  # sixteen more changes, a check every 20 s
        await line.check(FAIL)
        await line.check(OK)
    rows = await sent(store)
    flapping = [row for row in rows if "is flapping" in plain(row.parts[0])]
    assert len(flapping) == 1 and labels(flapping[0]) == ["Ack"]
    assert len(rows) - len(flapping) <= 2
    await line.check(OK, 31 * 3)  # stable for half an hour: the flapping card says so
    edit = (await sent(store))[-1]
    assert edit.edit_of == flapping[0].id and plain(edit.parts[0]).startswith(
        "🟢 site: stable again, up"
    )


async def test_racing_checks_open_one_incident(monitors, store):
    line = await timeline(monitors)
    await line.check(FAIL, 2)
    await asyncio.gather(
        *(monitors.record(line.id, FAIL, chat_id=CHAT, moment=line.at) for _ in range(6))
    )
    async with store.read() as conn:
        opened = (await conn.execute(select(incidents))).all()
    assert len(opened) == 1
    assert len(cards(await sent(store))) == 1


async def test_after_downtime_each_monitor_is_checked_once_on_its_wall_clock_slot(monitors):
    for number in range(5):
        await monitors.watch(MonitorSpec(f"m{number}", MonitorKind.TCP, f"h{number}:80"))
    enqueued = []

    async def enqueue(actor, due):
        enqueued.append((actor, due))

    later = T0 + timedelta(days=400)  # far past every slot
    assert await monitors.enqueue_due(enqueue, later) == 5
    assert await monitors.enqueue_due(enqueue, later) == 0
    [(actor, due)] = enqueued  # one message for the tick's slots
    assert actor == "check_monitors"
    assert sorted(check[0] for check in due) == [m.id for m in await monitors.all()]
    # Each spec as its row's JSON text: the clock does not read it, the worker does.
    assert {json.loads(check[2])["name"] for check in due} == {f"m{number}" for number in range(5)}
    for monitor in await monitors.all():
        assert later < monitor.next_check_at <= later + monitor.spec.interval
        offset = (monitor.next_check_at - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()
        assert offset % 60 == (monitor.id * 7919) % 60  # anchored: its phase, not the check time


async def test_the_clock_claims_a_few_seconds_of_slots_at_once_once_the_first_is_near(monitors):
    """One message every few seconds, not one a second: the worker waits for each slot."""
    for number in range(3):
        await monitors.watch(MonitorSpec(f"m{number}", MonitorKind.TCP, f"h{number}:80"))
    enqueued = []

    async def enqueue(actor, due):
        enqueued.append(due)

    start = T0 + timedelta(days=400)
    await monitors.enqueue_due(enqueue, start)  # the first checks, at once
    slots = sorted(m.next_check_at for m in await monitors.all())  # :57, :58 and :59
    assert [s.second for s in slots] == [57, 58, 59]
    enqueued.clear()
    assert await monitors.enqueue_due(enqueue, slots[0] - timedelta(seconds=3)) == 0  # not near
    assert await monitors.enqueue_due(enqueue, slots[0] - timedelta(seconds=1)) == 3
    [due] = enqueued
    assert sorted(datetime.fromisoformat(check[1]) for check in due) == slots  # each its own
    assert await monitors.enqueue_due(enqueue, slots[0]) == 0  # claimed: never twice
    assert sorted(m.next_check_at for m in await monitors.all()) == [
        slot + timedelta(minutes=1) for slot in slots
    ]


async def test_the_clocks_turn_claims_what_is_near_then_sleeps_until_the_next(monitors):
    enqueued = []

    async def enqueue(actor, due):
        enqueued.append(due)

    parts = [monitors.due()]
    assert await turn(monitors.store, parts, enqueue, ceiling=1.0) == 1.0  # nothing watched
    await monitors.watch(MonitorSpec("db", MonitorKind.TCP, "db.test:5432"))  # due at once
    wait = await turn(monitors.store, parts, enqueue, ceiling=3600.0)
    [[claimed]] = enqueued
    [monitor] = await monitors.all()
    assert claimed[0] == monitor.id and monitor.next_check_at > datetime.fromisoformat(claimed[1])
    # It sleeps until the next slot is a second away (WAKE_AHEAD), not the ceiling.
    until = (monitor.next_check_at - timedelta(seconds=1) - now()).total_seconds()
    assert abs(wait - max(0.0, until)) < 0.5


async def test_monitors_shows_a_monitor_not_checked_for_three_intervals_as_stale(monitors):
    from bot.chat.views.monitors import monitors_view

    line = await timeline(monitors)
    await line.check(OK)
    [monitor] = await monitors.all()
    signer = CallbackSigner(b"k" * 32)
    fresh, _ = monitors_view([monitor], {}, signer, T0 + timedelta(minutes=2))
    stale, markup = monitors_view([monitor], {}, signer, T0 + timedelta(minutes=4))
    assert "stale" not in fresh and "#1 site · 🟢 up · ⚠️ stale" in stale
    assert [b["text"] for b in markup["inline_keyboard"][0]] == [
        "Check #1",
        "Pause #1",
        "Remove #1",
    ]


async def hours_of(store) -> dict[int, tuple[int, int]]:
    async with store.read() as conn:
        rows = (await conn.execute(select(monitor_hours))).all()
    return {row.monitor_id: (row.checks, row.ups) for row in rows}


async def test_one_batch_judges_steady_new_down_paused_and_removed_monitors_each_their_way(
    monitors, store
):
    """Steady successes are written without judging the row; the rest are judged whole."""
    ids = {}
    for name in ("steady", "new", "down", "paused", "removed", "flapping"):
        monitor, _ = await monitors.watch(MonitorSpec(name, MonitorKind.HTTP, f"https://{name}/"))
        ids[name] = monitor.id
    at = T0
    for name, results in (("steady", [OK]), ("down", [FAIL] * 3), ("paused", [OK])):
        for result in results:
            await monitors.record(ids[name], result, chat_id=CHAT, moment=at)
    await monitors.pause(ids["paused"], True)
    await monitors.remove(ids["removed"])
    async with store.write() as conn:  # flapping, though its last check was a success
        await conn.execute(
            update(monitors_table)
            .where(monitors_table.c.id == ids["flapping"])
            .values(state="up", last_ok=True, successes=4, flapping_since=T0)
        )
    before = await hours_of(store)
    moment = T0 + timedelta(minutes=1)
    fast = CheckResult(True, 3.5, detail="200 in 3.5 ms")
    batch = [(ids[name], fast, moment) for name in ids]
    summary = await monitors.record_many(batch, chat_id=CHAT)
    assert summary["checks_ok"] == 4 and summary["checks_dropped"] == 2  # paused, removed
    shown = {monitor.spec.name: monitor for monitor in await monitors.all()}
    assert shown["steady"].counters == Counters(MonitorState.UP, 0, 2)
    assert (shown["steady"].last_check_at, shown["steady"].last_latency_ms) == (moment, 3.5)
    assert shown["new"].counters == Counters(MonitorState.UP, 0, 1)  # its first up: judged
    assert shown["down"].counters == Counters(MonitorState.DOWN, 0, 1)  # one of two to recover
    assert shown["down"].last_error == "503 Service Unavailable"  # kept while still down
    assert shown["flapping"].counters.successes == 5
    assert shown["paused"].last_check_at == T0  # its check after the pause is dropped
    after = await hours_of(store)
    grew = {key: (after[key][0] - before.get(key, (0, 0))[0]) for key in after}
    assert grew == {ids[name]: 1 for name in ("steady", "new", "down", "flapping")} | {
        ids["paused"]: 0
    }


async def test_a_long_steady_up_then_three_failures_opens_one_incident(monitors, store):
    line = await timeline(monitors)
    await line.check(OK, 30)
    [monitor] = await monitors.all()
    assert monitor.counters == Counters(MonitorState.UP, 0, 30)
    await line.check(FAIL, 2)
    assert await sent(store) == []
    await line.check(FAIL)
    assert len(cards(await sent(store))) == 1
    await line.check(OK, 2)  # recovered, then steady again
    await line.check(OK, 5)
    [card, edit] = await sent(store)
    assert edit.edit_of == card.id
    [monitor] = await monitors.all()
    assert monitor.counters == Counters(MonitorState.UP, 0, 7)
