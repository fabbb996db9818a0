"""Schedules end to end, on SQLite and Postgres: the real clock (``run_clock`` in a task) over
the stack's store and Redis, a real Dramatiq worker running the script harness, and the bot
through the emulator for /schedules, its buttons, /runs and /status; then the daily briefing.

Nothing here waits for a time: each test waits for the rows or messages it caused. "Not
enqueued" is read against a barrier, a schedule made due in the same transaction, which the
clock reads in the same query.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, update

from aegis.clock import run_clock
from bot.agents.agent_run import RunState
from bot.config.file import load_config
from bot.config.live import LiveConfig
from bot.interactions.interaction import Ask, Kind
from bot.store.tables import agent_runs, runs, schedules
from bot.timeutil import now
from bot.upkeep.schedules import BUILTIN_SCHEDULES, Schedules
from jobs.worker.enqueue import make_enqueue
from tests.helpers.runs import buttons, message_with, tap
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack

AGENTS = """\
agents:
  clerk:
    name: Clerk
    harness: script
    tags: [gtd]
    deadline: 60
    steps:
      - say: "Scheduled: {request}"
"""
HELLO = """\
  hello:
    every: 1h
    agent: clerk
    request: say hello
"""
CONFIG = AGENTS + "schedules:\n" + HELLO


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(CONFIG, encoding="utf-8")
    async with running_stack(settings, namespace=redis_namespace) as running:
        await running.ask("/start")  # the owner's chat exists once they have written to the bot
        yield running


@contextlib.asynccontextmanager
async def clock(stack):
    """``aegis clock`` as serve_clock runs it, following the stack's aegis.yaml."""
    stop = asyncio.Event()
    config = LiveConfig(stack.settings.config_file, look_every=0.1)
    task = asyncio.create_task(run_clock(stack.store, make_enqueue(stack.broker), stop, config))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


async def command(stack, text: str, answer: str) -> dict:
    """Send a command; its answer, found by its first words (a run's messages may be between)."""
    sent = await stack.send(text)
    return await message_with(stack, answer, after=sent["message_id"])


async def runs_of(stack, schedule: str, *states: RunState) -> list:
    query = select(agent_runs).where(agent_runs.c.schedule == schedule).order_by(agent_runs.c.id)
    if states:
        query = query.where(agent_runs.c.status.in_(states))
    async with stack.store.read() as conn:
        return (await conn.execute(query)).all()


async def job_summaries(stack, job: str) -> list[dict]:
    query = (
        select(runs.c.summary)
        .where(runs.c.job == job, runs.c.status == "completed")
        .order_by(runs.c.id)
    )
    async with stack.store.read() as conn:
        return list((await conn.execute(query)).scalars())


async def row(stack, name: str):
    return await Schedules(stack.store).get(name)


async def make_due(stack, *names: str) -> None:
    """Due now, all in one transaction: the clock's next tick reads them together."""
    async with stack.store.write() as conn:
        await conn.execute(
            update(schedules)
            .where(schedules.c.name.in_(names))
            .values(next_run_at=now() - timedelta(seconds=1))
        )


async def test_a_due_file_schedule_runs_its_agent_and_shows_in_runs(stack):
    async with clock(stack):
        [run] = await eventually(lambda: runs_of(stack, "hello", RunState.COMPLETED), timeout=30)
    assert (run.agent, run.origin, run.chat_id) == ("clerk", "schedule", OWNER_CHAT)
    assert run.request == "say hello"
    # Keyed by its due time: a redelivered message starts no second run.
    hello = await row(stack, "hello")
    due = datetime.fromisoformat(run.idempotency_key.removeprefix("schedule:hello:"))
    assert due <= hello.last_enqueued_at
    await message_with(stack, r"^Scheduled: say hello$")
    listing = await command(stack, "/runs", r"^Latest runs")
    assert f"#{run.id} clerk (schedule hello) · completed" in listing["text"]
    assert "changed: messages sent: 1" in listing["text"]


