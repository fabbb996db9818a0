"""The agent runs this worker process is carrying, as tasks on its event loop.

``run_agent`` claims a run and hands it to a task here, then returns: a run holds no worker
thread while it works (a CLI may take an hour; deliveries must not wait for it). The run's row,
not the Dramatiq message, is what keeps it alive: it beats a heartbeat while its task runs, and
``sweep_runs`` takes up a run whose heartbeat stopped. At shutdown each task is cancelled and its
run handed back as queued, to go on from its last checkpoint in the next worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

logger = logging.getLogger(__name__)
SHUTDOWN_GRACE = 10.0  # seconds the runs have to stop (and kill what they started)

_tasks: dict[int, asyncio.Task] = {}


def carry(run: Any, work: Coroutine[Any, Any, Any]) -> None:
    """Run ``work`` on this loop, remembered with ``run`` (as claimed) until it ends."""
    task = asyncio.get_running_loop().create_task(work, name=f"aegis-run-{run.id}")
    _tasks[run.id] = (run, task)

    def forget(done: asyncio.Task) -> None:
        if _tasks.get(run.id, (None, None))[1] is done:  # not a later claim of the same run
            del _tasks[run.id]
        if not done.cancelled() and done.exception() is not None:
            logger.error("run %s stopped with an error", run.id, exc_info=done.exception())

    task.add_done_callback(forget)


def carried() -> list[int]:
    return sorted(_tasks)


async def stop_all(hand_back: Callable[[Any], Awaitable[Any]]) -> int:
    """Cancel every run this process carries; ``hand_back(run)`` queues it again."""
    held = list(_tasks.values())
    for _, task in held:
        task.cancel()
    if held:
        await asyncio.wait([task for _, task in held], timeout=SHUTDOWN_GRACE)
    for run, _ in held:
        try:
            await hand_back(run)
        except Exception:
            logger.warning("run %s not handed back; the run sweep takes it up", run.id)
    return len(held)
