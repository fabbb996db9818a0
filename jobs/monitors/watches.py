"""What follows the card of a command monitor asked for in chat (handlers/monitors.py): once it
is approved with a code, the monitor is watched."""

from __future__ import annotations

import dramatiq

from bot.chat.views.monitors import already_watched, watching
from bot.errors import MonitorRefused
from bot.monitors.monitor import MonitorSpec
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()


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
