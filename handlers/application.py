"""The PTB Application: the gate first, then the handlers, then the one error handler.

The commands, their menu and /help come from one table (bot/chat/views/commands.py); taps are
routed by kind (handlers/buttons.py).

It has no Updater: aegis fetches or receives updates itself (handlers/intake.py) so each one is
recorded before it is handled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from telegram import Bot, BotCommand, Update
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CommandHandler,
    MessageHandler,
    TypeHandler,
    filters,
)

from bot.chat.views.commands import COMMANDS, Command
from handlers import (
    agents,
    buttons,
    chat,
    interactions,
    ledger,
    monitors,
    peers,
    reminders,
    schedules,
    tasks,
    topics,
)
from handlers.errors import on_error
from handlers.gate import gate
from handlers.services import SERVICES_KEY, Services

# Telegram's menu, in the table's order; aegis/web.py sends it with set_my_commands.
BOT_COMMANDS = [BotCommand(command.name, command.description) for command in COMMANDS]

# Each command of the table (bot/chat/views/commands.py) and what answers it.
CALLBACKS = {
    "start": chat.start,
    "help": chat.help_command,
    "ping": chat.ping,
    "status": chat.status,
    "pair": chat.pair,
    "pending": interactions.pending,
    "audit": interactions.audit,
    "demo": interactions.demo,
    "next": tasks.show_list,
    "inbox": tasks.show_list,
    "waiting": tasks.show_list,
    "someday": tasks.show_list,
    "find": tasks.find,
    "recall": tasks.recall,
    "done": tasks.done,
    "label": tasks.label,
    "assign": tasks.assign,
    "task": tasks.show,
    "note": tasks.note,
    "aside": tasks.aside,
    "run": agents.run,
    "runs": agents.runs,
    "cancel": agents.cancel,
    "agents": agents.agents,
    "schedules": schedules.show,
    "remind": reminders.remind,
    "every": schedules.every,
    "models": ledger.models,
    "peers": peers.peers,
    "deploy": peers.deploy,
    "here": topics.here,
    "watch": monitors.watch,
    "monitors": monitors.show,
}


def check_commands(commands: Sequence[Command], callbacks: Mapping[str, object]) -> None:
    """Raise unless every command in the table has a callback and every callback a command."""
    names = [command.name for command in commands]
    if sorted(names) == sorted(callbacks):
        return
    unanswered = sorted(set(names) - set(callbacks))
    unlisted = sorted(set(callbacks) - set(names))
    repeated = sorted({name for name in names if names.count(name) > 1})
    raise RuntimeError(
        "the command table (bot/chat/views/commands.py) and handlers/application.py's CALLBACKS "
        f"disagree: no callback for {unanswered}, not in the table {unlisted}, "
        f"listed twice {repeated}"
    )


def build_application(bot: Bot, services: Services) -> Application:
    check_commands(COMMANDS, CALLBACKS)  # a command without a handler fails here, not in chat
    application = ApplicationBuilder().bot(bot).updater(None).build()
    application.bot_data[SERVICES_KEY] = services
    application.add_handler(TypeHandler(Update, gate), group=-1)
    new_messages = filters.UpdateType.MESSAGE
    # A forwarded "/done 1" is something someone else wrote: captured, never run.
    commands_here = new_messages & filters.COMMAND & ~filters.FORWARDED
    unforwarded = new_messages & ~filters.FORWARDED
    for command in COMMANDS:
        callback = CALLBACKS[command.name]
        application.add_handler(CommandHandler(command.name, callback, filters=unforwarded))
    application.add_handlers(buttons.tap_handlers())
    application.add_handler(MessageHandler(commands_here, chat.unknown_command))
    application.add_handler(MessageHandler(new_messages & ~commands_here, chat.text_message))
    application.add_handler(MessageHandler(filters.UpdateType.EDITED_MESSAGE, tasks.follow_edit))
    application.add_error_handler(on_error)
    return application
