"""The inbox's triage of one task against SQLite and Postgres, with no broker: a rule's verdict
applies, otherwise one card asks (once, however often it runs, and never more than a handful
at once), and what each answer on that card does."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from bot.interactions.interaction import Interaction, InteractionOutcome
from bot.tasks.capture import Capture, Origin
from bot.tasks.inbox import CARD_OPTIONS, DROP, MAX_OPEN_CARDS, Inbox, TriageStep
from bot.tasks.task import Closed, State
from bot.tasks.tasks import Tasks
from bot.tasks.triage import Conditions, RuleTriager, Triage, TriageRule
from tests.helpers.interactions import ALICE, CHAT, RecordingEnqueue, make_interactions

RULE = TriageRule("reading", Conditions(keywords=("article",)), State.SOMEDAY, ("read",))


@pytest.fixture
def parts(store):
    tasks = Tasks(store)
    interactions = make_interactions(store, RecordingEnqueue())
    return tasks, interactions, Inbox(store, tasks, interactions, [RuleTriager([RULE])])


async def new_task(tasks: Tasks, message_id: int, text: str, **overrides) -> int:
    values = {"chat_id": CHAT, "message_id": message_id, "user_id": ALICE, "text": text}
    values.update(overrides)
    return (await tasks.capture(Capture(origin=Origin("self"), **values))).task.id


async def settled(interactions, interaction_id: int, answer: str | None, **changes) -> Interaction:
    card = await interactions.get(interaction_id)
    values = {"outcome": InteractionOutcome.CHOSEN, "answer": answer, "resolved_by_name": "Alice"}
    return dataclasses.replace(card, **{**values, **changes})


async def test_a_rule_verdict_applies_and_no_card_is_made(parts):
    tasks, interactions, inbox = parts
    task_id = await new_task(tasks, 1, "An article on bees")
    result = await inbox.triage(task_id)
    assert result.step is TriageStep.TRIAGED and result.verdict == RULE.triage()
    assert result.task.state is State.SOMEDAY and result.task.labels == ("read",)
    assert (await inbox.triage(task_id)).step is TriageStep.SKIPPED
    assert await interactions.open_count(agent="triage") == 0


async def test_without_a_verdict_one_card_asks_however_often_triage_runs(parts):
    tasks, interactions, inbox = parts
    task_id = await new_task(tasks, 1, "Buy milk\nsemi-skimmed")
    results = await asyncio.gather(*(inbox.triage(task_id) for _ in range(5)))
    assert sorted(r.step for r in results).count(TriageStep.ASKED) == 1
    assert await interactions.open_count(agent="triage") == 1
    task = await tasks.get(task_id)
    card = await interactions.get(task.triage_interaction_id)
    assert card.options == CARD_OPTIONS and card.chat_id == CHAT
    assert (
        card.prompt.startswith(f"Where does task {task_id} go?") and "semi-skimmed" in card.prompt
    )
    assert card.continuation_actor == "apply_triage"
    assert card.continuation_kwargs == {"task_id": task_id}


async def test_no_more_than_a_handful_of_cards_wait_at_once(parts):
    tasks, interactions, inbox = parts
    ids = [await new_task(tasks, n, f"thing {n}") for n in range(1, MAX_OPEN_CARDS + 3)]
    steps = [(await inbox.triage(task_id)).step for task_id in ids]
    assert steps.count(TriageStep.ASKED) == MAX_OPEN_CARDS
    assert await tasks.untriaged() == ids[MAX_OPEN_CARDS:]


async def test_tasks_out_of_the_inbox_or_closed_are_skipped(parts):
    tasks, interactions, inbox = parts
    moved = await new_task(tasks, 1, "one")
    closed = await new_task(tasks, 2, "two")
    await tasks.triage(moved, Triage(State.NEXT, "owner Alice"))
    await tasks.close(closed, Closed.DONE)
    assert (await inbox.triage(moved)).step is TriageStep.SKIPPED
    assert (await inbox.triage(closed)).step is TriageStep.SKIPPED
    assert (await inbox.triage(999)).step is TriageStep.SKIPPED
    assert await interactions.open_count(agent="triage") == 0


async def test_each_answer_on_the_card(parts):
    tasks, interactions, inbox = parts
    ids = [await new_task(tasks, n, f"thing {n}") for n in range(1, 5)]
    for task_id in ids:
        assert (await inbox.triage(task_id)).step is TriageStep.ASKED
    cards = [(await tasks.get(task_id)).triage_interaction_id for task_id in ids]

    text = await inbox.answer(ids[0], await settled(interactions, cards[0], "@waiting"))
    assert text == f"Task {ids[0]} → @waiting: thing 1"
    assert (await tasks.get(ids[0])).triaged_by == "owner Alice"

    text = await inbox.answer(ids[1], await settled(interactions, cards[1], DROP))
    assert text == f"Task {ids[1]} dropped: thing 2"
    assert (await tasks.get(ids[1])).closed_as is Closed.DROPPED

    text = await inbox.answer(ids[2], await settled(interactions, cards[2], "@reference"))
    assert text == f"Task {ids[2]} → @reference: thing 3"
    assert (await tasks.get(ids[2])).closed_as is Closed.FILED

    skipped = await settled(interactions, cards[3], None, outcome=InteractionOutcome.EXPIRED)
    assert await inbox.answer(ids[3], skipped) == f"Task {ids[3]} stays in the inbox."
    assert (await tasks.get(ids[3])).state is State.INBOX


async def test_a_late_answer_says_what_happened_and_changes_nothing(parts):
    tasks, interactions, inbox = parts
    triaged = await new_task(tasks, 1, "one")
    closed = await new_task(tasks, 2, "two")
    for task_id in (triaged, closed):
        await inbox.triage(task_id)
    cards = {t: (await tasks.get(t)).triage_interaction_id for t in (triaged, closed)}
    await tasks.triage(triaged, Triage(State.NEXT, "owner Bob"))
    await tasks.close(closed, Closed.DONE)

    text = await inbox.answer(triaged, await settled(interactions, cards[triaged], "@someday"))
    assert text == f"Task {triaged} was already triaged to @next (owner Bob)."
    assert (await tasks.get(triaged)).state is State.NEXT
    text = await inbox.answer(closed, await settled(interactions, cards[closed], DROP))
    assert text == f"Task {closed} is already closed (inbox, done)."
    assert (await tasks.get(closed)).closed_as is Closed.DONE


async def test_an_answer_that_is_no_state_label_is_refused_plainly(parts):
    tasks, interactions, inbox = parts
    task_id = await new_task(tasks, 1, "one")
    await inbox.triage(task_id)
    card = (await tasks.get(task_id)).triage_interaction_id
    for odd in ("inbox", "@nowhere"):
        text = await inbox.answer(task_id, await settled(interactions, card, odd))
        assert text == f"Task {task_id} stays in the inbox: that is not one of the card's answers."
        assert (await tasks.get(task_id)).state is State.INBOX
