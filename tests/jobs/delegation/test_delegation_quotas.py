"""The sweep's quotas over a fleet of assigned tasks, end to end on SQLite and Postgres: expensive
runs kept under their cap, and a thousand assigned tasks of which one sweep sends only its quota
per tick, the oldest first. A real Dramatiq worker on Redis runs the children and the script
agents of tests/helpers/delegation.py; a test waits for states, never for a time.
"""

from __future__ import annotations

import asyncio

from sqlalchemy import insert, select

from bot.agents.agent_run import RunState
from bot.store.tables import agent_runs, tasks
from bot.tasks.task import State
from bot.timeutil import now
from tests.helpers.delegation import (
    aegis,
    assign,
    capture,
    job_count,
    job_summaries,
    runs_of,
    sweep,
)
from tests.helpers.stack import OWNER_CHAT, eventually


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
