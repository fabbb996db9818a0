"""Assigned tasks handed to their agents, end to end on SQLite and Postgres: tasks captured by
writing and forwarding to the real bot, the sweep enqueued as the clock would, a real Dramatiq
worker on Redis running the children and the script agents of an aegis.yaml written into the
data dir, cards tapped through the emulator.

Whether a job has finished is read from its ``runs`` row and how a run ended from its
``agent_runs`` row; a test waits for states, never for a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from datetime import timedelta
from typing import Any

import dramatiq
import pytest
from sqlalchemy import func, insert, select, update

from bot.agents.agent_run import RunOrigin, RunState
from bot.agents.delegation import fill
from bot.store.tables import agent_runs, runs, tasks
from bot.tasks.task import Closed, State, Task
from bot.timeutil import now
from tests.helpers.runs import buttons, message_with
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack

CONFIG = """\
agents:
  reader:
    name: Reader
    harness: script
    tools: [demo.read_clock]
    deadline: 60
    steps:
      - say: "Reader on: {request}"
      - call: demo.read_clock
    tasks:
      - when: {origin: [forward], labels: [read]}
        do: "Read task {id}: {title} [{labels}] <{link}>"
      - when: {origin: [channel]}
        do: "Summarise the post at {link}: {text}"
  writer:
    harness: script
    tools: [demo.write_file]
    deadline: 60
    steps:
      - call: demo.write_file
        args: {name: "task-{run}.txt", text: "{request}"}
    tasks:
      - when: {labels: [write]}
        do: "Write down {title}"
  sleeper:
    harness: script
    deadline: 1
    steps:
      - sleep: 60
    tasks:
      - do: "Sleep on {title}"
  thinker:
    harness: script
    expensive: true
    deadline: 60
    steps:
      - say: "Thinking about {request}"
    tasks:
      - do: "Think about {title}"
  clerk:
    harness: script
    deadline: 60
    steps:
      - say: "Filed: {request}"
    tasks:
      - do: "File task {id}: {title}"
  ghost:
    tools: [demo.read_clock]
