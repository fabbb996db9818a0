"""``aegis clock``: exactly one per deployment. Reads ``schedules`` and the monitors' slots and
enqueues what is due; it never runs the work itself.

It also follows ``aegis.yaml``: at start and whenever the file changes, the file's schedules are
reconciled into rows (bot/upkeep/schedules.py), so a schedule added, changed or removed in the file
takes effect within a couple of seconds, with no restart. The on/off switch is read from the rows at
every tick, so a tap on /schedules takes effect at the next one.
"""

from __future__ import annotations

import asyncio
import logging

from bot.config.file import Config
from bot.config.live import LiveConfig
from bot.errors import BrokerError, StoreError
from bot.monitors.monitors import Monitors
from bot.store.database import Store
from bot.timeutil import now
from bot.upkeep.heartbeats import BEAT_EVERY, Heartbeats, process_id
from bot.upkeep.schedules import BUILTIN_SCHEDULES, Schedules

logger = logging.getLogger(__name__)


async def run_clock(
    store: Store,
    enqueue,
    stop: asyncio.Event,
    config: LiveConfig | None = None,
    monitors: Monitors | None = None,
) -> None:
    """Tick until ``stop``; ``config`` is aegis.yaml as it changes (None: no file schedules),
    ``monitors`` the monitors whose slots it enqueues, and the process watches whose looks it
    enqueues (None: none)."""
    schedules = Schedules(store)
    heartbeats = Heartbeats(store)
    follow = FileSchedules(schedules, config, monitors)
    process, started = process_id("clock"), now()
    await schedules.seed(BUILTIN_SCHEDULES)
    if monitors is not None:
        # A restart owes each open incident one "still down" (bot/monitors/incidents.py).
        await _quietly(monitors.incidents.after_restart())
    last_beat = None
    while not stop.is_set():
        if last_beat is None or now() - last_beat >= BEAT_EVERY:
            await _quietly(heartbeats.beat(process, "clock", started))
            last_beat = now()
        await _quietly(follow.reconcile_if_changed())
        await _quietly(schedules.enqueue_due(enqueue))
        waits = [await _quietly(schedules.seconds_until_next(ceiling=1.0))]
        if monitors is not None:
            await _quietly(monitors.enqueue_due(enqueue))
            waits.append(await _quietly(monitors.seconds_until_next(ceiling=1.0)))
            await _quietly(monitors.processes.enqueue_due(enqueue))
            waits.append(await _quietly(monitors.processes.seconds_until_next(ceiling=1.0)))
        wait = min((w for w in waits if w is not None), default=1.0)
        try:
            await asyncio.wait_for(stop.wait(), timeout=max(wait, 0.05))
        except TimeoutError:
            pass
    await _quietly(heartbeats.stop(process))


class FileSchedules:
    """Reconciles the file's schedules (and monitors) when the config in force is a new one.

    LiveConfig hands out the same Config object until the file changes and reads well, so
    identity is the change stamp; a file that goes bad keeps the last good one in force. A
    clock that starts on a bad file runs on the built-ins alone: that is never reconciled, or
    a typo would remove every file schedule, and the owner's switches with them.
    """

    def __init__(
        self, schedules: Schedules, config: LiveConfig | None, monitors: Monitors | None = None
    ) -> None:
        self.schedules = schedules
        self.config = config
        self.monitors = monitors
        self.reconciled: Config | None = None

    async def reconcile_if_changed(self) -> None:
        if self.config is None:
            return
        current = self.config.current()
        if current is self.reconciled:
            return
        if self.reconciled is None and self.config.problem is not None:
            return  # started on a bad file: the built-ins alone, not what the file means
        done = await self.schedules.reconcile(current.schedules)
        if self.monitors is not None:
            watched = await self.monitors.reconcile(current.monitors)
            if watched.changed:
                logger.info(
                    "monitors from aegis.yaml: added %s, updated %s, removed %s",
                    watched.added or "none",
                    watched.updated or "none",
                    watched.removed or "none",
                )
        self.reconciled = current  # only once it is written: an outage tries again next tick
        if done.changed:
            logger.info(
                "schedules from aegis.yaml: added %s, updated %s, removed %s",
                done.added or "none",
                done.updated or "none",
                done.removed or "none",
            )


async def _quietly(awaitable):
    """An outage skips this tick; the clock keeps ticking and catches up once it is over."""
    try:
        return await awaitable
    except (StoreError, BrokerError) as exc:
        logger.warning("clock tick skipped: %s", exc)
        return None
