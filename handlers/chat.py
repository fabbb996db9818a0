"""Thin command handlers: parse the update, call the core, enqueue a job, reply."""

from __future__ import annotations

import asyncio
import time

from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.views.status import gather_status
from bot.errors import BrokerError, PairingError
from bot.upkeep.schedules import Schedules
from handlers import tasks
from handlers.interactions import answer_card
from handlers.services import Services, reply, services

HELP = """aegis is your personal agent platform, driven from this chat.

Capture: forward me anything (or just write it) and it becomes a task in your inbox, with
buttons to triage it at once: @next, @someday, @waiting, @reference or drop. What you leave in
the inbox is triaged every 15 minutes, by your rules in aegis.yaml or by a card that asks you.
/next: what you can do now, grouped by context label
/inbox, /waiting, /someday: the other lists
/find words: search every task; /recall words: search your notes and @reference items
/task 12: one task in full; /done 12: close it
/label 12 +quick -errand: context labels; /assign 12 agent: give it to an agent
/note text: say something without capturing it

Agents:
/run agent what to do: start a run; its message shows how it goes, the result comes as a reply
/runs: the latest runs and what each changed; /cancel 12: stop one
/agents: every agent, what it is doing, its last run
/models: when each model last answered

The gate:
/demo: watch a demo agent ask before it writes, and ask for a code before it deletes
/pending: every card still waiting for you, sent again with live buttons
/audit: the latest decisions of the gate, grants, uses and refusals

Every action an agent wants to take passes a gate: reads run, anything else waits for your tap
on a card, and what cannot be undone also needs a code from your authenticator. Reply to a card
with text to leave a note for the agent that asked.

The machine:
/ping: a round trip through a background worker, with its time
/status: live processes, queues, database, broker and the latest jobs
/schedules: what runs on its own and when, with buttons to turn each on or off
/pair CODE: make another Telegram account an owner with a code from your authenticator
/help: this message

Every message I send goes through a durable outbox, so an outage delays a reply, never loses it."""

START = "Hello! I am aegis.\n\n" + HELP


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
    report = await gather_status(
        svc.heartbeats,
        svc.outbox,
        svc.runs,
        queue_depths=depths,
        database=svc.store.describe(),
        broker=svc.broker_description,
        schedules=Schedules(svc.store),
        agents=svc.platform.agents,  # also looks at aegis.yaml, so a new problem shows
        config_problem=svc.platform.config.problem,
    )
    return report.render()


def refresh_markup(svc: Services, what: str) -> dict:
    data = svc.signer.sign("refresh", what, "go")
    return {"inline_keyboard": [[{"text": "Refresh", "callback_data": data}]]}


async def pair(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    user = update.effective_user
    verifier = svc.verifier()
    if verifier is None:
        await reply(update, context, "Pairing is off: run `aegis totp init` on the server first.")
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
