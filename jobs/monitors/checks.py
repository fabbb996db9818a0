"""Monitor checks on the worker.

The clock sends the slots due within the next few seconds in ``check_monitors`` messages (each
slot with its monitor's spec). The actor starts every check on this worker's event loop as a
task of its own that waits for its slot and probes under its own hard timeout, and it returns at
once: a check may take its whole timeout (10 s by default), and a worker thread held that long
would leave deliveries waiting behind a few stalled targets. The results are recorded in
batches, one transaction for all that finished within ``RECORD_EVERY`` (at once after a failed
one). The price is that a worker killed mid-check loses those checks, never an alert: the next
slot checks again, and what a check decided is committed with its messages in the outbox before
anything is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime

import dramatiq

from aegis.botapi.endpoint import owner_chats
from bot.errors import AegisError
from bot.monitors.monitor import MonitorSpec
from bot.monitors.monitors import Check
from bot.timeutil import now
from jobs.broker import require_broker
from jobs.monitors import probe
from jobs.monitors.probes import PerLoop
from jobs.resources import resources

require_broker()
logger = logging.getLogger(__name__)
# Seconds a good check waits for others to share its transaction: one check a transaction costs
# four times what eight do (bench/monitors.py). A failed check is recorded at once.
RECORD_EVERY = 0.5
# A slot further ahead than this (the clock's claim window and a margin: clocks apart) is
# checked then, not later.
MAX_EARLY = 10.0


# On the default queue: it only starts the checks, and a queue of its own would add two more
# consumers polling Redis ten times a second each, for ever (aegis/processes.py).
@dramatiq.actor(queue_name="default", max_retries=0)
async def check_monitors(due: list) -> dict:
    """Start the checks of these slots (``[monitor id, slot, spec]`` each) and return."""
    platform = (await resources()).platform
    batch = _batches.get()
    for monitor_id, slot, spec in due:
        batch.start(platform, monitor_id, datetime.fromisoformat(slot), MonitorSpec.from_json(spec))
    return {"checks_started": len(due)}


class _Batch:
    """This loop's checks under way, and their results waiting to be recorded together."""

    def __init__(self) -> None:
        self.running: set[asyncio.Task] = set()  # held: the loop keeps only weak references
        self.done: list[Check] = []
        self.flushing: asyncio.Task | None = None
        self.hurry = asyncio.Event()  # a failed check may cross a threshold: record it now

    def start(self, platform, monitor_id: int, slot: datetime, spec: MonitorSpec) -> None:
        task = asyncio.create_task(self._check(platform, monitor_id, slot, spec))
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def _check(self, platform, monitor_id: int, slot: datetime, spec: MonitorSpec) -> None:
        # The clock claims slots seconds ahead (bot/monitors/monitors.py, CLAIM_AHEAD).
        early = (slot - now()).total_seconds()
        if early > 0:
            await asyncio.sleep(min(early, MAX_EARLY))
        result = await probe.check(spec)
        self.done.append((monitor_id, result, now()))
        if not result.ok:
            self.hurry.set()
        if self.flushing is None or self.flushing.done():
            self.flushing = asyncio.create_task(self._record(platform))

    async def _record(self, platform) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.hurry.wait(), RECORD_EVERY)
        self.hurry.clear()
        while self.done:
            checks, self.done = self.done, []
            await _record(platform, checks)


async def _record(platform, checks: list[Check]) -> None:
    chats = owner_chats(platform.settings)
    try:
        await platform.monitors.record_many(
            checks, chat_id=chats[0] if chats else None, agents=platform.monitor_agents
        )
    except AegisError as exc:  # an outage: these checks are lost, the next slots check again
        logger.warning("%d monitor checks not recorded: %s", len(checks), exc)
    except Exception:
        logger.exception("%d monitor checks not recorded", len(checks))


_batches = PerLoop(_Batch)
