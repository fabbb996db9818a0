"""Thin command handlers: parse the update, call the core, enqueue a job, reply."""

from __future__ import annotations

import asyncio
import time

from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.callbacks import CallbackData
from bot.chat.views.commands import help_text, start_text
from bot.chat.views.status import gather_status
from bot.errors import BrokerError, PairingError
from handlers import tasks
from handlers.interactions import answer_card
from handlers.services import Services, edit_tapped, reply, services

HELP = help_text()
START = start_text()
REFRESH_KIND = "refresh"  # refresh:status:go, the button under /status


async def start(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    await reply(update, context, START)


async def help_command(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    await reply(update, context, HELP)


async def ping(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    chat_id = update.effective_chat.id
    await services(context).enqueue("ping", chat_id, time.time(), update.update_id)


async def status(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    await reply(update, context, await status_text(svc), reply_markup=refresh_markup(svc, "status"))


async def status_text(svc: Services) -> str:
    try:
        depths = await asyncio.wait_for(svc.queue_depths(), timeout=3)
    except (BrokerError, TimeoutError):
        depths = None
    platform = svc.platform
    report = await gather_status(
        platform.heartbeats,
        platform.outbox,
        platform.job_runs,
        queue_depths=depths,
        database=platform.store.describe(),
        broker=svc.broker_description,
        schedules=platform.schedules,
        agents=platform.agents,  # also looks at aegis.yaml, so a new problem shows
        config_problem=platform.config.problem,
        transcribe_url=platform.settings.transcribe_url,
        topics=platform.topics,
    )
    return report.render()


def refresh_markup(svc: Services, what: str) -> dict:
    data = svc.signer.sign(REFRESH_KIND, what, "go")
    return {"inline_keyboard": [[{"text": "Refresh", "callback_data": data}]]}


async def refresh_status(
    update: Update, context: ContextTypes.DEFAULT_TYPE, data: CallbackData
) -> None:
    """The Refresh button under /status: the same message, edited to the status now."""
    query = update.callback_query
    svc = services(context)
    await query.answer("Refreshed")
    await edit_tapped(update, context, await status_text(svc), refresh_markup(svc, data.id))


async def pair(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    user = update.effective_user
    verifier = svc.verifier()
    if verifier is None:
        await reply(update, context, "Pairing is off: run aegis totp init on the server first.")
        return
    if len(context.args) != 1:
        await reply(update, context, "Send /pair followed by the 6-digit code, e.g. /pair 123456.")
        return
    try:
        paired = await svc.owners.pair(user.id, user.full_name, context.args[0], verifier)
    except PairingError as exc:
        await reply(update, context, str(exc))
        return
    text = "Paired: this account is now an owner." if paired else "You are already an owner."
    await reply(update, context, text)


async def unknown_command(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    command = (update.message.text or "").split(maxsplit=1)[0][:64]
    await reply(update, context, f"I don't know {command}. /help lists what I can do.")


async def text_message(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """Anything that is not a command: a code or a reply for a card, else a task to capture."""
    if await answer_card(update, context):
        return
    await tasks.capture(update, context)
