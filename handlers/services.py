"""What handlers reach for, kept in ``application.bot_data`` (typed access, one place): the core
services (``.platform``) and what the Telegram adapter adds to them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.callbacks import CallbackSigner
from bot.chat.codes import CodeVerifier
from bot.chat.owners import Owners
from bot.chat.topics import Place
from bot.core import Platform

SERVICES_KEY = "aegis.services"

Enqueue = Callable[..., Awaitable[None]]


@dataclass
class Services:
    """The core services, and what only the handlers use: who may talk to the bot, the signer
    of buttons, the broker (to enqueue, and its queues for /status), the TOTP secret."""

    platform: Platform
    owners: Owners
    signer: CallbackSigner
    enqueue: Enqueue
    queue_depths: Callable[[], Awaitable[dict[str, int]]]
    broker_description: str
    totp_secret: Callable[[], str | None]

    def verifier(self) -> CodeVerifier | None:
        """Read the secret at each use: `aegis totp init` (or --rotate) applies at once."""
        secret = self.totp_secret()
        return CodeVerifier(self.platform.store, secret) if secret else None


def services(context: ContextTypes.DEFAULT_TYPE) -> Services:
    return context.application.bot_data[SERVICES_KEY]


def place_of(update: Update) -> Place:
    """Where the update was written: its chat and, in a forum, its topic."""
    message = update.effective_message
    thread_id = message.message_thread_id if message.is_topic_message else None
    return Place(message.chat_id, thread_id)


async def reply(update: Update, context: ContextTypes.DEFAULT_TYPE, text: str, **options) -> None:
    """Answer the update where it was written, once: a redelivered update finds its answer
    queued."""
    place = place_of(update)
    await services(context).platform.outbox.send(
        place.chat_id,
        text,
        key=_reply_key(update),
        reply_to=update.effective_message.message_id,
        thread_id=place.thread_id,
        **options,
    )


def reply_row(
    update: Update, context: ContextTypes.DEFAULT_TYPE, text: str, **options
) -> dict[str, Any]:
    """``reply``'s message as an outbox row, for a change that queues it with what it answers
    (one commit for both); the caller asks for its delivery once that has committed."""
    place = place_of(update)
    return services(context).platform.outbox.row_of(
        place.chat_id,
        text,
        key=_reply_key(update),
        reply_to=update.effective_message.message_id,
        thread_id=place.thread_id,
        **options,
    )


async def edit_tapped(
    update: Update,
    context: ContextTypes.DEFAULT_TYPE,
    text: str,
    reply_markup: dict | None = None,
) -> None:
    """Edit the message a tap was on, through the outbox, once: a redelivered tap finds its
    edit queued. Without ``reply_markup`` the message loses its buttons."""
    message = update.callback_query.message
    await services(context).platform.outbox.send_edit(
        message.chat.id,
        text,
        message_id=message.message_id,
        reply_markup=reply_markup,
        key=_reply_key(update),
    )


def _reply_key(update: Update) -> str:
    return f"reply:{update.update_id}"
