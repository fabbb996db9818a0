"""The triage actors end to end, on SQLite and Postgres: a real Dramatiq worker on Redis, the
real bot and the emulator. Tasks are captured by writing to the bot, as the owner would; the
sweep and the weekly review are enqueued as the clock would.

Whether an actor has finished is read from its ``runs`` rows (jobs/worker/middleware.py), never from
a wait: a test waits for the runs it caused, then checks what they did.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update

from bot.store.tables import interactions, outbox, runs, tasks
from bot.tasks.inbox import ASKER
from bot.tasks.task import Closed, State
from bot.tasks.triage import Triage
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack

CONFIG = """\
triage:
  - name: reading
    when: {keywords: [article, read later]}
    state: "@someday"
    labels: [read]
"""


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    """The whole of aegis with an aegis.yaml holding one triage rule, written before it starts."""
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(CONFIG, encoding="utf-8")
    async with running_stack(settings, namespace=redis_namespace) as running:
        yield running


def buttons(message: dict) -> dict[str, str]:
    rows = (message.get("reply_markup") or {}).get("inline_keyboard", [])
    return {button["text"]: button["callback_data"] for row in rows for button in row}


async def capture(stack, text: str) -> tuple[int, dict]:
    """Write ``text`` to the bot; the task it became and the bot's receipt."""
    [receipt] = await stack.ask(text)
    found = re.match(r"Captured as task (\d+):", receipt["text"])
    assert found, receipt["text"]
    return int(found.group(1)), receipt


async def enqueue(stack, actor: str, *args: Any) -> None:
    await stack.services.platform.interactions.enqueue(actor, *args)


async def run_summaries(stack, job: str, count: int) -> list[dict]:
    """The summaries of the first ``count`` runs of ``job``, once that many have finished."""

    async def finished():
        async with stack.store.read() as conn:
            query = select(runs.c.summary).where(runs.c.job == job).order_by(runs.c.id)
            rows = (await conn.execute(query)).scalars().all()
        return [rows] if len(rows) >= count else None

    [summaries] = await eventually(finished, timeout=20)
    return list(summaries[:count])


async def run_count(stack, job: str) -> int:
    async with stack.store.read() as conn:
        query = select(func.count()).select_from(runs).where(runs.c.job == job)
        return (await conn.execute(query)).scalar_one()


async def sweep(stack, times: int = 1) -> list[dict]:
    """Run the sweep (``times`` more runs) and every triage_task it queued; their summaries."""
    before = await run_count(stack, "sweep_triage")
    done = await run_count(stack, "triage_task")
    for _ in range(times):
        await enqueue(stack, "sweep_triage", "triage-sweep")
    swept = (await run_summaries(stack, "sweep_triage", before + times))[before:]
    queued = sum(summary["tasks_queued"] for summary in swept)
    return await run_summaries(stack, "triage_task", done + queued) if queued else []


async def bot_message(stack, fragment: str, *, after: int = 0) -> dict:
    async def find():
        for message in await stack.bot_messages(OWNER_CHAT, after):
            if fragment in (message.get("text") or ""):
                return message
        return None

    return await eventually(find, timeout=20)


async def bot_texts_with(stack, fragment: str) -> list[str]:
    return [
        message["text"]
        for message in await stack.bot_messages(OWNER_CHAT)
        if fragment in (message.get("text") or "")
    ]


async def tap(stack, message: dict, label: str) -> dict:
    tapped = await stack.emulator.tap(OWNER_CHAT, message["message_id"], buttons(message)[label])
    return await eventually(lambda: stack.emulator.callback_answer(tapped["callback_query_id"]))


async def task_row(stack, task_id: int):
    async with stack.store.read() as conn:
        return (await conn.execute(select(tasks).where(tasks.c.id == task_id))).one()


async def triage_cards(stack) -> list:
    query = select(interactions).where(interactions.c.agent == ASKER).order_by(interactions.c.id)
    async with stack.store.read() as conn:
        return (await conn.execute(query)).all()


async def card_for(stack, task_id: int) -> dict:
    return await bot_message(stack, f"Where does task {task_id} go?")


async def test_a_matching_rule_triages_the_task_and_says_so(stack):
    task_id, _ = await capture(stack, "An article on bees\nhttps://example.com/bees")
    other_id, _ = await capture(stack, "Read later: the history of tea")
    summaries = await sweep(stack)
    assert summaries == [{"tasks_triaged": 1}, {"tasks_triaged": 1}]
    said = await bot_message(stack, f"Task {task_id} → @someday")
    assert said["text"] == f"Task {task_id} → @someday (rule reading): An article on bees"
    await bot_message(stack, f"Task {other_id} → @someday (rule reading)")
    row = await task_row(stack, task_id)
    assert row.state == State.SOMEDAY and row.labels == ["read"]
    assert row.triaged_by == "rule reading" and row.closed_at is None
    assert await triage_cards(stack) == []
    # nothing is left to triage, nothing is said twice
    assert await sweep(stack) == []
    assert len(await bot_texts_with(stack, f"Task {task_id} → @someday")) == 1