async def test_schedules_lists_each_and_its_button_turns_it_off_and_on(stack):
    async with clock(stack):
        await eventually(lambda: runs_of(stack, "hello", RunState.COMPLETED), timeout=30)
        listing = await command(stack, "/schedules", r"^Schedules")
        text = listing["text"]
        assert "• hello · every 1h · clerk · on" in text
        assert "• outbox-sweep · every 30s · aegis (sweep_outbox) · always on" in text
        assert text.index("hello") < text.index("Built in:") < text.index("outbox-sweep")
        assert "Turn off hello" in buttons(listing)

        answer = await tap(stack, listing, "Turn off hello")
        assert answer.startswith("hello is off")
        assert (await row(stack, "hello")).enabled is False

        # The listing tapped is edited in place, not sent again.
        async def edited():
            [shown] = [m for m in await stack.bot_messages() if "Built in:" in (m["text"] or "")]
            return shown if shown["text"].startswith("hello is off") else None

        turned = await eventually(edited)
        assert turned["message_id"] == listing["message_id"]
        assert "• hello · every 1h · clerk · off" in turned["text"]

        # Off is off: made due with a barrier, the clock enqueues the barrier and not hello.
        sweep_before = (await row(stack, "outbox-sweep")).last_enqueued_at
        hello_before = await row(stack, "hello")
        await make_due(stack, "hello", "outbox-sweep")
        await eventually(lambda: _enqueued_after(stack, "outbox-sweep", sweep_before), timeout=10)
        hello = await row(stack, "hello")
        assert hello.last_enqueued_at == hello_before.last_enqueued_at
        assert hello.next_run_at < now()
        assert len(await runs_of(stack, "hello")) == 1

        answer = await tap(stack, turned, "Turn on hello")
        assert answer.startswith("hello is on")
        await eventually(lambda: _count_at_least(runs_of(stack, "hello"), 2), timeout=30)
    assert len(await runs_of(stack, "hello")) == 2  # on again after its time: one run


async def _enqueued_after(stack, name: str, before) -> bool:
    current = (await row(stack, name)).last_enqueued_at
    return current is not None and (before is None or current > before)


async def _count_at_least(rows, count: int) -> bool:
    return len(await rows) >= count


async def test_editing_aegis_yaml_adds_and_removes_schedules_while_the_clock_runs(stack):
    evening = """\
  evening:
    every: 1d
    capability: gtd
    request: wrap up the day
    enabled: false
"""
    async with clock(stack):
        await eventually(lambda: row(stack, "hello"), timeout=10)
        assert await row(stack, "evening") is None
        stack.settings.config_file.write_text(CONFIG + evening, encoding="utf-8")
        added = await eventually(lambda: row(stack, "evening"), timeout=10)
        assert (added.enabled, added.interval_seconds, added.capability) == (False, 86400, "gtd")
        assert (await row(stack, "hello")).enabled is True

        stack.settings.config_file.write_text(AGENTS + "schedules:\n" + evening, "utf-8")
        await eventually(lambda: _gone(stack, "hello"), timeout=10)
        assert (await row(stack, "evening")) is not None
        assert (await row(stack, "outbox-sweep")) is not None  # built-ins stay


async def _gone(stack, name: str) -> bool:
    return await row(stack, name) is None


async def test_capability_routing_and_a_capability_nobody_holds(stack, caplog):
    routed = """\
  tidy:
    every: 1h
    capability: gtd
    request: tidy the inbox
  digest:
    every: 1h
    capability: research
    request: read the papers
"""
    stack.settings.config_file.write_text(AGENTS + "schedules:\n" + routed, encoding="utf-8")
    caplog.set_level(logging.WARNING, logger="jobs.schedules")
    async with clock(stack):
        [tidy] = await eventually(lambda: runs_of(stack, "tidy", RunState.COMPLETED), timeout=30)
        summaries = await eventually(
            lambda: _with(job_summaries(stack, "scheduled_run"), "capability_missing"),
            timeout=20,
        )
    assert tidy.agent == "clerk"  # the one agent tagged gtd
    assert {"capability_missing": 1} in summaries
    assert await runs_of(stack, "digest") == []
    assert any(
        "schedule digest skipped" in r.getMessage() and "'research'" in r.getMessage()
        for r in caplog.records
    )
    status = await command(stack, "/status", r"^aegis status")
    assert "digest needs capability research and no agent holds it" in status["text"]
    assert "tidy needs" not in status["text"]
    listing = await command(stack, "/schedules", r"^Schedules")
    assert "capability research → nobody holds it: skipped" in listing["text"]
    assert "capability gtd → clerk" in listing["text"]


async def _with(summaries, key: str):
    found = await summaries
    return found if any(key in summary for summary in found) else None


