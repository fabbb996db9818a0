"""``/schedules`` and its buttons (on or off, run now, delete one made in chat), ``/every`` (a
schedule made in chat), and the briefing's Pending button.
Thin: the rows are bot/upkeep/schedules.py's, the text is bot/chat/views/schedules.py's."""

from __future__ import annotations

from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.briefing import BRIEFING_KIND
from bot.chat.callbacks import CallbackData
from bot.chat.text import Html
from bot.chat.views.reminders import waiting_lines
from bot.chat.views.schedules import SCHEDULE_KIND, schedules_view
from bot.errors import ScheduleRefused
from bot.timeutil import local_time, now
from bot.upkeep.every import EVERY_USAGE, parse_every
from handlers.interactions import pending
from handlers.services import Services, edit_tapped, reply, services
from handlers.tasks import send_list

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
    if data.kind == BRIEFING_KIND and data.id == "next":
        await query.answer()
        await send_list(update, context, "next", 0)
        return
    if data.kind != SCHEDULE_KIND or data.choice not in (*SWITCHES, "now", "delete"):
        await query.answer("That button no longer does anything; nothing was done.")
        return
    svc = services(context)
    try:
        answer = await _act(svc, data.id, data.choice)
    except ScheduleRefused as exc:  # a sweep that stays on: an old or forged "Turn off"
        await query.answer(str(exc), show_alert=True)
        return
    if answer is None:
        await query.answer(f"There is no schedule {data.id} any more.", show_alert=True)
        return
    await query.answer(answer)
    text, markup = await _view(svc, update.effective_chat.id)
    await edit_tapped(update, context, Html("\n\n").join([answer, text]), markup)  # in place


async def _act(svc: Services, name: str, choice: str) -> str | None:
    """Do what the button says; the answer in words, or None when there is no such schedule."""
    schedules = svc.platform.schedules
    if choice == "now":
        ran = await schedules.run_now(name, svc.enqueue)
        return f"{name} runs now, once; its next time stays as it was." if ran else None
    if choice == "delete":
        gone = await schedules.delete_from_chat(name)
        return f"{name} is deleted." if gone else None
    row = await schedules.switch(name, SWITCHES[choice])
    if row is None:
        return None
    if not row.enabled:
        return f"{row.name} is off; it will not run until you turn it on."
    soonest = max(row.next_run_at, now())
    return f"{row.name} is on; next run {local_time(soonest, svc.platform.settings.zone)}."


async def every(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """``/every weekdays 8:00 run scout what happened overnight``: a schedule made in chat."""
    svc = services(context)
    words = (update.message.text or "").split(maxsplit=1)
    try:
        asked = parse_every(words[1] if len(words) > 1 else "")
    except ScheduleRefused as exc:
        text = str(exc)
        await reply(update, context, text if text == EVERY_USAGE else f"Not scheduled: {text}")
        return
    agent = svc.platform.agents.get(asked.agent)
    if agent is None or not agent.runnable:
        known = ", ".join(sorted(s for s, a in svc.platform.agents.items() if a.runnable))
        await reply(
            update,
            context,
            f"Not scheduled: there is no agent {asked.agent!r} to run (agents: {known or 'none'}).",
        )
        return
    zone = svc.platform.settings.zone
    row = await svc.platform.schedules.add_from_chat(asked.timing, asked.agent, asked.request)
    await reply(
        update,
        context,
        f"Scheduled as {row.name}: {row.timing.describe(zone)}, {row.agent} is asked "
        f"{asked.request!r}. First run {local_time(row.next_run_at, zone)}. /schedules turns it "
        "off or deletes it.",
    )


async def _view(svc: Services, chat_id: int):
    rows = await svc.platform.schedules.all()
    zone = svc.platform.settings.zone
    text, markup = schedules_view(svc.signer, rows, svc.platform.agents, zone)
    waiting = await svc.platform.reminders.waiting(chat_id)
    return Html("\n").join([text, *waiting_lines(waiting, zone)]), markup
