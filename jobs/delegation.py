"""Assigned tasks handed to their agents (bot/agents/delegation.py): a sweep that spawns one child
per task, and the child that starts the task's run.

``sweep_assigned`` (every 15 minutes) picks the oldest eligible tasks, at most its quota, and
returns: it never waits for a run. ``run_assigned_task`` looks at its task again (it may have
been closed, moved or reassigned since the sweep) and starts one run, keyed by the task and
the run before it, so a child delivered twice, or two sweeps' children for one task, make
one run.
"""

from __future__ import annotations

import asyncio

import dramatiq

from bot.agents.delegation import Delegation, Limits
from jobs.worker.broker import require_broker
from jobs.worker.resources import Resources, resources

require_broker()


def delegation(res: Resources) -> Delegation:
    # A run reports in the chat its task was captured in, else to the first owner.
    settings = res.platform.settings
    return Delegation(res.platform, Limits.from_settings(settings), settings.owner_ids)


@dramatiq.actor(queue_name="default", max_retries=0)
async def sweep_assigned(schedule: str = "") -> dict:
    picked = await delegation(await resources()).pick()
    for task_id in picked.task_ids:
        await asyncio.to_thread(run_assigned_task.send, task_id)
    return {"tasks_queued": len(picked.task_ids), "tasks_over_expensive_cap": picked.over_cap}


@dramatiq.actor(queue_name="default", max_retries=5, min_backoff=1000)
async def run_assigned_task(task_id: int) -> dict:
    started = await delegation(await resources()).start(task_id)
    if started.run is not None:
        return {"runs_started": 1}
    return {f"tasks_{started.step.value}": 1}