async def test_a_schedule_whose_run_is_still_going_is_skipped_and_status_counts_it(stack):
    slow = AGENTS + "  slowpoke:\n    harness: script\n    deadline: 120\n    steps:\n"
    slow += "      - sleep: 120\nschedules:\n  slow:\n    every: 1h\n    agent: slowpoke\n"
    slow += "    request: take your time\n"
    stack.settings.config_file.write_text(slow, encoding="utf-8")
    async with clock(stack):
        [first] = await eventually(lambda: runs_of(stack, "slow", RunState.RUNNING), timeout=30)
        await make_due(stack, "slow")
        skipped = await eventually(lambda: _skipped(stack, "slow"), timeout=10)
        assert skipped.skipped == 1
        assert len(await runs_of(stack, "slow")) == 1

        # Messages queued while no worker ran: the actor skips too, but a redelivery of the
        # message that started the run finds its run and counts no skip.
        enqueue = stack.services.platform.interactions.enqueue
        await enqueue("scheduled_run", "slow", "2026-01-01T00:00:00+00:00")
        await enqueue("scheduled_run", "slow", first.idempotency_key.split(":", 2)[2])
        summaries = await eventually(
            lambda: _at_least(job_summaries(stack, "scheduled_run"), 3), timeout=20
        )
        assert sorted(map(str, summaries)) == sorted(
            map(str, [{"runs_started": 1}, {"runs_skipped": 1}, {"runs_started": 1}])
        )
        assert len(await runs_of(stack, "slow")) == 1
        assert (await row(stack, "slow")).skipped == 2

        status = await command(stack, "/status", r"^aegis status")
        assert "slow: skipped 2 times while its previous run was still going" in status["text"]
        await stack.ask(f"/cancel {first.id}")
        await eventually(lambda: runs_of(stack, "slow", RunState.CANCELLED), timeout=20)


async def _at_least(summaries, count: int):
    found = await summaries
    return found if len(found) >= count else None


async def _skipped(stack, name: str):
    current = await row(stack, name)
    return current if current.skipped else None


async def test_the_daily_briefing_card(stack):
    [receipt] = await stack.ask("Renew the passport")
    task_id = int(re.match(r"Captured as task (\d+)", receipt["text"]).group(1))
    await tap(stack, receipt, "@next")
    await message_with(stack, rf"✓ Task {task_id} → @next")  # the receipt, edited
    card = await stack.services.platform.interactions.create(
        Ask(Kind.ACKNOWLEDGEMENT, "demo", OWNER_CHAT, "Read the lease before Friday")
    )
    sent = await stack.send("/run clerk the briefing check")
    done = await message_with(stack, r"^Run #\d+ · clerk · completed", after=sent["message_id"])
    run_id = int(re.match(r"Run #(\d+)", done["text"]).group(1))

    await stack.services.platform.interactions.enqueue("daily_briefing", "daily-briefing")
    briefing = await message_with(stack, r"^Daily briefing · ")
    text = briefing["text"]
    assert f"Daily briefing · {now().date().isoformat()}" in text
    assert f"@next: 1 task\n  {task_id}. Renew the passport" in text
    assert f"Waiting on you: 1 card\n  #{card.id} demo: Read the lease before Friday" in text
    assert "Ran in the last 24 h: 1 completed" in text
    assert f"#{run_id} clerk · completed · changed: messages sent: 1" in text
    assert set(buttons(briefing)) == {"Show /next", "Pending cards"}

    await tap(stack, briefing, "Pending cards")
    await message_with(stack, r"^1 card\(s\) waiting for you", after=briefing["message_id"])
    await tap(stack, briefing, "Show /next")
    await message_with(stack, r"^What you can do now", after=briefing["message_id"])

    # One card a day, however often it runs.
    await stack.services.platform.interactions.enqueue("daily_briefing", "daily-briefing")
    await eventually(lambda: _count_at_least(job_summaries(stack, "daily_briefing"), 2))
    briefings = [m for m in await stack.bot_messages() if m["text"].startswith("Daily briefing")]
    assert len(briefings) == 1


def row_buttons(message: dict, first: str) -> dict[str, str]:
    """The buttons of the keyboard row that starts with the button ``first``."""
    for keys in message["reply_markup"]["inline_keyboard"]:
        if keys[0]["text"] == first:
            return {key["text"]: key["callback_data"] for key in keys}
    raise AssertionError(f"no row starts with {first!r}")


async def press(stack, message: dict, data: str) -> str:
    tapped = await stack.emulator.tap(OWNER_CHAT, message["message_id"], data)
    answer = await eventually(lambda: stack.emulator.callback_answer(tapped["callback_query_id"]))
    return answer.get("text") or ""


