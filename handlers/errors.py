"""The one error handler: the log gets the traceback, the person gets a sentence.

Failures because something the handler needs is down (the database, Redis) are not the
update's fault: intake leaves such an update pending and handles it again later.
"""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass

import redis
from telegram import Update
from telegram.ext import ContextTypes

from bot.errors import BrokerError, StoreError
from handlers.services import services

logger = logging.getLogger(__name__)
OUTAGES = (StoreError, BrokerError, redis.RedisError)


@dataclass
class HandlingOutcome:
    error: BaseException | None = None


current_outcome: contextvars.ContextVar[HandlingOutcome | None] = contextvars.ContextVar(
    "current_outcome", default=None
)


def is_outage(error: BaseException | None) -> bool:
    return isinstance(error, OUTAGES)


async def on_error(update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
    error = context.error
    outcome = current_outcome.get()
    if outcome is not None:
        outcome.error = error
    if is_outage(error):
        logger.warning("outage while handling an update, will retry: %s", error)
        return
    logger.error("handler failed", exc_info=error)
    if isinstance(update, Update) and update.effective_chat is not None:
        await services(context).platform.outbox.send(
            update.effective_chat.id,
            f"Sorry, that failed on my side (logged as update {update.update_id}).",
            key=f"error:{update.update_id}",
        )
