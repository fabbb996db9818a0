"""Looking at a long process for an agent's run (bot/monitors/process_watch.py), on the worker.

The clock sends one ``check_process`` message per look that is due. The actor starts the look
on this worker's event loop and returns at once, like the monitors' checks: a look runs up to
three commands, each under its own ceiling, and a worker thread held that long would keep
deliveries waiting. A look runs the ``done`` command (exit 0: passed), then ``fail`` (exit 0:
failed), then ``progress`` (its last line is shown on the run's progress message). The look
that ends the watch wakes the run parked on it; one whose run has ended meanwhile (cancelled)
abandons the watch instead. A worker killed mid-look loses only that look: the clock claims the
next one an interval later.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import dramatiq

from bot.errors import AegisError, BrokerError
from bot.monitors.process_watch import Look, ProcessWatchSpec, WatchStatus
from jobs.harness import CONTINUE_ACTOR
from jobs.monitors.probes import PerLoop, cmd
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()
logger = logging.getLogger(__name__)


@dramatiq.actor(queue_name="default", max_retries=0)
async def check_process(watch_id: int) -> dict:
    """Start one look at process watch ``watch_id`` and return."""
    platform = (await resources()).platform
    looks = _looks.get()
    task = asyncio.create_task(_look_and_record(platform, watch_id))
    looks.add(task)  # held: the loop keeps only weak references to its tasks
    task.add_done_callback(looks.discard)
    return {"process_looks_started": 1}


async def look(spec: ProcessWatchSpec) -> Look:
    """Run the watch's commands once, in its workdir: what they say about the process now."""
    workdir = Path(spec.workdir) if spec.workdir else None
    done = await cmd.run(spec.done, spec.timeout_seconds, workdir)
    if done.problem is not None:
        return Look(WatchStatus.BROKEN, detail=f"the done command: {done.problem}")
    if done.code == 0:
        return Look(WatchStatus.PASSED, detail=done.last_line or None)
    if spec.fail is not None:
        failed = await cmd.run(spec.fail, spec.timeout_seconds, workdir)
        if failed.problem is not None:
            return Look(WatchStatus.BROKEN, detail=f"the fail command: {failed.problem}")
        if failed.code == 0:
            return Look(WatchStatus.FAILED, detail=failed.last_line or None)
    progress = None
    if spec.progress is not None:
        shown = await cmd.run(spec.progress, spec.timeout_seconds, workdir)
        progress = shown.problem or shown.last_line or "(no output)"
    return Look(WatchStatus.WATCHING, progress=progress)


async def _look_and_record(platform, watch_id: int) -> None:
    try:
        await _look_at(platform, watch_id)
    except AegisError as exc:  # an outage: this look is lost, the next one looks again
        logger.warning("process watch #%s: a look was not recorded: %s", watch_id, exc)
    except Exception:
        logger.exception("process watch #%s: a look failed", watch_id)


async def _look_at(platform, watch_id: int) -> None:
    watches = platform.monitors.processes
    watch = await watches.get(watch_id)
    if watch is None or watch.status.is_over:
        return
    run = await platform.runs.get(watch.run_id)
    if run is None or run.status.is_over:
        await watches.abandon(watch_id)
        return
    recorded = await watches.record(watch_id, await look(watch.spec))
    if recorded is None:  # another look ended it first
        return
    if recorded.ended_it:
        try:
            await platform.interactions.enqueue(CONTINUE_ACTOR, watch.run_id, None, watch_id)
        except BrokerError:  # the run sweep wakes it (bot/agents/agent_runs.py)
            logger.warning("broker down: run #%s waits for the run sweep", watch.run_id)
        return
    if recorded.progress_changed:
        shown = await platform.runs.show_waiting(
            watch.run_id, watch_id, recorded.watch.waiting_step()
        )
        if shown is not None:
            await platform.show_run(shown)


_looks = PerLoop(set)
