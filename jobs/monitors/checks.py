"""Monitor checks on the worker.

The clock sends the slots due within the next half minute in ``check_monitors`` messages (each
slot with its monitor's spec and the state it was in). The actor starts every check on this
worker's event loop as a task of its own that waits for its slot and probes under its own hard
timeout, and it returns at once: a check may take its whole timeout (10 s by default), and a
worker thread held that long would leave deliveries waiting behind a few stalled targets. A
command monitor's row is read again before its command runs: one removed, paused or changed
since the claim is not run as it was.

The results are recorded in batches, one transaction for all that finished within
``RECORD_EVERY``. A result that may be news (a failure, or any result of a monitor that was not
up) is recorded at once, with everything waiting before it; a success of a monitor that was up,
the common case, tells nobody anything, so it waits for company. The price is that a worker
killed mid-check loses those checks, never an alert: the next slot checks again, and what a
check decided is committed with its messages in the outbox before anything is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from datetime import datetime

import dramatiq

from aegis.botapi.endpoint import owner_chats
from bot.errors import AegisError
from bot.monitors.monitor import MonitorKind, MonitorSpec, MonitorState
from bot.monitors.monitors import Check
from bot.timeutil import now
from jobs.monitors import probe
from jobs.monitors.probes import PerLoop
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()
logger = logging.getLogger(__name__)
# Seconds a success of a monitor that was up waits for others to share its transaction: the
# transaction, not the row, is most of what recording costs (bench/monitors.py). Its last check
# shows in /monitors that much later; nothing else waits on it.
RECORD_EVERY = 15.0  # with CLAIM_AHEAD, in STALE_GRACE of bot/monitors/monitor.py
# A slot further ahead than this (the clock's claim window and a margin: clocks apart) is
# checked then, not later.
MAX_EARLY = 40.0


# On the default queue: it only starts the checks, and a queue of its own would add two more
# consumers to every worker, each waking to poll Redis every few seconds (jobs/worker/broker.py).
@dramatiq.actor(queue_name="default", max_retries=0)
async def check_monitors(due: list) -> dict:
    """Start the checks of these slots (``[monitor id, slot, spec, state]`` each) and return."""
    platform = (await resources()).platform
    batch = _batches.get()
    for entry in due:
        monitor_id, slot, spec, was_up = slot_of(entry)
        batch.start(platform, monitor_id, slot, spec, was_up=was_up)
    return {"checks_started": len(due)}


def slot_of(entry: list) -> tuple[int, datetime, MonitorSpec, bool]:
    """A slot as the clock sends it: its monitor's id, the slot, the spec (its row's JSON text;
    a clock of an older release sends it decoded) and whether the monitor was up (an older
    clock sends no state: taken as not up)."""
    monitor_id, slot, spec, *state = entry
    was_up = state == [MonitorState.UP]
    spec = _spec_of(spec) if isinstance(spec, str) else MonitorSpec.from_json(spec)
    return monitor_id, datetime.fromisoformat(slot), spec, was_up


@functools.lru_cache(maxsize=4096)  # the same text every interval: read once (specs are frozen)
def _spec_of(text: str) -> MonitorSpec:
    return MonitorSpec.from_json(json.loads(text))


class _Batch:
    """This loop's checks under way, and their results waiting to be recorded together."""

    def __init__(self) -> None:
        self.running: set[asyncio.Task] = set()  # held: the loop keeps only weak references
        self.done: list[Check] = []
        self.flushing: asyncio.Task | None = None
        self.hurry = asyncio.Event()  # a result that may be news: record it now

    def start(self, platform, monitor_id: int, slot: datetime, spec: MonitorSpec, *, was_up: bool):
        task = asyncio.create_task(self._check(platform, monitor_id, slot, spec, was_up))
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def _check(self, platform, monitor_id, slot: datetime, spec, was_up: bool) -> None:
        # The clock claims slots seconds ahead (bot/monitors/monitors.py, CLAIM_AHEAD).
        early = (slot - now()).total_seconds()
        if early > 0:
            await asyncio.sleep(min(early, MAX_EARLY))
        if spec.kind is MonitorKind.CMD and not await _still_wanted(platform, monitor_id, spec):
            return
        result = await probe.check(spec)
        self.done.append((monitor_id, result, now()))
        if not (result.ok and was_up):  # it may cross a threshold, or end a state
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


async def _still_wanted(platform, monitor_id: int, spec: MonitorSpec) -> bool:
    """Whether a command monitor is still as the clock claimed its slot: not removed, paused
    or changed in the half minute since. A command is run on the server, so what the owner
    took away is never run once more; when the rows cannot be read, it is not run either."""
    try:
        monitor = await platform.monitors.get(monitor_id)
    except AegisError as exc:
        logger.warning("monitor #%d's command not run: its row is unreadable: %s", monitor_id, exc)
        return False
    return monitor is not None and not monitor.paused and monitor.spec == spec


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
