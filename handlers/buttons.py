"""Taps on inline buttons. Callback data is signed (bot/chat/callbacks.py); others are refused."""

from __future__ import annotations

import logging

from telegram import Update
from telegram.ext import ContextTypes

from bot.actions.audit import AuditEvent
from bot.chat.views import tasks as task_views
from bot.chat.views.cards import CALLBACK_KIND
from handlers import schedules
from handlers.chat import refresh_markup, status_text
from handlers.interactions import on_card_tap
from handlers.services import services
from handlers.tasks import on_page_button, on_task_button

logger = logging.getLogger(__name__)


async def on_button(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    query = update.callback_query
    svc = services(context)
    data = svc.signer.verify(query.data or "")
    if data is None:
        logger.warning("refused a tap with unsigned callback data from %s", query.from_user.id)
        await svc.platform.audit.record(
            AuditEvent.TAP_REFUSED,
            "callback data that is not signed by us",
            user_id=query.from_user.id,
        )
        await query.answer("This button is not one of mine; nothing was done.", show_alert=True)
        return
    if data.kind == CALLBACK_KIND:
        await on_card_tap(update, context, data)
        return
    if data.kind in (task_views.TASK_KIND, task_views.ASSIGN_KIND):
        await on_task_button(update, context, data)
        return
    if data.kind in (task_views.PAGE_KIND, task_views.FIND_KIND):
        await on_page_button(update, context, data)
        return
    if data.kind in schedules.KINDS:
        await schedules.on_button(update, context, data)
        return
    if data.kind == "refresh" and data.id == "status":
        await query.answer("Refreshed")
        await svc.say(
            query.message.chat.id,
            await status_text(svc),
            key=f"reply:{update.update_id}",
            reply_markup=refresh_markup(svc, "status"),
        )
        return
    logger.warning("signed callback of unknown kind %r", data.kind)
    await query.answer("That button no longer does anything; nothing was done.")
