"""``/remind`` and the buttons of a reminder's card. Thin: the time is read by
bot/reminders/when.py, the rows are bot/reminders/reminders.py's, the words
bot/chat/views/reminders.py's."""

from __future__ import annotations

from datetime import time, timedelta

from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.callbacks import CallbackData
from bot.chat.views import reminders as views
from bot.errors import ReminderRefused
from bot.reminders.when import USAGE, local_moment, parse_reminder
from bot.timeutil import now
from handlers.services import reply, services

KINDS = (views.REMIND_KIND,)
SNOOZE = timedelta(hours=1)
TOMORROW_AT = time(9, 0)
Context = ContextTypes.DEFAULT_TYPE


async def remind(update: Update, context: Context) -> None:
    platform = services(context).platform
    words = (update.message.text or "").split(maxsplit=1)
    zone = platform.settings.zone
    try:
        due, what = parse_reminder(words[1] if len(words) > 1 else "", now(), zone)
    except ReminderRefused as exc:
        answer = str(exc) if str(exc) == USAGE else f"Not set: {exc}"
        await reply(update, context, answer)
        return
    reminder = await platform.reminders.add(update.effective_chat.id, what, due)
    await reply(update, context, views.set_for(reminder, zone))


async def on_button(update: Update, context: Context, data: CallbackData) -> None:
    query = update.callback_query
    platform = services(context).platform
    zone = platform.settings.zone
    if not data.id.isdigit() or data.choice not in dict(views.CHOICES):
        await query.answer("That button no longer does anything; nothing was done.")
        return
    reminder_id = int(data.id)
    if data.choice == "done":
        settled = await platform.reminders.done(reminder_id)
    else:
        until = now() + SNOOZE
        if data.choice == "tomorrow":
            tomorrow = now().astimezone(zone).date() + timedelta(days=1)
            until = local_moment(tomorrow, TOMORROW_AT, zone)
        settled = await platform.reminders.snooze(reminder_id, until)
    if settled is None:
        await query.answer("This reminder was already dealt with; nothing was done.")
        return
    text = views.done_text(settled) if data.choice == "done" else views.snoozed_text(settled, zone)
    await query.answer(text.splitlines()[-1])
    if settled.card_outbox_id is not None:
        await platform.outbox.send_edit(settled.chat_id, text, edit_of=settled.card_outbox_id)
