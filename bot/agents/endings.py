"""What the end of a run means for the task it was started for.

Completed closes the task as done, with the run's result as a comment. Anything else (parked on
a card, failed, timed out, cancelled) moves it to ``@waiting`` with a comment saying why: a
person has something to do, and ``@waiting`` is what keeps the assigned-task sweep from
starting it again. A task is never completed while a person still has something to do.
"""

from __future__ import annotations

import logging

from bot.agents.agent_run import AgentRun, RunState
from bot.errors import TaskRefused
from bot.tasks.task import Closed, State
from bot.tasks.tasks import Tasks

logger = logging.getLogger(__name__)


async def settle_task(tasks: Tasks, run: AgentRun) -> None:
    if run.task_id is None:
        return
    try:
        if run.status is RunState.COMPLETED:
            await tasks.comment(
                run.task_id, f"Run #{run.id} by {run.agent}: {run.result}", agent=run.agent
            )
            await tasks.close(run.task_id, Closed.DONE)
            return
        if run.status is RunState.PARKED:
            why = f"Run #{run.id} by {run.agent} waits for {run.waits_for()}."
        else:
            why = f"Run #{run.id} by {run.agent} {ended_how(run)}: {run.error}"
        await tasks.comment(run.task_id, why, agent=run.agent)
        task = await tasks.get(run.task_id)
        if task is not None and task.is_open and task.state is not State.WAITING:
            await tasks.move(run.task_id, State.WAITING, f"run #{run.id}")
    except TaskRefused as exc:  # closed or gone meanwhile: nothing to settle
        logger.info("task %s of run %s not settled: %s", run.task_id, run.id, exc)


def ended_how(run: AgentRun) -> str:
    return {
        RunState.FAILED: "failed",
        RunState.TIMED_OUT: "timed out",
        RunState.CANCELLED: "was cancelled",
    }.get(run.status, run.status.value.replace("_", " "))
