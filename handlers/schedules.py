"""``/schedules`` and its buttons: each schedule on or off, and the briefing's Pending button.
Thin: the rows are bot/upkeep/schedules.py's, the text is bot/chat/views/schedules.py's."""

from __future__ import annotations

from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.briefing import BRIEFING_KIND
from bot.chat.callbacks import CallbackData
from bot.chat.views.reminders import waiting_lines
from bot.chat.views.schedules import SCHEDULE_KIND, schedules_view
from bot.timeutil import local_time, now
from handlers.interactions import pending
from handlers.services import Services, reply, services

KINDS = (SCHEDULE_KIND, BRIEFING_KIND)
SWITCHES = {"on": True, "off": False}


async def show(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    text, markup = await _view(services(context), update.effective_chat.id)
    await reply(update, context, text, reply_markup=markup)


async def on_button(update: Update, context: ContextTypes.DEFAULT_TYPE, data: CallbackData) -> None:
    query = update.callback_query
    if data.kind == BRIEFING_KIND and data.id == "pending":
        await query.answer()
        await pending(update, context)
        return
    if data.kind != SCHEDULE_KIND or data.choice not in SWITCHES:
        await query.answer("That button no longer does anything; nothing was done.")
        return
    svc = services(context)
    row = await svc.platform.schedules.switch(data.id, SWITCHES[data.choice])
    if row is None:
        await query.answer(f"There is no schedule {data.id} any more.", show_alert=True)
        return
    if row.enabled:
        soonest = max(row.next_run_at, now())
        answer = f"{row.name} is on; next run {local_time(soonest, svc.platform.settings.zone)}."
    else:
        answer = f"{row.name} is off; it will not run until you turn it on."
    await query.answer(answer)
    text, markup = await _view(svc, update.effective_chat.id)
    await reply(update, context, f"{answer}\n\n{text}", reply_markup=markup)


async def _view(svc: Services, chat_id: int):
    rows = await svc.platform.schedules.all()
    zone = svc.platform.settings.zone
    text, markup = schedules_view(svc.signer, rows, svc.platform.agents, zone)
    waiting = await svc.platform.reminders.waiting(chat_id)
    return "\n".join([text, *waiting_lines(waiting, zone)]), markup
