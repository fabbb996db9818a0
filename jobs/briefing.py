"""The daily briefing (bot/chat/briefing.py): one card a day in each owner's chat.

The card is keyed by chat and day, so a rerun, or the clock's schedule and a manual enqueue on
the same day, sends it once.
"""

from __future__ import annotations

import logging

import dramatiq

from aegis.botapi.endpoint import owner_chats
from bot.chat.briefing import briefing_view, gather_briefing
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()
logger = logging.getLogger(__name__)


@dramatiq.actor(queue_name="default", max_retries=5, min_backoff=1000)
async def daily_briefing(schedule: str = "") -> dict:
    platform = (await resources()).platform
    chats = owner_chats(platform.settings)
    if not chats:
        logger.warning("no daily briefing: no owner chat (set AEGIS_OWNER_IDS)")
        return {"no_owner_chat": 1}
    briefing = await gather_briefing(platform.tasks, platform.interactions, platform.runs)
    text, markup = briefing_view(platform.interactions.signer, briefing)
    for chat_id in chats:
        key = f"briefing:{chat_id}:{briefing.day}"
        await platform.outbox.send(chat_id, text, key=key, reply_markup=markup)
    return {"briefings_sent": len(chats)}
