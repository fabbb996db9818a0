"""Monitor checks and what follows a card about them.

``check_monitor`` is enqueued by the clock, one message per due slot. It starts the check on
this worker's event loop and returns at once: a check may take its whole timeout (10 s by
default), and a worker thread held that long per check would leave deliveries waiting behind a
few stalled targets. The price is that a worker killed mid-check loses that one check, never an
alert: the next slot checks again, and what a check decided is committed with its messages in
the outbox before anything is sent.
"""

from __future__ import annotations

import asyncio
import logging

import dramatiq

from aegis.botapi.endpoint import owner_chats
from bot.chat.views.monitors import already_watched, watching
from bot.errors import AegisError, MonitorRefused
from bot.monitors.monitor import Monitor, MonitorSpec
from jobs import probe
from jobs.broker import require_broker
from jobs.resources import resources

require_broker()
logger = logging.getLogger(__name__)
_checks: set[asyncio.Task] = set()  # held here: the loop keeps only weak references to tasks


@dramatiq.actor(queue_name="monitors", max_retries=0)
async def check_monitor(monitor_id: int, slot: str = "") -> dict:
    platform = (await resources()).platform
    monitor = await platform.monitors.get(monitor_id)
    if monitor is None or monitor.paused:
        return {"checks_skipped": 1}  # removed or paused after its slot was claimed
    task = asyncio.create_task(_check_and_record(platform, monitor))
    _checks.add(task)
    task.add_done_callback(_checks.discard)
    return {"checks_started": 1}


async def _check_and_record(platform, monitor: Monitor) -> None:
    result = await probe.check(monitor.spec)
    chats = owner_chats(platform.settings)
    try:
        await platform.monitors.record(
            monitor.id,
            result,
            chat_id=chats[0] if chats else None,
            agents=platform.monitor_agents,
        )
    except AegisError as exc:  # an outage: this check is lost, the next slot checks again
        logger.warning("check of monitor %s not recorded: %s", monitor.id, exc)


# Retried: the monitor is keyed by its target, so a retry finds the one it made.
@dramatiq.actor(queue_name="default", max_retries=5, min_backoff=1000)
async def watch_approved(interaction_id: int) -> dict:
    """The continuation of a command monitor's card: approved with a code, it is watched."""
    platform = (await resources()).platform
    card = await platform.interactions.claim_continuation(interaction_id)
    if card is None:
        return {"continuations_repeated": 1}
    if card.outcome != "approved":
        return {"watches_declined": 1}
    try:
        spec = MonitorSpec.from_json(card.args)
        monitor, new = await platform.monitors.watch(spec)
    except (MonitorRefused, TypeError, ValueError) as exc:
        await platform.outbox.send(card.chat_id, f"Not watched: {exc}")
        return {"watches_refused": 1}
    text = watching(monitor) if new else already_watched(monitor)
    await platform.outbox.send(card.chat_id, text, key=f"watch-approved:{interaction_id}")
    return {"monitors_added": int(new)}
