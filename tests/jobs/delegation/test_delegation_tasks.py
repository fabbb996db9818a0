"""Assigned tasks handed to their agents, one task at a time, end to end on SQLite and Postgres:
tasks captured by writing and forwarding to the real bot, the sweep enqueued as the clock would,
a real Dramatiq worker on Redis running the children and the script agents of an aegis.yaml
written into the data dir (tests/helpers/delegation.py), cards tapped through the emulator.

The executor a task's origin chooses and the task done, a run parked on a card parking its task,
a task nobody can run commented and parked, the cooldown before a task runs again, and a task
template filled in. Whether a job has finished is read from its ``runs`` row and how a run ended
from its ``agent_runs`` row; a test waits for states, never for a time.
"""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import update

from bot.agents.agent_run import RunOrigin, RunState
from bot.agents.delegation import fill
from bot.store.tables import agent_runs
from bot.tasks.task import Closed, State, Task
from bot.timeutil import now
from tests.helpers.delegation import (
    assign,
    capture,
    run_in,
    runs_of,
    settled,
    sweep,
    task_of,
    task_shown,
)
from tests.helpers.runs import buttons, message_with
from tests.helpers.stack import OWNER_CHAT, eventually

ANN = {"id": 42, "is_bot": False, "first_name": "Ann"}
WHEN = 1_700_000_000
NEWS = {
    "type": "channel",
    "chat": {"id": -1001234, "type": "channel", "title": "Daily News", "username": "daily"},
    "message_id": 77,
    "date": WHEN,
}


async def test_an_assigned_task_runs_the_executor_its_origin_chooses_and_ends_done(stack):
    forwarded = await capture(
        stack,
        "Bees are in decline\nA long read on pollinators",
        forward_origin={"type": "user", "sender_user": ANN, "date": WHEN},
    )
    posted = await capture(stack, "Big news today", forward_origin=NEWS)
    # Through the bot, as the owner would: a label, a state, an assignee.
    for command in (f"/label {forwarded} +read", f"/assign {forwarded} reader"):
        await stack.ask(command)
    await stack.services.platform.tasks.move(forwarded, State.NEXT, "owner test")
    await assign(stack, posted, "reader")

    summary, children = await sweep(stack)
    assert summary == {"tasks_queued": 2, "tasks_over_expensive_cap": 0}
    assert children == [{"runs_started": 1}, {"runs_started": 1}]

    [first] = await runs_of(stack, forwarded)
    [second] = await runs_of(stack, posted)
    assert (first.agent, first.origin, first.chat_id) == ("reader", RunOrigin.TASK, OWNER_CHAT)
    assert first.request == f"Read task {forwarded}: Bees are in decline [read] <>"
    assert second.request == ("Summarise the post at https://t.me/daily/77: Big news today")
    for run in (first, second):
        await run_in(stack, run.id, RunState.COMPLETED)
    done = await settled(stack, forwarded, lambda task: not task.is_open)
    assert done.closed_as is Closed.DONE
    assert (await settled(stack, posted, lambda task: not task.is_open)).closed_as is Closed.DONE

    [comment] = await stack.services.platform.tasks.comments(forwarded)
    assert comment.startswith(f"Run #{first.id} by reader: demo.read_clock: ran: ")
    detail = await task_shown(stack, forwarded)
    assert detail["text"].startswith(f"Task {forwarded} [@next, done]: Bees are in decline")
    assert (
        f"Latest comments:\n- Run #{first.id} by reader: demo.read_clock: ran:" in (detail["text"])
    )
    await message_with(stack, re.escape(f"Reader on: Read task {forwarded}"))
    # Nothing is left to hand out.
    assert await sweep(stack) == ({"tasks_queued": 0, "tasks_over_expensive_cap": 0}, [])


async def test_a_run_parked_on_a_card_parks_its_task_until_the_card_is_approved(stack):
    task_id = await capture(stack, "Buy stamps")
    await assign(stack, task_id, "writer", "write")
    _, children = await sweep(stack)
    assert children == [{"runs_started": 1}]
    [run] = await runs_of(stack, task_id)
    parked = await run_in(stack, run.id, RunState.PARKED)
    waiting = await settled(stack, task_id, lambda task: task.state is State.WAITING)
    assert waiting.is_open
    [comment] = await stack.services.platform.tasks.comments(task_id)
    assert comment == f"Run #{run.id} by writer waits for you on card #{parked.waiting_on}."

    # @waiting and a parked run: the next sweep leaves it alone.
    assert await sweep(stack) == ({"tasks_queued": 0, "tasks_over_expensive_cap": 0}, [])
    assert len(await runs_of(stack, task_id)) == 1

    card = await message_with(stack, rf"Approval needed · card #{parked.waiting_on} · from writer")
    tapped = await stack.emulator.tap(OWNER_CHAT, card["message_id"], buttons(card)["Approve"])
    await eventually(lambda: stack.emulator.callback_answer(tapped["callback_query_id"]))
    await run_in(stack, run.id, RunState.COMPLETED)
    done = await settled(stack, task_id, lambda task: not task.is_open)
    assert (done.state, done.closed_as) == (State.WAITING, Closed.DONE)
    written = stack.settings.data_dir / "demo" / f"task-{run.id}.txt"
    assert written.read_text() == "Write down Buy stamps"
    comments = await stack.services.platform.tasks.comments(task_id)
    assert comments[-1].startswith(f"Run #{run.id} by writer: demo.write_file: ran: ")
    assert len(await runs_of(stack, task_id)) == 1