async def test_without_a_rule_each_task_is_asked_about_once(stack):
    first, _ = await capture(stack, "Buy milk")
    second, _ = await capture(stack, "Call the plumber")
    assert sorted(map(str, await sweep(stack))) == sorted(map(str, [{"tasks_asked": 1}] * 2))
    card = await card_for(stack, first)
    assert list(buttons(card)) == ["@next", "@someday", "@waiting", "@reference", "drop"]
    assert "Buy milk" in card["text"]
    await card_for(stack, second)
    cards = await triage_cards(stack)
    assert len(cards) == 2
    assert {(await task_row(stack, t)).triage_interaction_id for t in (first, second)} == {
        card.id for card in cards
    }

    # A second sweep finds nothing to ask; a triage_task sent again for an asked task skips.
    assert await sweep(stack, times=2) == []
    done = await run_count(stack, "triage_task")
    await enqueue(stack, "triage_task", first)
    await enqueue(stack, "triage_task", first)
    assert (await run_summaries(stack, "triage_task", done + 2))[done:] == [
        {"tasks_skipped": 1},
        {"tasks_skipped": 1},
    ]
    assert len(await triage_cards(stack)) == 2
    assert len(await bot_texts_with(stack, f"Where does task {first} go?")) == 1
    assert (await task_row(stack, first)).state == State.INBOX


async def test_an_answer_on_the_card_moves_the_task_and_reports_it(stack):
    task_id, _ = await capture(stack, "Renew the passport")
    await sweep(stack)
    card = await card_for(stack, task_id)
    answer = await tap(stack, card, "@waiting")
    assert "@waiting" in answer["text"]
    said = await bot_message(stack, f"Task {task_id} → @waiting", after=card["message_id"])
    assert said["text"] == f"Task {task_id} → @waiting: Renew the passport"
    row = await task_row(stack, task_id)
    assert row.state == State.WAITING and row.closed_at is None
    assert row.triaged_by.startswith("owner ")
    assert await run_summaries(stack, "apply_triage", 1) == [{"answers_applied": 1}]
    # a second tap changes nothing
    again = await tap(stack, card, "@next")
    assert again["text"].startswith("Already settled")
    assert (await task_row(stack, task_id)).state == State.WAITING


async def test_drop_on_the_card_closes_the_task_as_dropped(stack):
    task_id, _ = await capture(stack, "Learn the bagpipes")
    await sweep(stack)
    card = await card_for(stack, task_id)
    await tap(stack, card, "drop")
    said = await bot_message(stack, f"Task {task_id} dropped", after=card["message_id"])
    assert said["text"] == f"Task {task_id} dropped: Learn the bagpipes"
    row = await task_row(stack, task_id)
    assert row.closed_as == Closed.DROPPED and row.closed_at is not None
    assert row.state == State.INBOX  # closing keeps the state label


async def test_a_card_answered_after_the_task_was_triaged_by_a_button_changes_nothing(stack):
    task_id, receipt = await capture(stack, "Fix the bike")
    await sweep(stack)
    card = await card_for(stack, task_id)
    await tap(stack, receipt, "@next")  # the receipt's own buttons, meanwhile
    await eventually(lambda: _state_is(stack, task_id, State.NEXT))
    await tap(stack, card, "@someday")
    said = await bot_message(stack, f"Task {task_id} was already triaged", after=card["message_id"])
    assert said["text"].startswith(f"Task {task_id} was already triaged to @next (owner ")
    assert await run_summaries(stack, "apply_triage", 1) == [{"answers_applied": 1}]
    row = await task_row(stack, task_id)
    assert row.state == State.NEXT and row.closed_at is None


async def _state_is(stack, task_id: int, state: State) -> bool:
    return (await task_row(stack, task_id)).state == state


async def test_the_weekly_review_lists_someday_and_stale_waiting_once_a_week(stack):
    someday, _ = await capture(stack, "Learn Portuguese")
    stale, _ = await capture(stack, "Reply from the landlord")
    fresh, _ = await capture(stack, "Parcel from the shop")
    platform = stack.services.platform
    await platform.tasks.triage(someday, Triage(State.SOMEDAY, "owner test"))
    for task_id in (stale, fresh):
        await platform.tasks.triage(task_id, Triage(State.WAITING, "owner test"))
    async with stack.store.write() as conn:
        eight_days_ago = datetime.now(UTC) - timedelta(days=8)
        await conn.execute(
            update(tasks).where(tasks.c.id == stale).values(updated_at=eight_days_ago)
        )

    await enqueue(stack, "weekly_review", "weekly-review")
    assert await run_summaries(stack, "weekly_review", 1) == [{"reviews_queued": 1}]
    assert await run_summaries(stack, "review_chat", 1) == [
        {"someday_resurfaced": 1, "waiting_listed": 1}
    ]
    review = await bot_message(stack, "Weekly review")
    text = review["text"]
    assert f"{someday}. Learn Portuguese" in text
    assert f"{stale}. Reply from the landlord" in text
    assert "Parcel from the shop" not in text
    assert set(buttons(review)) == {f"{someday} @next", f"{stale} Done"}

    # The same week again: the review runs, and sends nothing more.
    await enqueue(stack, "weekly_review", "weekly-review")
    await run_summaries(stack, "review_chat", 2)
    async with stack.store.read() as conn:
        query = select(func.count()).where(outbox.c.idempotency_key.like("review:%"))
        assert (await conn.execute(query)).scalar_one() == 1
    assert len(await bot_texts_with(stack, "Weekly review")) == 1
