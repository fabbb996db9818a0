"""``aegis clock``: exactly one per deployment. Reads ``schedules`` and enqueues what is due;
it never runs the work itself."""

from __future__ import annotations

import asyncio
import logging

from bot.errors import BrokerError, StoreError
from bot.heartbeats import BEAT_EVERY, Heartbeats, process_id
from bot.schedules import BUILTIN_SCHEDULES, Schedules
from bot.store import Store
from bot.timeutil import now

logger = logging.getLogger(__name__)


async def run_clock(store: Store, enqueue, stop: asyncio.Event) -> None:
    schedules = Schedules(store)
    heartbeats = Heartbeats(store)
    process, started = process_id("clock"), now()
    await schedules.seed(BUILTIN_SCHEDULES)
    last_beat = None
    while not stop.is_set():
        if last_beat is None or now() - last_beat >= BEAT_EVERY:
            await _quietly(heartbeats.beat(process, "clock", started))
            last_beat = now()
        await _quietly(schedules.enqueue_due(enqueue))
        wait = await _quietly(schedules.seconds_until_next(ceiling=1.0))
        try:
            await asyncio.wait_for(stop.wait(), timeout=1.0 if wait is None else max(wait, 0.05))
        except TimeoutError:
            pass
    await _quietly(heartbeats.stop(process))


async def _quietly(awaitable):
    """An outage skips this tick; the clock keeps ticking and catches up once it is over."""
    try:
        return await awaitable
    except (StoreError, BrokerError) as exc:
        logger.warning("clock tick skipped: %s", exc)
        return None