async def test_a_task_nobody_can_run_is_commented_and_parked_and_never_run(stack):
    no_harness = await capture(stack, "Haunt the attic")
    no_handler = await capture(stack, "Read this later")  # written, not forwarded; no label
    not_declared = await capture(stack, "Feed the cat")
    await assign(stack, no_harness, "ghost")
    await assign(stack, no_handler, "reader", "urgent")
    await assign(stack, not_declared, "vanished")  # an agent since removed from aegis.yaml

    summary, children = await sweep(stack)
    assert summary["tasks_queued"] == 3
    assert children == [{"tasks_parked": 1}] * 3
    platform = stack.services.platform
    for task_id in (no_harness, no_handler, not_declared):
        task = await task_of(stack, task_id)
        assert task.state is State.WAITING and task.is_open
        assert await runs_of(stack, task_id) == []
    [ghost] = await platform.tasks.comments(no_harness)
    assert ghost == (
        "No executor: ghost has no harness in aegis.yaml, so it cannot run. Declare "
        "agents.ghost.harness (script, http, claude-code, codex, opencode) and a tasks: entry "
        "whose when: matches it (origin: self or message; labels: none)."
    )
    [reader] = await platform.tasks.comments(no_handler)
    assert reader == (
        "No executor: reader has no tasks: entry for this task (origin: self or message; "
        "labels: urgent). Add one under agents.reader.tasks, e.g. "
        '- when: {origin: [message], labels: [urgent]} do: "… {text}"'
    )
    [vanished] = await platform.tasks.comments(not_declared)
    assert vanished.startswith("No executor: vanished is not an agent declared in aegis.yaml.")
    detail = await task_shown(stack, no_handler)
    assert "Latest comments:\n- No executor: reader has no tasks: entry" in detail["text"]

    assert await sweep(stack) == ({"tasks_queued": 0, "tasks_over_expensive_cap": 0}, [])


async def test_a_task_is_not_run_again_within_the_cooldown(stack):
    task_id = await capture(stack, "Think it over")
    await assign(stack, task_id, "sleeper")
    await sweep(stack)
    [first] = await runs_of(stack, task_id)
    await run_in(stack, first.id, RunState.TIMED_OUT)
    await settled(stack, task_id, lambda task: task.state is State.WAITING)
    assert "timed out" in (await stack.services.platform.tasks.comments(task_id))[-1]

    # The owner puts it back; the run started moments ago, so the sweep waits.
    await stack.services.platform.tasks.move(task_id, State.NEXT, "owner test")
    assert await sweep(stack) == ({"tasks_queued": 0, "tasks_over_expensive_cap": 0}, [])

    cooldown = timedelta(seconds=stack.settings.delegation_cooldown_seconds)
    async with stack.store.write() as conn:
        await conn.execute(
            update(agent_runs)
            .where(agent_runs.c.id == first.id)
            .values(created_at=now() - cooldown - timedelta(minutes=1))
        )
    summary, children = await sweep(stack)
    assert (summary["tasks_queued"], children) == (1, [{"runs_started": 1}])
    first_again, second = await runs_of(stack, task_id)
    assert first_again.id == first.id and second.idempotency_key == (
        f"task:{task_id}:after:{first.id}"
    )
    await run_in(stack, second.id, RunState.TIMED_OUT)


def test_a_template_is_filled_in_one_pass_never_with_format():
    task = Task(
        id=7,
        title="{text} and {0.__class__}",
        body="Body {id}",
        state=State.NEXT,
        labels=("read", "later"),
        assignee="reader",
        attachments=({"kind": "link", "url": "https://example.com/a"},),
        origin_kind="user",
        origin_name="Ann",
        origin_user_id=42,
        origin_link=None,
        chat_id=1,
        message_id=2,
        created_at=now(),
        updated_at=now(),
        triaged_by=None,
        triage_interaction_id=None,
        closed_at=None,
        closed_as=None,
    )
    filled = fill("#{id} {title} | {labels} | {link} | {unknown} {{id}}", task)
    assert filled == (
        "#7 {text} and {0.__class__} | read, later | https://example.com/a | {unknown} {7}"
    )
