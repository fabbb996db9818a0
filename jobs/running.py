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


def carry(run_id: int, work: Coroutine[Any, Any, Any]) -> None:
    """Run ``work`` on this loop, remembered under ``run_id`` until it ends."""
    task = asyncio.get_running_loop().create_task(work, name=f"aegis-run-{run_id}")
    _tasks[run_id] = task

    def forget(done: asyncio.Task) -> None:
        _tasks.pop(run_id, None)
        if not done.cancelled() and done.exception() is not None:
            logger.error("run %s stopped with an error", run_id, exc_info=done.exception())

    task.add_done_callback(forget)


def carried() -> list[int]:
    return sorted(_tasks)


async def stop_all(hand_back: Callable[[int], Awaitable[Any]]) -> int:
    """Cancel every run this process carries; ``hand_back(run_id)`` queues it again."""
    tasks = dict(_tasks)
    for task in tasks.values():
        task.cancel()
    if tasks:
        await asyncio.wait(tasks.values(), timeout=SHUTDOWN_GRACE)
    for run_id in tasks:
        try:
            await hand_back(run_id)
        except Exception:
            logger.warning("run %s not handed back; the run sweep takes it up", run_id)
    return len(tasks)
