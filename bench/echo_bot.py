"""The baseline: a bare python-telegram-bot echo bot, long polling the same emulator.

Run by bench/fullstack.py as ``python bench/echo_bot.py TOKEN BASE_URL``.
"""

from __future__ import annotations

import sys

from telegram import Update
from telegram.ext import Application, ContextTypes, MessageHandler, filters


async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    await update.message.reply_text(update.message.text)


def main() -> None:
    token, base_url = sys.argv[1], sys.argv[2]
    application = Application.builder().token(token).base_url(base_url).build()
    application.add_handler(MessageHandler(filters.TEXT, echo))
    print("echo bot polling", flush=True)
    application.run_polling(timeout=10, drop_pending_updates=True)


if __name__ == "__main__":
    main()
