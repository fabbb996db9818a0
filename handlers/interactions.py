"""Cards in chat: taps on them, codes and replies for them, ``/pending``, ``/audit`` and
``/demo``. Thin: each parses the update and calls bot/interactions/interactions.py, which
decides."""

from __future__ import annotations

import logging
import re

from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.callbacks import CallbackData
from bot.chat.views.audit import audit_text
from bot.errors import PairingLocked
from handlers.services import place_of, reply, services

logger = logging.getLogger(__name__)
CODE = re.compile(r"^\s*\d{6}\s*$")
PENDING_AT_ONCE = 10
AUDIT_LINES = 10  # with DETAIL_CHARS (bot/chat/views/audit.py), one message
NO_CARD_OWES_A_CODE = "No card is waiting for a code, so I did not keep this one anywhere."


async def on_card_tap(
    update: Update, context: ContextTypes.DEFAULT_TYPE, data: CallbackData
) -> None:
    query = update.callback_query
    svc = services(context)
    user = query.from_user
    if not data.id.isdigit():
        await query.answer("That card does not exist; nothing was done.", show_alert=True)
        return
    answer = await svc.platform.interactions.tap(
        int(data.id),
        data.choice,
        user.id,
        user.full_name,
        codes_ready=svc.totp_secret() is not None,
    )
    # A tap that changed nothing gets its answer as an alert, so it cannot be missed.
    await query.answer(answer.text, show_alert=not answer.changed)


async def answer_card(update: Update, context: ContextTypes.DEFAULT_TYPE) -> bool:
    """A message that is a step-up code or a reply to a card; True when it was one."""
    message = update.message
    svc = services(context)
    user = update.effective_user
    text = message.text or message.caption or ""
    answer = None
    # A code first, even sent as a reply to the card: it must never be kept as a note.
    if CODE.match(text) and (verifier := svc.verifier()) is not None:
        try:
            answer = await svc.platform.interactions.submit_code(
                user.id, user.full_name, text.strip(), verifier
            )
        except PairingLocked as exc:
            await reply(update, context, str(exc))
            return True
        if answer is None:  # a code is never captured as a task, nor kept as a note
            await reply(update, context, NO_CARD_OWES_A_CODE)
            return True
    if answer is None and message.reply_to_message is not None and text:
        answer = await svc.platform.interactions.reply(
            message.chat_id, message.reply_to_message.message_id, user.id, user.full_name, text
        )
    if answer is None:
        return False
    await reply(update, context, answer.text)
    return True


async def pending(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    waiting, total = await svc.platform.interactions.open_interactions(PENDING_AT_ONCE)
    if not waiting:
        await reply(update, context, "Nothing is waiting for you.")
        return
    more = f" Here are the oldest {len(waiting)}." if total > len(waiting) else ""
    await reply(update, context, f"{total} card(s) waiting for you.{more}")
    for interaction in waiting:
        await svc.platform.interactions.resend(interaction, place_of(update))


async def audit(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    entries = await svc.platform.audit.latest(AUDIT_LINES)
    names = await svc.owners.names()
    if update.effective_user is not None:
        names[update.effective_user.id] = "you"
    await reply(update, context, audit_text(entries, names))


async def demo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    await svc.enqueue("demo_step", update.effective_chat.id, str(update.update_id))
