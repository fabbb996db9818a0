"""One gate for every sender: runs before any handler (group -1) for every update type.

An owner passes. ``/pair`` in a private chat passes for anyone (it checks its own code). Any
other update from anyone else stops here: nothing changes, the sender is recorded, and they get
at most one short refusal an hour.
"""

from __future__ import annotations

import contextlib
import logging

from telegram import Update
from telegram.error import TelegramError
from telegram.ext import ApplicationHandlerStop, ContextTypes

from bot.actions.audit import AuditEvent
from handlers.errors import current_outcome
from handlers.services import services

logger = logging.getLogger(__name__)
REFUSAL = (
    "This is a private bot. If you own it, send /pair followed by the current code from "
    "your authenticator app."
)


async def gate(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """Let owners (and /pair) through; stop everything else, including when checking fails.

    PTB hands an exception raised here to the error handler and then runs the next handler
    group, so an error must never leave this function: it would let the update through. The
    failure is noted for intake (an outage leaves the update pending for a retry) and the
    update stops here.
    """
    try:
        if await _passes(update, context):
            return
    except Exception as exc:  # fail closed, whatever went wrong
        logger.warning("gate could not check update %s: %r; stopped it", update.update_id, exc)
        outcome = current_outcome.get()
        if outcome is not None:
            outcome.error = exc
    raise ApplicationHandlerStop


async def _passes(update: Update, context: ContextTypes.DEFAULT_TYPE) -> bool:
    svc = services(context)
    user = update.effective_user
    if user is not None and await svc.owners.is_owner(user.id):
        return True
    if user is not None and is_pairing_request(update, context.bot.username):
        return True
    if user is None:
        logger.info("dropped update %s with no sender", update.update_id)
        return False
    logger.info("refused update %s from unknown sender %s", update.update_id, user.id)
    chat = update.effective_chat
    private = chat is not None and chat.type == "private"
    due = await svc.owners.note_unknown(user.id, user.full_name, refusable=private)
    if update.callback_query is not None:
        await svc.platform.audit.record(
            AuditEvent.TAP_REFUSED, "a tap from someone who is not an owner", user_id=user.id
        )
        with contextlib.suppress(TelegramError):  # a tap too old to answer is still refused
            await update.callback_query.answer()
    if due:
        await svc.platform.outbox.send(chat.id, REFUSAL, key=f"refusal:{update.update_id}")
    return False


def is_pairing_request(update: Update, bot_username: str) -> bool:
    """``/pair`` or ``/pair@<this bot>`` in a private chat; ``/pair@another_bot`` is not ours
    and would fall through to the other handlers, so it stays gated."""
    message = update.message
    if message is None or message.chat.type != "private" or not message.text:
        return False
    command = message.text.split(maxsplit=1)[0].lower()
    return command in ("/pair", f"/pair@{bot_username}".lower())
