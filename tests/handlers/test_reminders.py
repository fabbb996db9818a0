"""``/remind`` through the emulator with the real clock and worker: the card comes when due, its
buttons close or snooze it (once), a reminder missed while aegis was down comes once and says it
is late, and every bad input is refused with a sentence and no row."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import select, update

from bot.store.tables import reminders
from bot.timeutil import now
from tests.helpers.runs import message_with, tap
from tests.helpers.stack import eventually, running_clock
from tests.helpers.task_chat import say


async def rows(stack) -> list:
    async with stack.store.read() as conn:
        return (await conn.execute(select(reminders).order_by(reminders.c.id))).all()


async def make_due(stack, ago: timedelta = timedelta(0)) -> None:
    async with stack.store.write() as conn:
        await conn.execute(update(reminders).values(due_at=now() - ago))


async def text_of(stack, message_id: int) -> str:
    [message] = [m for m in await stack.bot_messages() if m["message_id"] == message_id]
    return message["text"]


async def test_a_reminder_comes_as_a_card_and_done_closes_it_once(stack):
    _, answer = await say(stack, "/remind 20m water the plants")
    assert answer["text"].startswith("I'll remind you ") and "water the plants" in answer["text"]
    [row] = await rows(stack)
    assert row.status == "waiting" and timedelta(minutes=19) < row.due_at - now()
    await make_due(stack)
    async with running_clock(stack):
        card = await message_with(stack, r"^⏰ water the plants", after=answer["message_id"])
    assert "late" not in card["text"]
    assert await tap(stack, card, "Done") == "Done."
    await eventually(lambda: _text_is(stack, card["message_id"], "✅ water the plants\nDone."))
    assert (await rows(stack))[0].status == "done"
    assert "already dealt with" in await tap(stack, card, "Snooze 1h")


async def test_snooze_makes_it_wait_an_hour_and_tomorrow_means_nine_in_the_morning(stack):
    _, answer = await say(stack, "/remind 5m stretch")
    await make_due(stack)
    async with running_clock(stack):
        card = await message_with(stack, r"^⏰ stretch", after=answer["message_id"])
        assert (await tap(stack, card, "Snooze 1h")).startswith("Snoozed until ")
        [row] = await rows(stack)
        assert row.status == "waiting" and row.snoozes == 1
        assert timedelta(minutes=59) < row.due_at - now() <= timedelta(hours=1)
        await make_due(stack)  # an hour later, as far as the clock knows
        again = await message_with(stack, r"^⏰ stretch", after=card["message_id"])
    assert (await tap(stack, again, "Tomorrow 9:00")).startswith("Snoozed until ")
    [row] = await rows(stack)
    zone = stack.settings.zone
    local = row.due_at.astimezone(zone)
    tomorrow = now().astimezone(zone).date() + timedelta(days=1)
    assert (local.date(), local.hour, local.minute) == (tomorrow, 9, 0)


async def test_a_reminder_missed_while_aegis_was_down_comes_once_and_says_it_is_late(stack):
    _, answer = await say(stack, "/remind tomorrow 9:00 renew the passport")
    await make_due(stack, ago=timedelta(days=2))
    async with running_clock(stack):
        card = await message_with(stack, r"^⏰ renew the passport", after=answer["message_id"])
        await eventually(lambda: _status_is(stack, "sent"))
        await make_due(stack, ago=timedelta(days=2))  # nothing makes it fire twice
        await _wait_a_few_ticks()
    assert "(late: it was due " in card["text"] and "while aegis was not running" in card["text"]
    cards = [m for m in await stack.bot_messages() if m["text"].startswith("⏰ renew")]
    assert len(cards) == 1


async def test_bad_reminders_are_refused_with_what_to_write_and_nothing_is_kept(stack):
    for text, words in [
        ("/remind", "Say when, then what"),
        ("/remind call the bank", "Say when, then what"),
        ("/remind 20m", "Say what to remind you of"),
        ("/remind 31 feb call mum", "There is no 31 Feb"),
        ("/remind 2020-01-01 9:00 call mum", "has passed"),
        ("/remind tomorrow 25:00 call mum", "is not a time of day: write it as 17:00"),
        ("/remind 400d call mum", "more than a year"),
    ]:
        _, answer = await say(stack, text)
        assert words in answer["text"], (text, answer["text"])
    assert await rows(stack) == []


async def _text_is(stack, message_id: int, text: str) -> bool:
    return await text_of(stack, message_id) == text


async def _status_is(stack, status: str) -> bool:
    return [row.status for row in await rows(stack)] == [status]


async def _wait_a_few_ticks() -> None:
    await asyncio.sleep(2.5)  # the clock ticks every second at most; CLAIM_AGAIN_AFTER is 60 s
