"""What the tests of delegation (assigned tasks handed to their agents) share: the aegis.yaml of
their script agents, aegis started with it, and the steps they take and wait for: capture and
assign a task, run the sweep as the clock would, read the runs of a task and wait for their
states and the task's."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import dramatiq
from sqlalchemy import func, select

from bot.agents.agent_run import RunState
from bot.store.tables import agent_runs, runs
from bot.tasks.task import State, Task
from tests.helpers.runs import message_with
from tests.helpers.stack import eventually, make_settings, running_stack

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
