"""A gated call held open (bot/actions/held_calls.py), against SQLite and Postgres: it runs once the
card is approved while it waits, tells the agent to retry when the time is up, and remembers the
owner's "no" for a while so that a retry cannot turn one refusal into a stream of cards."""

from __future__ import annotations

import asyncio

import pytest

from bot.actions.call import CallStatus, ToolCall
from bot.actions.held_calls import MAX_OPEN_CARDS, REFUSAL_MEMORY, HeldCalls
from bot.core import Platform
from bot.interactions.interaction import InteractionStatus
from bot.store.tables import interactions
from policies.canonical import approval_hash
from tests.helpers.interactions import (
    ALICE,
    BUILT_TOOLS,
    CHAT,
    RecordingEnqueue,
    Toolbox,
    build_platform,
    interaction_count,
    move_into_past,
)

HELLO = {"text": "hello"}
HOLD = 0.6


@pytest.fixture
def toolbox() -> Toolbox:
    return Toolbox(BUILT_TOOLS)


@pytest.fixture
def platform(tmp_path, store, toolbox) -> Platform:
    return build_platform(tmp_path, store, RecordingEnqueue(), toolbox)


@pytest.fixture
def held(platform) -> HeldCalls:
    return HeldCalls(platform.actions, hold=HOLD, poll=0.02)


async def call(held: HeldCalls, tool="notes.write", args=HELLO, **kw):
    return await held.call(ToolCall("scribe", tool, args, CHAT), **kw)


async def only_card(store) -> int:
    async with store.read() as conn:
        return (await conn.execute(interactions.select())).one().id


async def tap(platform, card: int, choice: str = "approve"):
    return await platform.interactions.tap(card, choice, ALICE, "Alice", codes_ready=True)


async def test_a_read_answers_at_once(held, toolbox, store):
    outcome = await call(held, "notes.read", {"q": "x"})
    assert outcome.status is CallStatus.RAN and toolbox.calls == [("notes.read", {"q": "x"})]
    assert await interaction_count(store) == 0


async def test_a_card_approved_while_the_call_waits_runs_it_once(held, platform, toolbox, store):
    waiting = asyncio.create_task(call(held))
    card = await _card_appears(store)
    assert not waiting.done() and toolbox.calls == []
    await tap(platform, card)
    outcome = await asyncio.wait_for(waiting, timeout=10)
    assert outcome.status is CallStatus.RAN and outcome.interaction_id == card
    assert toolbox.calls == [("notes.write", HELLO)]
    # The grant is spent: the same call again waits on a new card.
    again = await call(held)
    assert again.status is CallStatus.GATED and again.interaction_id != card
    assert toolbox.calls == [("notes.write", HELLO)]


async def test_time_up_tells_the_agent_to_retry_and_the_retry_waits_on_the_same_card(
    held, toolbox, store
):
    first = await call(held)
    assert first.status is CallStatus.GATED
    assert "Nothing was done yet. Retry this identical call now" in first.reason
    second = await call(held)
    assert second.status is CallStatus.GATED and second.interaction_id == first.interaction_id
    assert await interaction_count(store) == 1 and toolbox.calls == []


async def test_progress_is_reported_while_the_call_waits(held):
    notes = []

    async def progress(done, total, message):
        notes.append((done, total, message))

    await call(held, progress=progress)
    assert notes and notes[0][1] == HOLD and "card #" in notes[0][2]


async def test_a_denied_call_is_refused_without_a_new_card_until_the_memory_fades(
    held, platform, toolbox, store
):
    waiting = asyncio.create_task(call(held))
    card = await _card_appears(store)
    await tap(platform, card, "deny")
    refused = await asyncio.wait_for(waiting, timeout=10)
    assert refused.status is CallStatus.DENIED and f"denied it on card #{card}" in refused.reason
    again = await call(held)
    assert again.status is CallStatus.DENIED and await interaction_count(store) == 1
    # A different call is not refused for it.
    other = await call(held, args={"text": "other"})
    assert other.status is CallStatus.GATED and await interaction_count(store) == 2
    # Past the memory (the refusal moved an hour back), the identical call may ask again.
    assert REFUSAL_MEMORY.total_seconds() < 3600
    await move_into_past(store, interactions, card, "resolved_at")
    asked = await call(held)
    assert asked.status is CallStatus.GATED and await interaction_count(store) == 3
    assert toolbox.calls == []


async def test_an_approval_that_still_owes_its_code_keeps_the_call_waiting(
    held, platform, toolbox, store
):
    waiting = asyncio.create_task(call(held, "site.deploy", {"ref": "main"}))
    card = await _card_appears(store)
    await tap(platform, card)  # irreversible: the tap asks for a code
    assert (await platform.interactions.get(card)).status is InteractionStatus.AWAITING_CODE
    outcome = await asyncio.wait_for(waiting, timeout=10)
    assert outcome.status is CallStatus.GATED and toolbox.calls == []


async def test_a_client_that_hangs_up_while_waiting_leaves_nothing_done(
    held, platform, toolbox, store
):
    waiting = asyncio.create_task(call(held))
    card = await _card_appears(store)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await tap(platform, card)
    assert toolbox.calls == []  # the grant waits for the identical call to come back
    outcome = await call(held)
    assert outcome.status is CallStatus.RAN and toolbox.calls == [("notes.write", HELLO)]


async def _card_appears(store) -> int:
    for _ in range(200):
        if await interaction_count(store):
            return await only_card(store)
        await asyncio.sleep(0.01)
    raise AssertionError("no card was made")


