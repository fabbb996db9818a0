"""Upkeep of interactions: expire what is due, and send continuations the broker missed.

The sweep spawns one child per card and returns (a sweep never waits); each child expires its
card with a compare-and-set, so a tap that won meanwhile stays won.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import dramatiq

from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()
# A continuation normally goes out right after its card settles; one still unsent this long
# after was lost to a broker outage.
CONTINUATION_GRACE = timedelta(seconds=30)


@dramatiq.actor(queue_name="default", max_retries=0)
async def sweep_interactions(schedule: str = "") -> dict:
    res = await resources()
    interactions = res.platform.interactions
    due = await interactions.due_for_expiry()
    for interaction_id in due:
        await asyncio.to_thread(expire_interaction.send, interaction_id)
    lost = await interactions.unsent_continuations(older_than=CONTINUATION_GRACE)
    for settled in lost:
        await interactions.send_continuation(settled)
    return {"expiries_queued": len(due), "continuations_resent": len(lost)}


@dramatiq.actor(queue_name="default", max_retries=5, min_backoff=1000)
async def expire_interaction(interaction_id: int) -> dict:
    expired = await (await resources()).platform.interactions.expire(interaction_id)
    return {"interactions_expired": int(expired is not None)}