"""
ANN = {"id": 42, "is_bot": False, "first_name": "Ann"}
WHEN = 1_700_000_000
NEWS = {
    "type": "channel",
    "chat": {"id": -1001234, "type": "channel", "title": "Daily News", "username": "daily"},
    "message_id": 77,
    "date": WHEN,
}


@contextlib.asynccontextmanager
async def aegis(tmp_path, database_url, redis_url, namespace, *, queues=None):
    """aegis with CONFIG; ``queues``: the worker serves only these (runs left queued)."""
    settings = make_settings(tmp_path / "data", database_url, redis_url)
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(CONFIG, encoding="utf-8")
    async with running_stack(settings, namespace=namespace, worker=queues is None) as running:
        if queues is None:
            yield running
            return
        worker = dramatiq.Worker(running.broker, queues=queues, worker_threads=2)
        worker.start()
        try:
            yield running
        finally:
            # Off the loop: a worker finishing a request to the emulator needs this loop.
            await asyncio.to_thread(worker.stop)


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    async with aegis(tmp_path, database_url, redis_server_url, redis_namespace) as running:
        yield running


async def capture(stack, text: str, **options: Any) -> int:
    [receipt] = await stack.ask(text, **options)
    found = re.match(r"Captured as task (\d+):", receipt["text"])
    assert found, receipt["text"]
    return int(found.group(1))


async def assign(stack, task_id: int, agent: str, *labels: str, state=State.NEXT) -> None:
    """What the owner does with /label, a button and /assign, through the same core."""
    service = stack.services.platform.tasks
    await service.move(task_id, state, "owner test", labels=labels)
    await service.assign(task_id, agent)


async def job_count(stack, job: str) -> int:
    async with stack.store.read() as conn:
        query = select(func.count()).select_from(runs).where(runs.c.job == job)
        return (await conn.execute(query)).scalar_one()


async def job_summaries(stack, job: str, count: int) -> list[dict]:
    """The summaries of the first ``count`` runs of ``job``, once that many have finished."""

    async def finished():
        async with stack.store.read() as conn:
            query = select(runs.c.summary).where(runs.c.job == job).order_by(runs.c.id)
            rows = (await conn.execute(query)).scalars().all()
        return [rows] if len(rows) >= count else None

    [summaries] = await eventually(finished, timeout=30)
    return list(summaries[:count])


async def sweep(stack) -> tuple[dict, list[dict]]:
    """Run the sweep once, as the clock would; its summary and those of the children it sent."""
    swept, done = (
        await job_count(stack, "sweep_assigned"),
        await job_count(stack, "run_assigned_task"),
    )
    await stack.services.platform.interactions.enqueue("sweep_assigned", "assigned-sweep")
    summary = (await job_summaries(stack, "sweep_assigned", swept + 1))[swept]
    queued = summary["tasks_queued"]
    children = await job_summaries(stack, "run_assigned_task", done + queued)
    return summary, children[done:]


async def runs_of(stack, task_id: int) -> list:
    query = select(agent_runs).where(agent_runs.c.task_id == task_id).order_by(agent_runs.c.id)
    async with stack.store.read() as conn:
        return (await conn.execute(query)).all()


async def run_in(stack, run_id: int, *states: RunState, timeout: float = 30) -> Any:
    async def reached():
        async with stack.store.read() as conn:
            row = (await conn.execute(select(agent_runs).where(agent_runs.c.id == run_id))).one()
        return row if row.status in states else None

    return await eventually(reached, timeout=timeout)


async def task_of(stack, task_id: int) -> Task:
    return await stack.services.platform.tasks.get(task_id)


async def settled(stack, task_id: int, check) -> Task:
    async def reached():
        task = await task_of(stack, task_id)
        return task if check(task) else None

    return await eventually(reached, timeout=30)


async def task_shown(stack, task_id: int) -> dict:
    """The answer to /task, among what runs may be saying in the chat meanwhile."""
    sent = await stack.send(f"/task {task_id}")
    return await message_with(stack, rf"^Task {task_id} \[", after=sent["message_id"])


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


async def test_expensive_runs_stay_under_the_cap_across_the_fleet(
    tmp_path, database_url, redis_server_url, redis_namespace
):
    # The worker leaves the runs queue alone, so the runs it is asked for stay queued: under
    # way, as far as the cap is concerned, for as long as the test looks.
    async with aegis(
        tmp_path, database_url, redis_server_url, redis_namespace, queues={"default", "outbox"}
    ) as stack:
        thoughts = [await capture(stack, f"Big question {n}") for n in (1, 2, 3)]
        cheap = [await capture(stack, f"File receipt {n}") for n in (1, 2, 3)]
        for task_id in thoughts:
            await assign(stack, task_id, "thinker")
        for task_id in cheap:
            await assign(stack, task_id, "clerk")
        assert stack.settings.delegation_expensive_cap == 2
        assert stack.settings.delegation_per_tick == 5

        # The two oldest expensive tasks, and the third leaves its place in the quota to the
        # cheap ones behind it.
        summary, children = await sweep(stack)
        assert summary == {"tasks_queued": 5, "tasks_over_expensive_cap": 1}
        assert children == [{"runs_started": 1}] * 5
        started = {t: [r.status for r in await runs_of(stack, t)] for t in (*thoughts, *cheap)}
        assert started == {
            **{task_id: [RunState.QUEUED] for task_id in (*thoughts[:2], *cheap)},
            thoughts[2]: [],
        }

        # At the cap: the sweep does not pick the third, and a child sent for it anyway
        # looks again and leaves it for later.
        assert await sweep(stack) == ({"tasks_queued": 0, "tasks_over_expensive_cap": 1}, [])
        done = await job_count(stack, "run_assigned_task")
        await stack.services.platform.interactions.enqueue("run_assigned_task", thoughts[2])
        assert (await job_summaries(stack, "run_assigned_task", done + 1))[done:] == [
            {"tasks_over_cap": 1}
        ]
        assert await runs_of(stack, thoughts[2]) == []

        # One expensive run ends: there is room for one more.
        [ended] = await runs_of(stack, thoughts[0])
        await stack.services.platform.runs.cancel(ended.id)
        summary, children = await sweep(stack)
        assert (summary["tasks_queued"], children) == (1, [{"runs_started": 1}])
        assert [r.status for r in await runs_of(stack, thoughts[2])] == [RunState.QUEUED]


async def test_a_thousand_assigned_tasks_one_sweep_sends_only_its_quota(stack):
    moment = now()
    rows = [
        {
            "title": f"Receipt {n}",
            "body": f"Receipt {n}",
            "search_text": f"receipt {n}",
            "state": State.NEXT,
            "labels": [],
            "assignee": "clerk",
            "attachments": [],
            "origin_kind": "user",
            "chat_id": OWNER_CHAT,
            "created_at": moment,
            "updated_at": moment,
        }
        for n in range(1, 1001)
    ]
    async with stack.store.write() as conn:
        await conn.execute(insert(tasks), rows)
    quota = stack.settings.delegation_per_tick
    assert quota == 5

    summary, children = await sweep(stack)
    assert summary == {"tasks_queued": quota, "tasks_over_expensive_cap": 0}
    assert children == [{"runs_started": 1}] * quota

    async def closed_ids():
        query = select(tasks.c.id).where(tasks.c.closed_at.is_not(None)).order_by(tasks.c.id)
        async with stack.store.read() as conn:
            found = (await conn.execute(query)).scalars().all()
        return found if len(found) >= quota else None

    # The oldest first, each run to its end and its task closed; nothing more once the queues
    # are empty.
    assert await eventually(closed_ids, timeout=30) == [1, 2, 3, 4, 5]
    for queue in ("default", "runs"):
        await asyncio.to_thread(stack.broker.join, queue, timeout=20_000)
    assert await job_count(stack, "run_assigned_task") == quota
    started = await _all_runs(stack)
    assert sorted(run.task_id for run in started) == [1, 2, 3, 4, 5]
    assert {run.status for run in started} == {RunState.COMPLETED}
    assert await closed_ids() == [1, 2, 3, 4, 5]

    summary, _ = await sweep(stack)
    assert summary["tasks_queued"] == quota
    assert sorted(r.task_id for r in await _all_runs(stack))[-5:] == [6, 7, 8, 9, 10]


async def _all_runs(stack) -> list:
    async with stack.store.read() as conn:
        return (await conn.execute(select(agent_runs))).all()


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