async def test_a_card_settled_in_this_process_wakes_its_call_without_waiting_for_a_look(
    platform, toolbox, store
):
    # No look at the card comes for a minute, and no progress note either: only the word
    # from the tap can end the wait within the 30 s allowed here.
    held = HeldCalls(platform.actions, hold=120, poll=60, progress_every=600)
    waiting = asyncio.create_task(call(held))
    card = await _card_appears(store)
    await asyncio.sleep(0.05)  # the call is past its first look and waiting
    await tap(platform, card)
    outcome = await asyncio.wait_for(waiting, timeout=30)
    assert outcome.status is CallStatus.RAN and toolbox.calls == [("notes.write", HELLO)]
    assert held._waiting == {}  # nothing left registered


async def test_two_identical_calls_on_one_card_run_it_once_and_ask_no_more(
    held, platform, toolbox, store
):
    first = asyncio.create_task(call(held))
    card = await _card_appears(store)
    second = asyncio.create_task(call(held))
    await asyncio.sleep(0.1)  # both wait on the card
    await tap(platform, card)
    outcomes = await asyncio.wait_for(asyncio.gather(first, second), timeout=10)
    assert sorted(o.status for o in outcomes) == [CallStatus.DENIED, CallStatus.RAN]
    [loser] = [o for o in outcomes if o.status is CallStatus.DENIED]
    assert "an identical call that waited on it ran once; this one did not run" in loser.reason
    assert toolbox.calls == [("notes.write", HELLO)] and await interaction_count(store) == 1


async def test_a_client_that_hangs_up_while_an_approved_tool_runs_does_not_stop_it(
    held, platform, toolbox, store
):
    started, finish = asyncio.Event(), asyncio.Event()
    finished = []

    async def slow(args, caller):
        started.set()
        await finish.wait()
        finished.append(args)
        return "done"

    platform.actions.toolbox["notes.write"] = slow
    waiting = asyncio.create_task(call(held))
    card = await _card_appears(store)
    await tap(platform, card)
    await asyncio.wait_for(started.wait(), timeout=10)
    waiting.cancel()  # the client hangs up while the tool runs
    with pytest.raises(asyncio.CancelledError):
        await waiting
    finish.set()
    for _ in range(100):
        if finished:
            break
        await asyncio.sleep(0.01)
    assert finished == [HELLO]  # it ran to its end
    again = await call(held)  # the grant is spent: a retry is a new question, and says so
    assert (
        again.status is CallStatus.GATED and "already ran once, approved on card #" in again.reason
    )


async def test_an_agent_with_too_many_open_cards_is_refused_a_new_one(held, store, toolbox):
    for n in range(MAX_OPEN_CARDS):
        assert (await call(held, args={"text": str(n)})).status is CallStatus.GATED
    refused = await call(held, args={"text": "one more"})
    assert refused.status is CallStatus.DENIED and "approval cards waiting" in refused.reason
    assert await interaction_count(store) == MAX_OPEN_CARDS
    # A call already waiting on its card still waits there.
    waiting = await call(held, args={"text": "0"})
    assert waiting.status is CallStatus.GATED and toolbox.calls == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_fast_refusal_lookup_agrees_with_the_sqlalchemy_one(held, platform, store):
    waiting = asyncio.create_task(call(held))
    card = await _card_appears(store)
    await tap(platform, card, "deny")
    await waiting
    args_hash = approval_hash("scribe", "notes.write", HELLO)
    fast = await held._refused_before(args_hash)
    store.is_sqlite = False  # the same store, read the way other databases are
    try:
        slow = await held._refused_before(args_hash)
        none = await held._refused_before("0" * 64)
    finally:
        store.is_sqlite = True
    assert fast == slow == (card, "denied") and none is None


async def test_calls_sent_together_cannot_pass_the_card_cap(held, store):
    calls = [call(held, args={"text": str(n)}) for n in range(3 * MAX_OPEN_CARDS)]
    outcomes = await asyncio.gather(*calls)
    assert sum(o.status is CallStatus.GATED for o in outcomes) == MAX_OPEN_CARDS
    assert await interaction_count(store) == MAX_OPEN_CARDS


async def test_the_next_identical_call_waits_for_the_one_using_the_grant_to_end(
    held, platform, toolbox, store
):
    started, finish = asyncio.Event(), asyncio.Event()

    async def slow(args, caller):
        started.set()
        await finish.wait()
        return "done"

    platform.actions.toolbox["notes.write"] = slow
    card = (await call(held)).interaction_id  # held, then told to retry
    await tap(platform, card)
    # Two identical calls woken by the approval, the first to take the turn gets the grant.
    woken = ToolCall("scribe", "notes.write", HELLO, CHAT)
    ruling = platform.actions.rule(woken)
    first = asyncio.create_task(held._settled(card, "approved", woken, ruling))
    await asyncio.wait_for(started.wait(), timeout=10)
    second = asyncio.create_task(held._settled(card, "approved", woken, ruling))
    await asyncio.sleep(0.05)
    first.cancel()  # its client hangs up while the tool runs
    await asyncio.sleep(0.05)
    assert not second.done()  # the turn is still the running call's
    finish.set()
    outcome = await asyncio.wait_for(second, timeout=10)
    assert outcome.status is CallStatus.DENIED and "this one did not run" in outcome.reason
    assert await interaction_count(store) == 1  # nobody was asked again
    assert held._settling == {} and held._running == set()
