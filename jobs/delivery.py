"""The delivery actor: sends one outbox row to Telegram, within Telegram's rate limits.

Limits (Dramatiq's window rate limiter, in Redis, shared by every worker): about one message a
second per chat and thirty a second overall. A row that cannot go now is given back and sent
again with a delay, never by sleeping in the worker. A 429 is honoured to the second it names.
Network trouble is retried with backoff; a refusal from Telegram (blocked, bad request) fails
the row for good and records why.
"""

from __future__ import annotations

import io
import logging
import random
import time
from datetime import timedelta

import dramatiq
from dramatiq.rate_limits import WindowRateLimiter
from dramatiq.rate_limits.backends import RedisBackend
from telegram import InlineKeyboardMarkup, InputFile, ReplyParameters
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter

from bot.outbox import OutboxKind, OutgoingMessage
from jobs.broker import require_broker
from jobs.resources import resources

logger = logging.getLogger(__name__)
require_broker()
ORDER_RETRY_MS = 250


class _Limits:
    """One limiter per chat (made on first use) and one for everything, in the broker's Redis."""

    def __init__(self) -> None:
        self.client = None
        self.per_chat: dict[int, WindowRateLimiter] = {}
        self.overall: WindowRateLimiter | None = None

    def acquire(self, chat_id: int, per_chat: int, overall: int) -> bool:
        broker = deliver.broker
        client = broker.client
        if client is not self.client:
            self.__init__()
            self.client, self.backend = client, RedisBackend(client=client)
        backend = self.backend
        chat_limiter = self.per_chat.get(chat_id)
        if chat_limiter is None:
            key = f"{broker.namespace}:outbox-chat-{chat_id}"
            chat_limiter = WindowRateLimiter(backend, key, limit=per_chat, window=1)
            self.per_chat[chat_id] = chat_limiter
        if self.overall is None:
            self.overall = WindowRateLimiter(
                backend, f"{broker.namespace}:outbox-all", limit=overall, window=1
            )
        with chat_limiter.acquire(raise_on_failure=False) as chat_ok:
            if not chat_ok:
                return False
            with self.overall.acquire(raise_on_failure=False) as overall_ok:
                return overall_ok


_limits = _Limits()


@dramatiq.actor(queue_name="outbox", max_retries=10, min_backoff=500, max_backoff=60_000)
async def deliver(outbox_id: int) -> dict:
    res = await resources()
    message = await res.outbox.claim(outbox_id)
    if message is None:
        return {"already_delivered_or_taken": 1}
    if await res.outbox.is_blocked_by_older(message):
        await res.outbox.release(message.id)
        _send_later(outbox_id, ORDER_RETRY_MS)
        return {"deferred_for_order": 1}
    return await _send_parts(res, message)


async def _send_parts(res, message: OutgoingMessage) -> dict:
    settings = res.settings
    sent = 0
    try:
        while message.parts_sent < len(message.parts):
            if not _limits.acquire(
                message.chat_id,
                settings.outbox_per_chat_per_second,
                settings.outbox_global_per_second,
            ):
                await res.outbox.release(message.id)
                _send_later(message.id, _until_next_window_ms())
                return {"messages_sent": sent, "rate_limited": 1}
            telegram_id = await _send_one(res.bot, message, message.parts_sent)
            await res.outbox.record_part(message, telegram_id)
            sent += 1
    except RetryAfter as exc:
        await res.outbox.release(message.id, f"429: retry after {exc.retry_after}")
        _send_later(message.id, int(_seconds(exc.retry_after) * 1000) + 50)
        return {"messages_sent": sent, "telegram_429": 1}
    except (BadRequest, Forbidden) as exc:
        await res.outbox.mark_failed(message.id, f"{type(exc).__name__}: {exc.message}")
        logger.warning("outbox %s refused by Telegram: %s", message.id, exc.message)
        return {"messages_sent": sent, "messages_failed": 1}
    except NetworkError as exc:
        await res.outbox.release(message.id, f"{type(exc).__name__}: {exc.message}")
        raise
    except Exception as exc:
        await res.outbox.release(message.id, f"{type(exc).__name__}: {exc}")
        raise
    await res.outbox.mark_sent(message.id)
    return {"messages_sent": sent}


async def _send_one(bot, message: OutgoingMessage, index: int) -> int:
    last = index == len(message.parts) - 1
    markup = None
    if last and message.reply_markup:
        markup = InlineKeyboardMarkup.de_json(message.reply_markup, bot)
    reply = ReplyParameters(message.reply_to_message_id, allow_sending_without_reply=True)
    reply = reply if index == 0 and message.reply_to_message_id else None
    if message.kind is OutboxKind.DOCUMENT:
        text = message.parts[index]
        document = InputFile(io.BytesIO(text.encode()), filename="message.txt")
        caption = f"{text[:200].rstrip()}…\n\n(full text attached: {len(text):,} characters)"
        sent = await bot.send_document(
            message.chat_id,
            document,
            caption=caption[:1024],
            reply_markup=markup,
            reply_parameters=reply,
        )
    else:
        sent = await bot.send_message(
            message.chat_id, message.parts[index], reply_markup=markup, reply_parameters=reply
        )
    return sent.message_id


def _send_later(outbox_id: int, delay_ms: int) -> None:
    deliver.send_with_options(args=(outbox_id,), delay=max(1, delay_ms))


def _until_next_window_ms() -> int:
    """The window limiter counts per whole second; try again just after the next one starts."""
    return 1000 - int(time.time() * 1000) % 1000 + random.randint(5, 60)


def _seconds(retry_after) -> float:
    return retry_after.total_seconds() if hasattr(retry_after, "total_seconds") else retry_after


@dramatiq.actor(queue_name="default", max_retries=0)
async def sweep_outbox(schedule: str = "") -> dict:
    """Re-send what a delivery should have sent by now (lost message, crashed worker)."""
    res = await resources()
    due = await res.outbox.due_for_retry(older_than=timedelta(seconds=20))
    for outbox_id in due:
        deliver.send(outbox_id)
    return {"deliveries_requeued": len(due)}