async def test_every_makes_a_schedule_in_chat_that_runs_now_and_is_deleted_by_its_buttons(stack):
    answer = await command(stack, "/every weekdays 8:00 run clerk say good morning", r"^Sched")
    assert answer["text"].startswith(
        "Scheduled as clerk-1: at 08:00 on Monday through Friday (UTC), clerk is asked "
        "'say good morning'. First run "
    )
    made = await row(stack, "clerk-1")
    assert (made.source, made.cron, made.agent) == ("chat", "0 8 * * mon-fri", "clerk")
    assert made.next_run_at.strftime("%H:%M") == "08:00" and made.next_run_at.weekday() < 5
    async with clock(stack):  # the file's schedules and the built-ins, beside it
        await eventually(lambda: row(stack, "hello"))
        listing = await command(stack, "/schedules", r"^Schedules")
    assert "• clerk-1 · at 08:00 on Monday through Friday (UTC) · clerk · on" in listing["text"]
    keys = row_buttons(listing, "Turn off clerk-1")
    assert list(keys) == ["Turn off clerk-1", "Run now", "Delete"]
    assert "Delete" not in row_buttons(listing, "Turn off hello")  # the file's stay the file's

    assert (await press(stack, listing, keys["Run now"])).startswith("clerk-1 runs now, once")
    await message_with(stack, r"^Scheduled: say good morning$")
    assert (await row(stack, "clerk-1")).next_run_at == made.next_run_at  # its time stays

    assert await press(stack, listing, keys["Delete"]) == "clerk-1 is deleted."
    assert await row(stack, "clerk-1") is None
    assert "no schedule clerk-1 any more" in await press(stack, listing, keys["Delete"])


async def test_the_sweeps_that_keep_promises_cannot_be_switched_off_from_chat(stack):
    async with clock(stack):
        await eventually(lambda: row(stack, "hello"))
        listing = await command(stack, "/schedules", r"^Schedules")
    text = listing["text"]
    actors = {"outbox-sweep": "outbox", "run-sweep": "runs", "interaction-sweep": "interactions"}
    for name, actor in actors.items():
        assert f"Turn off {name}" not in buttons(listing)
        assert f"• {name} · every 30s · aegis (sweep_{actor}) · always on" in text
    assert "Turn off daily-briefing" in buttons(listing)  # a built-in that is the owner's to stop
    assert text.index("• hello") < text.index("\nBuilt in:\n") < text.index("• daily-briefing")

    # A "Turn off" signed by us (an old /schedules, before the sweeps lost it) changes nothing.
    off = stack.services.signer.sign("sched", "outbox-sweep", "off")
    answer = await press(stack, listing, off)
    assert (
        answer
        == "outbox-sweep is built in and stays on: it keeps aegis's promises. Nothing was changed."
    )
    assert (await row(stack, "outbox-sweep")).enabled is True

    # One switched off before this rule is on again when the clock starts.
    async with stack.store.write() as conn:
        await conn.execute(
            update(schedules).where(schedules.c.name == "run-sweep").values(enabled=False)
        )
    await Schedules(stack.store).seed(BUILTIN_SCHEDULES)
    assert (await row(stack, "run-sweep")).enabled is True


async def test_every_refuses_what_it_cannot_run_with_what_to_write(stack):
    for text, words in [
        ("/every", "Say when, then run"),
        ("/every weekdays 8:00 clerk hello", "Say when, then run"),
        ("/every 5m run clerk hello", "Every 10 minutes at most"),
        ("/every someday 8:00 run clerk hello", "'someday' is not a set of days"),
        ("/every 8:61 run clerk hello", "is not a time of day"),
        ("/every 2h run nobody hello", "there is no agent 'nobody' to run (agents: clerk, demo)"),
    ]:
        answer = await command(stack, text, r".")
        assert words in answer["text"], (text, answer["text"])
    assert [r.name for r in await Schedules(stack.store).all() if r.source == "chat"] == []


async def test_after_two_days_down_a_schedule_runs_once_and_says_it_is_late(stack):
    await Schedules(stack.store).reconcile(load_config(stack.settings.config_file).schedules)
    async with stack.store.write() as conn:  # as if aegis had been down since two days ago
        await conn.execute(
            update(schedules)
            .where(schedules.c.name == "hello")
            .values(next_run_at=now() - timedelta(days=2))
        )
    async with clock(stack):
        late = await message_with(stack, r"^Schedule hello runs late")
        await eventually(lambda: runs_of(stack, "hello", RunState.COMPLETED), timeout=30)
        await asyncio.sleep(1.5)  # a tick or two more: nothing more is enqueued
    assert "while aegis was not running; 48 later time(s) were missed in all" in late["text"]
    assert len(await runs_of(stack, "hello")) == 1
    lates = [m for m in await stack.bot_messages() if m["text"].startswith("Schedule hello")]
    assert len(lates) == 1
    hello = await row(stack, "hello")
    assert hello.missed == 48 and hello.next_run_at > now()
