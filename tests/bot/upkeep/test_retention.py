"""Retention on SQLite and Postgres: what is old and settled goes, in batches; what is young,
still owed, or used by a live card, run, incident, edit or reply stays, however old."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, insert, select

from bot.store.tables import (
    agent_runs,
    audit_events,
    incidents,
    interaction_cards,
    interactions,
    model_calls,
    outbox,
    runs,
    updates,
)
from bot.timeutil import now
from bot.upkeep.retention import Keep, Retention

KEEP = Keep(days=30, audit_days=365)
OLD = timedelta(days=31)
YOUNG = timedelta(days=29)


async def add(store, table, **values) -> int:
    async with store.write() as conn:
        result = await conn.execute(insert(table).values(**values))
        return result.inserted_primary_key[0]


async def message(store, age: timedelta, status: str = "sent", **values) -> int:
    row = {"chat_id": 1, "kind": "text", "parts": ["hello"], "telegram_message_ids": []}
    return await add(store, outbox, **row | values, status=status, created_at=now() - age)


async def ids(store, table) -> set:
    async with store.read() as conn:
        return set((await conn.execute(select(table.c.id))).scalars())


async def count(store, table) -> int:
    async with store.read() as conn:
        return (await conn.execute(select(func.count()).select_from(table))).scalar_one()


async def card(store, status: str) -> int:
    """A message carrying an interaction's card, the interaction in ``status``."""
    interaction = await add(
        store,
        interactions,
        kind="approval",
        agent="a",
        chat_id=1,
        prompt="?",
        options=[],
        step_up=False,
        status=status,
        timeout_policy="deny",
        created_at=now() - OLD,
        continuation_kwargs={},
    )
    outbox_id = await message(store, OLD)
    await add(store, interaction_cards, outbox_id=outbox_id, interaction_id=interaction, chat_id=1)
    return outbox_id


async def progress(store, status: str) -> int:
    """The progress message of an agent run in ``status``."""
    outbox_id = await message(store, OLD)
    await add(
        store,
        agent_runs,
        agent="a",
        request="r",
        origin="command",
        chat_id=1,
        status=status,
        step="",
        state={},
        effects={},
        progress_outbox_id=outbox_id,
        deadline_seconds=60,
        attempts=0,
        cancel_requested=False,
        created_at=now() - OLD,
    )
    return outbox_id


async def incident_card(store, *, closed: bool) -> int:
    outbox_id = await message(store, OLD)
    await add(
        store,
        incidents,
        subject=f"s{outbox_id}",
        kind="down",
        chat_id=1,
        title="t",
        agents=[],
        opened_at=now() - OLD,
        closed_at=now() - OLD if closed else None,
        card_outbox_id=outbox_id,
        reminders=0,
        restart_notice=False,
    )
    return outbox_id


async def test_old_settled_messages_go_and_what_is_owed_or_in_use_stays(store):
    gone = {await message(store, OLD), await message(store, OLD, "failed")}
    owed = {await message(store, OLD, "pending"), await message(store, OLD, "sending")}
    gone |= {await card(store, "resolved"), await card(store, "expired")}
    in_use = {await card(store, "pending"), await card(store, "awaiting_code")}
    gone |= {await progress(store, "completed"), await progress(store, "cancelled")}
    in_use |= {await progress(store, "running"), await progress(store, "parked")}
    gone.add(await incident_card(store, closed=True))
    in_use.add(await incident_card(store, closed=False))
    edited, answered = await message(store, OLD), await message(store, OLD)
    in_use |= {edited, answered}
    gone.add(done_edit := await message(store, OLD))  # its edit is sent: no longer needed
    # Ids grow with time: the young rows come last.
    young = {await message(store, YOUNG), await message(store, timedelta(0))}
    owed.add(await message(store, YOUNG, "pending", kind="edit", edit_of=edited))
    owed.add(await message(store, YOUNG, "pending", reply_to_outbox=answered))
    young.add(await message(store, YOUNG, "sent", kind="edit", edit_of=done_edit))

    pruned = await Retention(store, KEEP, batch=3, pause=0).prune()

    assert await ids(store, outbox) == owed | young | in_use
    assert pruned.rows["outbox"] == len(gone)
    assert pruned.finished and pruned.batches >= len(gone) // 3
    # The settled interactions' cards went with their messages; the open ones' stayed.
    async with store.read() as conn:
        cards = set((await conn.execute(select(interaction_cards.c.outbox_id))).scalars())
    assert cards == in_use & cards and len(cards) == 2


async def test_a_walk_past_a_long_stretch_of_owed_rows_still_reaches_the_old_sent_ones(store):
    owed = {await message(store, OLD, "pending") for _ in range(7)}
    sent = {await message(store, OLD) for _ in range(4)}
    await Retention(store, KEEP, batch=3, pause=0).prune()
    assert await ids(store, outbox) == owed
    assert sent.isdisjoint(await ids(store, outbox))


async def update(store, update_id: int, status: str, age: timedelta) -> None:
    moment = now() - age
    await add(
        store,
        updates,
        bot_id=1,
        update_id=update_id,
        kind="message",
        payload={},
        status=status,
        attempts=1,
        received_at=moment,
        retry_at=moment,
    )


async def test_settled_updates_older_than_the_setting_go_and_unsettled_ones_stay(store):
    for update_id in range(10):
        await update(store, update_id, "handled", OLD)
    await update(store, 10, "failed", OLD)
    await update(store, 11, "pending", OLD)
    await update(store, 12, "handled", YOUNG)
    pruned = await Retention(store, KEEP, batch=4, pause=0).prune()
    async with store.read() as conn:
        left = set((await conn.execute(select(updates.c.update_id))).scalars())
    assert left == {11, 12} and pruned.rows["updates"] == 11


async def test_job_runs_model_calls_and_the_audit_each_go_after_their_setting(store):
    for age in (OLD, OLD, YOUNG):
        await add(
            store,
            runs,
            job="ping",
            message_id="m",
            status="completed",
            summary={},
            started_at=now() - age,
            finished_at=now() - age,
        )
    for age in (timedelta(days=400), timedelta(days=200), OLD):
        await add(store, audit_events, at=now() - age, event="decision", detail="d")
    for age in (OLD, OLD, OLD, YOUNG):
        call = {"agent": "a", "provider": "p", "model": "m", "status": "ok", "latency_ms": 1}
        await add(store, model_calls, **call, prompt_tokens=1, completion_tokens=1, at=now() - age)
    pruned = await Retention(store, KEEP, batch=2, pause=0).prune()
    assert (await count(store, runs), await count(store, audit_events)) == (1, 2)
    assert await count(store, model_calls) == 1
    assert (pruned.rows["job_runs"], pruned.rows["audit_events"]) == (2, 1)
    assert pruned.rows["model_calls"] == 3


async def test_a_pass_out_of_time_stops_and_the_next_goes_on(store):
    for _ in range(5):
        await message(store, OLD)
    stopped = await Retention(store, KEEP, batch=2, pause=0, budget=0).prune()
    assert not stopped.finished and await count(store, outbox) == 5
    again = await Retention(store, KEEP, batch=2, pause=0).prune()
    assert again.finished and again.rows["outbox"] == 5 and await count(store, outbox) == 0
    assert again.summary()["outbox_pruned"] == 5
