"""``/watch``, ``/monitors`` and the buttons of monitors and incident cards. Thin: the rows are
bot/monitors/'s, the words bot/chat/views/monitors.py's.

A command monitor runs a program on this server at every check, so ``/watch cmd …`` asks on an
approval card that needs a code, like any irreversible action; ``watch_approved``
(jobs/monitors/watches.py) adds it once the card is approved.
"""

from __future__ import annotations

from datetime import timedelta

from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.callbacks import CallbackData
from bot.chat.views import monitors as views
from bot.errors import MonitorRefused, RunRefused
from bot.interactions.interaction import Ask, Kind
from bot.monitors.incident import SILENCES, Tap
from bot.monitors.monitor import MonitorKind, MonitorSpec
from bot.monitors.specs import WATCH_USAGE, parse_watch
from bot.timeutil import now, short_time
from handlers.services import Services, edit_tapped, reply, services
from policies.canonical import approval_hash

KINDS = (views.MONITOR_KIND, views.INCIDENT_KIND)
OWNER = "owner"  # who asks on the card of a command monitor made in chat
WATCH_COMMAND_TOOL = "monitors.watch_command"
Context = ContextTypes.DEFAULT_TYPE


async def watch(update: Update, context: Context) -> None:
    words = (update.message.text or "").split(maxsplit=1)
    if len(words) < 2:
        await reply(update, context, WATCH_USAGE)
        return
    try:
        spec = parse_watch(words[1])
    except MonitorRefused as exc:
        await reply(update, context, f"Not watched: {exc.field}: {exc.problem}")
        return
    if spec.kind is MonitorKind.CMD:
        await _ask_for_command(update, context, spec)
        return
    monitor, new = await services(context).platform.monitors.watch(spec)
    await reply(update, context, views.watching(monitor) if new else views.already_watched(monitor))


async def _ask_for_command(update: Update, context: Context, spec: MonitorSpec) -> None:
    args = spec.to_json()
    prompt = (
        f"Watch with a command: every {spec.interval_seconds} s, run {spec.target!r} on this "
        "server and read its exit code. A command runs with aegis's rights, so it needs your "
        "code."
    )
    await services(context).platform.interactions.create(
        Ask(
            kind=Kind.APPROVAL,
            agent=OWNER,
            chat_id=update.effective_chat.id,
            prompt=prompt,
            tool=WATCH_COMMAND_TOOL,
            args=args,
            args_hash=approval_hash(OWNER, WATCH_COMMAND_TOOL, args),
            step_up=True,
            timeout=timedelta(minutes=15),
            continuation_actor="watch_approved",
        )
    )


async def show(update: Update, context: Context) -> None:
    text, markup = await _view(services(context))
    await reply(update, context, text, reply_markup=markup)


async def on_button(update: Update, context: Context, data: CallbackData) -> None:
    query = update.callback_query
    if data.kind == views.MONITOR_KIND and data.id == views.PAGE and data.choice.isdigit():
        text, markup = await _view(services(context), page=int(data.choice))
        await edit_tapped(update, context, text, markup)  # the page turns in place
        await query.answer()
        return
    if not data.id.isdigit():
        await query.answer("That button no longer does anything; nothing was done.")
        return
    if data.kind == views.INCIDENT_KIND:
        answer = await _incident_tap(update, context, int(data.id), data.choice)
    else:
        answer = await _monitor_tap(services(context), int(data.id), data.choice)
    await query.answer(answer, show_alert=len(answer) > 190)


async def _incident_tap(update: Update, context: Context, incident_id: int, choice: str) -> str:
    platform = services(context).platform
    incidents = platform.monitors.incidents
    user = update.callback_query.from_user
    if choice == Tap.ACK:
        return await incidents.ack(incident_id, user.full_name)
    if choice in SILENCES:
        return await incidents.silence(incident_id, Tap(choice))
    incident = await incidents.get(incident_id)
    number = choice.removeprefix(views.RUN_PREFIX)
    if incident is None or not number.isdigit() or int(number) >= len(incident.agents):
        return "That button no longer does anything; nothing was done."
    agent = incident.agents[int(number)]
    request = (
        f"{incident.title} since {short_time(incident.opened_at)}. "
        f"Last error: {incident.detail or 'none recorded'}. Find out why and fix what you can."
    )
    try:
        await platform.start_run(
            agent, request, incident.chat_id, key=f"incident:{incident_id}:{agent}"
        )
    except RunRefused as exc:
        return f"{exc} Nothing was started."
    return f"{agent} is on it; its run asks before it changes anything."


async def _monitor_tap(svc: Services, monitor_id: int, choice: str) -> str:
    monitors = svc.platform.monitors
    if choice == "check":
        monitor = await monitors.check_now(monitor_id)
        verb = "is paused: resume it to check it"
        if monitor is not None and not monitor.paused:
            verb = "checked within a second"
    elif choice in ("pause", "resume"):
        monitor = await monitors.pause(monitor_id, choice == "pause")
        verb = "paused" if choice == "pause" else "resumed and checked now"
    elif choice == "remove":
        monitor = await monitors.remove(monitor_id)
        verb = "removed: /watch it again to bring it back"
    else:
        return "That button no longer does anything; nothing was done."
    if monitor is None:
        return f"There is no monitor #{monitor_id} any more."
    return f"#{monitor.id} {monitor.name} {verb}."


async def _view(svc: Services, page: int = 0):
    monitors = svc.platform.monitors
    return views.monitors_view(
        await monitors.all(),
        await monitors.uptimes(),
        svc.signer,
        now(),
        await monitors.processes.watching(),
        page=page,
    )
