"""Taps on inline buttons, routed by kind; data not signed by us (bot/chat/callbacks.py) is refused.

Callback data is ``<kind>:<id>:<choice>:<mac>``. Each feature gets a ``CallbackQueryHandler``
whose pattern matches its kinds; the last one takes whatever is left. Every callback is wrapped
in ``signed``, so a forged tap is refused and audited whatever kind it claims.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Awaitable, Callable

from telegram import Update
from telegram.ext import CallbackQueryHandler, ContextTypes

from bot.actions.audit import AuditEvent
from bot.chat.callbacks import CallbackData
from bot.chat.views import task_buttons
from bot.chat.views import tasks as task_views
from bot.chat.views.cards import CALLBACK_KIND
from handlers import monitors, reminders, schedules
from handlers.chat import REFRESH_KIND, refresh_status
from handlers.interactions import on_card_tap
from handlers.services import services
from handlers.task_buttons import on_task_button
from handlers.tasks import on_page_button

logger = logging.getLogger(__name__)
NOT_MINE = "This button is not one of mine; nothing was done."
NO_LONGER = "That button no longer does anything; nothing was done."

Context = ContextTypes.DEFAULT_TYPE
TapCallback = Callable[[Update, Context, CallbackData], Awaitable[None]]
HandlerCallback = Callable[[Update, Context], Awaitable[None]]


def tap_handlers() -> list[CallbackQueryHandler]:
    """One handler per feature, then the catch-all; PTB runs the first that matches."""
    routes = [
        (on_card_tap, kinds(CALLBACK_KIND)),
        (on_task_button, kinds(task_buttons.TASK_KIND, task_buttons.ASSIGN_KIND)),
        (on_page_button, kinds(task_views.PAGE_KIND, task_views.FIND_KIND)),
        (schedules.on_button, kinds(*schedules.KINDS)),
        (monitors.on_button, kinds(*monitors.KINDS)),
        (reminders.on_button, kinds(*reminders.KINDS)),
        (refresh_status, re.compile(rf"^{re.escape(REFRESH_KIND)}:status:")),
        (on_unknown_kind, None),
    ]
    return [CallbackQueryHandler(signed(callback), pattern=pattern) for callback, pattern in routes]


def kinds(*names: str) -> re.Pattern[str]:
    """Matches callback data of any of these kinds: the text before its first colon."""
    return re.compile(f"^(?:{'|'.join(re.escape(name) for name in names)}):")


def signed(callback: TapCallback) -> HandlerCallback:
    """Verifies the tap's data once; refuses the tap if it is not ours, else passes the data on."""

    # On every route, not only the catch-all: a pattern routes, it proves nothing (and PTB lets a
    # query with no data through any pattern, telegram/ext/_handlers/callbackqueryhandler.py).
    @functools.wraps(callback)
    async def verified(update: Update, context: Context) -> None:
        data = services(context).signer.verify(update.callback_query.data or "")
        if data is None:
            await _refuse(update, context)
            return
        await callback(update, context, data)

    return verified


async def on_unknown_kind(update: Update, context: Context, data: CallbackData) -> None:
    logger.warning("signed callback of unknown kind %r", data.kind)
    await update.callback_query.answer(NO_LONGER)


async def _refuse(update: Update, context: Context) -> None:
    query = update.callback_query
    logger.warning("refused a tap with unsigned callback data from %s", query.from_user.id)
    await services(context).platform.audit.record(
        AuditEvent.TAP_REFUSED,
        "callback data that is not signed by us",
        user_id=query.from_user.id,
    )
    await query.answer(NOT_MINE, show_alert=True)
