"""The PTB Application: the gate first, then the handlers, then the one error handler.

It has no Updater: aegis fetches or receives updates itself (handlers/intake.py) so each one is
recorded before it is handled.
"""

from __future__ import annotations

from telegram import Bot, Update
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    CommandHandler,
    MessageHandler,
    TypeHandler,
    filters,
)

from handlers import agents, buttons, chat, interactions, ledger, schedules, tasks
from handlers.errors import on_error
from handlers.gate import gate
from handlers.services import SERVICES_KEY, Services

BOT_COMMANDS = [
    ("next", "What you can do now"),
    ("inbox", "Captured, not triaged yet"),
    ("waiting", "Waiting on someone"),
    ("someday", "Someday, maybe"),
    ("find", "Search every task"),
    ("recall", "Search your notes"),
    ("done", "Close a task as done"),
    ("label", "Add or remove context labels"),
    ("assign", "Give a task to an agent"),
    ("task", "Show one task"),
    ("note", "Say something without capturing it"),
    ("run", "Run an agent: /run agent what to do"),
    ("runs", "Latest runs and what they changed"),
    ("cancel", "Stop a run"),
    ("agents", "Agents, what they are doing, their last run"),
    ("schedules", "Schedules: when each runs, on or off"),
    ("models", "When each model last succeeded"),
    ("start", "What aegis is"),
    ("help", "What I can do"),
    ("pending", "Cards waiting for you"),
    ("audit", "Latest decisions of the gate"),
    ("demo", "See the gate at work"),
    ("ping", "Round trip through a worker"),
    ("status", "Processes, queues, database, latest jobs"),
    ("pair", "Pair this account with a TOTP code"),
]


def build_application(bot: Bot, services: Services) -> Application:
    application = ApplicationBuilder().bot(bot).updater(None).build()
    application.bot_data[SERVICES_KEY] = services
    application.add_handler(TypeHandler(Update, gate), group=-1)
    new_messages = filters.UpdateType.MESSAGE
    # A forwarded "/done 1" is something someone else wrote: captured, never run.
    commands_here = new_messages & filters.COMMAND & ~filters.FORWARDED
    for name, callback in (
        ("start", chat.start),
        ("help", chat.help_command),
        ("ping", chat.ping),
        ("status", chat.status),
        ("pair", chat.pair),
        ("pending", interactions.pending),
        ("audit", interactions.audit),
        ("demo", interactions.demo),
        ("next", tasks.show_list),
        ("inbox", tasks.show_list),
        ("waiting", tasks.show_list),
        ("someday", tasks.show_list),
        ("find", tasks.find),
        ("recall", tasks.recall),
        ("done", tasks.done),
        ("label", tasks.label),
        ("assign", tasks.assign),
        ("task", tasks.show),
        ("note", tasks.note),
        ("run", agents.run),
        ("runs", agents.runs),
        ("cancel", agents.cancel),
        ("agents", agents.agents),
        ("schedules", schedules.show),
        ("models", ledger.models),
    ):
        application.add_handler(
            CommandHandler(name, callback, filters=new_messages & ~filters.FORWARDED)
        )
    application.add_handler(CallbackQueryHandler(buttons.on_button))
    application.add_handler(MessageHandler(commands_here, chat.unknown_command))
    application.add_handler(MessageHandler(new_messages & ~commands_here, chat.text_message))
    application.add_handler(MessageHandler(filters.UpdateType.EDITED_MESSAGE, tasks.follow_edit))
    application.add_error_handler(on_error)
    return application
