"""The delivery actor: sends one outbox row to Telegram, within Telegram's rate limits.

Limits (sliding one-second windows in Redis, shared by every worker): about one message a
second per chat and thirty a second overall. A row that cannot go now is given back and sent
again with a delay, never by sleeping in the worker. A 429 is honoured to the second it names.
Network trouble is retried with backoff; a refusal from Telegram (blocked, bad request) fails
the row for good and records why.

A chat's rows go out in order, so a row that can never go would freeze its chat: one Telegram
refuses is set aside at once, one it keeps failing on (a 500, again and again) after a bounded
number of tries, and the owner is told (bot/chat/undelivered.py). Only the network, a gateway
in front of Telegram and a 429 are waited out for as long as they last.
"""

from __future__ import annotations

import asyncio
import io
import logging
import random
import secrets
import warnings
from datetime import timedelta

import dramatiq
import redis
from telegram import InlineKeyboardMarkup, InputFile, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter
from telegram.warnings import PTBUserWarning

from aegis.botapi.http import BotApiServerError
from bot.chat.deliveries import LEASE as RECORD_FOR
from bot.chat.outgoing import OutboxKind, OutgoingMessage, outgoing_path, split_text
from bot.chat.text import MESSAGE_LIMIT, clip, plain
from bot.chat.undelivered import (
    SERVER_ERRORS_IN_A_ROW,
    seconds_before_next_try,
    server_error,
    server_errors_in_a_row,
    set_aside,
)
from bot.errors import LeaseLost, StoreError
from bot.timeutil import now
from jobs.topics import open_topics
from jobs.worker.broker import DELIVERIES, DELIVERY_OUTCOMES, require_broker
from jobs.worker.resources import resources

logger = logging.getLogger(__name__)
# A text goes out through do_api_request on purpose: see _send_text.
warnings.filterwarnings(
    "ignore", message=r".*do_api_request\(\"sendMessage\"", category=PTBUserWarning
)
require_broker()
DRAIN_AT_MOST = 20
# An error that is neither Telegram refusing (failed at once) nor the network (retried until
# Telegram is back): most likely our own bug. Retried a few times, then the row fails.
GIVE_UP_AFTER_ERRORS = 5
# A 502, 503 or 504 comes from a gateway in front of the Bot API and says nothing about the
# message: Telegram is away, and the row waits, in order, as it does for the network. Any other
# 5xx is the Bot API failing on this request: tried again, a few times, then set aside (see
# SERVER_ERRORS_IN_A_ROW in bot/chat/undelivered.py for the bound and why).
GATEWAY_DOWN = frozenset({502, 503, 504})


# A true sliding window, not Dramatiq's WindowRateLimiter: that one counts whole wall-clock
# seconds, so sends at 12:00:00.95 and 12:00:01.01 both pass, 60 ms apart, and Telegram, which
# counts a real second, answers 429. One sorted set of send times per limit, read and written
# atomically on the Redis clock (shared by every worker); returns 0 when the send may go, else
# the milliseconds until it may.
_SLIDING_WINDOW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local window = tonumber(ARGV[#KEYS + 1])
local wait = 0
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  if redis.call('ZCARD', key) >= tonumber(ARGV[i]) then
    local oldest = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
    wait = math.max(wait, oldest + window - now)
  end
end
if wait > 0 then return wait end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[#KEYS + 2])
  redis.call('PEXPIRE', key, window)
end
return 0
"""
# Telegram's second plus a margin for the time a request spends in flight: two requests sent
# 1.05 s apart arrived under a second apart when the machine was busy (a 429 in a loaded test).
WINDOW_MS = 1_200


class _Limits:
    """A window per chat and one for everything, in the broker's Redis, asked through the
    worker loop's own asyncio client: a thread hop per send cost more than the call."""

    def __init__(self) -> None:
        self.client = None
        self.script = None

    async def wait_ms(self, client, chat_id: int, per_chat: int, overall: int) -> int:
        """Take a send from both windows, or say how long until one is free (taking none)."""
        if client is not self.client:
            self.client, self.script = client, client.register_script(_SLIDING_WINDOW)
        namespace = deliver.broker.namespace
        keys = [f"{namespace}:outbox-chat-{chat_id}", f"{namespace}:outbox-all"]
        args = [per_chat, overall, WINDOW_MS, secrets.token_hex(8)]
        return int(await self.script(keys=keys, args=args))


_limits = _Limits()


@dramatiq.actor(queue_name="outbox", max_retries=10, min_backoff=500, max_backoff=60_000)
async def deliver(outbox_id: int) -> dict:
    """Send the chat's undelivered messages, oldest first, starting with the one of
    ``outbox_id``'s chat; a delivery already under way for that chat sends them instead."""
    res = await resources()
    outbox = res.platform.outbox
    totals: dict[str, int] = {}
    message = await outbox.deliveries.claim_next_in_chat(outbox_id)
    for _ in range(DRAIN_AT_MOST):
        if message is None:
            break
        outcome, message = await _send_parts(res, message, claim_next=True)
        for key, count in outcome.items():
            totals[key] = totals.get(key, 0) + count
    else:
        if message is not None:  # a long queue for one chat: give other chats a turn
            await outbox.deliveries.release(message.id, held=message)
            await asyncio.to_thread(deliver.send, message.id)
    await _tally(res, totals)
    return totals or {"nothing_to_send": 1}


# The summary's names for what happened, as /metrics names the outcomes (jobs/worker/broker.py).
OUTCOME_OF = {
    "messages_sent": "sent",
    "messages_failed": "failed",
    "rate_limited": "rate_limited",
    "telegram_429": "telegram_429",
    "network_error": "network_error",
    "server_error": "server_error",
    "lease_lost": "lease_lost",
}


async def _tally(res, totals: dict[str, int]) -> None:
    """Count the outcomes for /metrics; a count lost to a Redis hiccup never fails a delivery."""
    counts = {OUTCOME_OF.get(key): n for key, n in totals.items() if n}
    counts = {outcome: n for outcome, n in counts.items() if outcome in DELIVERY_OUTCOMES}
    if not counts:
        return
    key = f"{deliver.broker.namespace}:{DELIVERIES}"
    try:
        async with res.redis.pipeline(transaction=False) as pipe:
            for outcome, n in counts.items():
                pipe.hincrby(key, outcome, n)
            await pipe.execute()
    except (redis.RedisError, OSError) as exc:
        logger.debug("deliveries not counted: %s", exc)


async def _send_parts(
    res, message: OutgoingMessage, *, claim_next: bool = False
) -> tuple[dict, OutgoingMessage | None]:
    """Send what is left of ``message``; returns what happened and, when it went out whole and
    ``claim_next`` is set, the chat's next message (claimed in the same transaction)."""
    settings, outbox = res.platform.settings, res.platform.outbox
    sent, following = 0, None
    try:
        while message.parts_sent < len(message.parts):
            wait = await _limits.wait_ms(
                res.redis,
                message.chat_id,
                settings.outbox_per_chat_per_second,
                settings.outbox_global_per_second,
            )
            if wait:
                # The row's last error stays: a turn of our own limiter is not an outcome.
                delay_ms = wait + random.randint(5, 60)
                await _retry_later(res, message, delay_ms, message.last_error)
                return {"messages_sent": sent, "rate_limited": 1}, None
            telegram_id = await _send_one(res, message, message.parts_sent)
            following = await _record(outbox, message, telegram_id, claim_next)
            sent += 1
    except RetryAfter as exc:
        delay_ms = int(_seconds(exc.retry_after) * 1000) + 50
        await _retry_later(res, message, delay_ms, f"429: retry after {delay_ms} ms")
        return {"messages_sent": sent, "telegram_429": 1}, None
    except (BadRequest, Forbidden) as exc:
        if _topic_gone(message, exc):
            await _leave_topic(res, message)
            return {"messages_sent": sent, "topic_gone": 1}, await _after(res, message, claim_next)
        # Blocked, or removed from the chat: a notice there would be refused as well.
        reason = f"Telegram refused it: {type(exc).__name__}: {exc.message}"
        await set_aside(outbox, message, reason, tell_owner=isinstance(exc, BadRequest))
        return {"messages_sent": sent, "messages_failed": 1}, await _after(res, message, claim_next)
    except BotApiServerError as exc:
        if exc.status in GATEWAY_DOWN:
            return await _telegram_away(res, message, exc, sent)
        return await _server_error(res, message, exc, sent, claim_next)
    except LeaseLost as exc:  # we stalled past the lease; the row belongs to another delivery
        logger.warning("%s", exc)
        return {"messages_sent": sent, "lease_lost": 1}, None
    except NetworkError as exc:  # Telegram unreachable: retried for as long as it takes
        return await _telegram_away(res, message, exc, sent)
    except (redis.ConnectionError, redis.TimeoutError) as exc:  # the send windows' Redis is down
        await outbox.deliveries.release(message.id, f"Redis: {type(exc).__name__}", held=message)
        raise
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        if message.attempts >= GIVE_UP_AFTER_ERRORS:
            logger.error("outbox %s failed for good: %s", message.id, error)
            reason = f"it failed {message.attempts} times on my side ({error})"
            await set_aside(outbox, message, reason)
            return {"messages_sent": sent, "messages_failed": 1}, await _after(
                res, message, claim_next
            )
        await outbox.deliveries.release(message.id, error, held=message)
        raise
    if sent == 0:  # nothing was left to send: a rerun after the last part was recorded
        await outbox.deliveries.mark_sent(message.id, held=message)
        following = await _after(res, message, claim_next)
    return {"messages_sent": sent}, following


async def _telegram_away(res, message: OutgoingMessage, exc: NetworkError, sent: int):
    """The network, or a gateway in front of Telegram: the row waits, and Dramatiq retries."""
    error = f"{type(exc).__name__}: {exc.message}"
    await res.platform.outbox.deliveries.release(message.id, error, held=message)
    await _tally(res, {"messages_sent": sent, "network_error": 1})
    raise exc


async def _server_error(
    res, message: OutgoingMessage, exc: BotApiServerError, sent: int, claim_next: bool
) -> tuple[dict, OutgoingMessage | None]:
    """The Bot API failed on this message: try it again a little later, or, after
    ``SERVER_ERRORS_IN_A_ROW`` such answers, set it aside so the chat goes on."""
    count = server_errors_in_a_row(message.last_error) + 1
    if count >= SERVER_ERRORS_IN_A_ROW:
        reason = f"Telegram answered “{exc.description}” ({exc.status}) to {count} tries in a row"
        await set_aside(res.platform.outbox, message, reason)
        following = await _after(res, message, claim_next)
        return {"messages_sent": sent, "messages_failed": 1}, following
    error = server_error(exc.status, exc.description, count)
    logger.warning("outbox %s: %s", message.id, error)
    wait = seconds_before_next_try(count, res.platform.settings.outbox_retry_seconds)
    await _retry_later(res, message, int(1000 * wait), error)
    return {"messages_sent": sent, "server_error": 1}, None


def _topic_gone(message: OutgoingMessage, exc: Exception) -> bool:
    """Telegram has no such topic (any more), or it is closed: someone deleted or closed an
    agent's topic in the group."""
    text = getattr(exc, "message", "").lower()
    return message.thread_id is not None and ("thread not found" in text or "topic_" in text)


async def _leave_topic(res, message: OutgoingMessage) -> None:
    """Send the row to the forum's General topic instead, forget the topic, and ask for a new
    one (jobs/topics.py), so the agent's next messages have a topic again."""
    platform = res.platform
    logger.warning("outbox %s: topic %s is gone; sent to General", message.id, message.thread_id)
    await platform.outbox.deliveries.leave_topic(message.id, held=message)
    await platform.topics.forget(message.chat_id, message.thread_id)
    await asyncio.to_thread(open_topics.send)


async def _after(res, done: OutgoingMessage, claim_next: bool) -> OutgoingMessage | None:
    """The chat's next message once ``done`` is out of its way (failed for good, given back
    for General, or found sent already), so the drain goes on: one message must not hold back
    those queued behind it, whose own deliveries left them to this one."""
    return await res.platform.outbox.deliveries.claim_next_in_chat(done.id) if claim_next else None


async def _record(outbox, message: OutgoingMessage, telegram_id: int, claim_next: bool):
    """Record what Telegram accepted. Telegram has the message now: given up on, the row would
    stay claimed until its lease ran out and then be sent again. So a database away at this
    moment is waited for, up to a lease, with the answer held here; only past that does the
    delivery fail as on any outage (and the message may go out twice)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RECORD_FOR.total_seconds()
    wait = 0.1
    while True:
        try:
            return await outbox.deliveries.record_part(message, telegram_id, claim_next=claim_next)
        except StoreError as exc:
            if loop.time() + wait > deadline:
                raise
            if wait == 0.1:
                logger.warning(
                    "outbox %s: sent; its record waits for the database (%s)", message.id, exc
                )
            await asyncio.sleep(wait)
            wait = min(wait * 2, 5.0)


async def _retry_later(res, message: OutgoingMessage, delay_ms: int, error: str | None = None):
    not_before = now() + timedelta(milliseconds=delay_ms)
    await res.platform.outbox.deliveries.release(
        message.id, error, not_before=not_before, held=message
    )
    await asyncio.to_thread(_send_later, message.id, delay_ms)


async def _send_one(res, message: OutgoingMessage, index: int) -> int:
    bot = res.bot
    last = index == len(message.parts) - 1
    if message.kind is OutboxKind.TEXT:
        reply_to = await _reply_to(res, message) if index == 0 else None
        keyboard = message.reply_markup if last else None
        return await _send_text(bot, message, message.parts[index], keyboard, reply_to)
    markup = None
    if last and message.reply_markup:
        markup = InlineKeyboardMarkup.de_json(message.reply_markup, bot)
    if message.kind is OutboxKind.EDIT:
        return await _edit(res, message, markup)
    reply_to = await _reply_to(res, message) if index == 0 else None
    reply = ReplyParameters(reply_to, allow_sending_without_reply=True) if reply_to else None
    if message.kind is OutboxKind.FILE:
        sent = await _send_file(res, message, markup, reply)
    else:
        text = plain(message.parts[index])
        document = InputFile(io.BytesIO(text.encode()), filename="message.txt")
        caption = message.caption or (
            f"{text[:200].rstrip()}…\n\n(full text attached: {len(text):,} characters)"
        )
        sent = await bot.send_document(
            message.chat_id,
            document,
            caption=caption[:1024],
            reply_markup=markup,
            reply_parameters=reply,
            message_thread_id=message.thread_id,
        )
    return sent.message_id


async def _reply_to(res, message: OutgoingMessage) -> int | None:
    """The Telegram message the row answers, if any."""
    if message.reply_to_message_id is not None or message.reply_to_outbox is None:
        return message.reply_to_message_id
    # Rows of one chat go out in order, so the earlier row has been sent (or has failed).
    target = await res.platform.outbox.get(message.reply_to_outbox)
    return target["telegram_message_ids"][0] if target and target["telegram_message_ids"] else None


async def _send_text(bot, message: OutgoingMessage, text: str, keyboard, reply_to) -> int:
    """sendMessage with the row's stored keyboard as it is, reading back only the new message's
    id. ``Bot.send_message`` would rebuild the keyboard as objects to serialize it again, and
    parse the whole Message Telegram returns (with the message it replies to inside): most of
    a delivery's work, for one number. Errors are raised as ``send_message`` raises them."""
    fields: dict = {"chat_id": message.chat_id, "text": text, "parse_mode": ParseMode.HTML}
    if message.thread_id is not None:
        fields["message_thread_id"] = message.thread_id
    if keyboard:
        fields["reply_markup"] = keyboard
    if reply_to:
        fields["reply_parameters"] = {"message_id": reply_to, "allow_sending_without_reply": True}
    try:
        sent = await bot.do_api_request("sendMessage", api_kwargs=fields)
    except BadRequest as exc:
        if not _unparsable(exc):
            raise
        sent = await bot.do_api_request("sendMessage", api_kwargs=_as_written(message, fields))
    return sent["message_id"]


def _unparsable(exc: BadRequest) -> bool:
    return "can't parse entities" in exc.message.lower()


def _as_written(message: OutgoingMessage, fields: dict) -> dict:
    """The text without parse mode, for a row Telegram could not parse as HTML: one queued
    before the outbox kept HTML, or a view's mistake. It arrives as written, tags and all,
    rather than not at all."""
    logger.warning("outbox %s: Telegram could not parse its HTML; sent as written", message.id)
    written = {key: value for key, value in fields.items() if key != "parse_mode"}
    written["text"] = clip(written["text"], MESSAGE_LIMIT)  # a part fits by what it shows
    return written


async def _send_file(res, message: OutgoingMessage, markup, reply):
    """The copy the platform kept when the file was asked for, under the file's own name."""
    path = outgoing_path(res.platform.settings.data_dir, message.parts[0])
    try:
        content = await asyncio.to_thread(path.read_bytes)
    except OSError as exc:  # kept by a process on another machine, or removed: never coming
        raise BadRequest(f"the file to send is not in this data dir: {exc.strerror}") from None
    return await res.bot.send_document(
        message.chat_id,
        InputFile(io.BytesIO(content), filename=path.name),
        caption=message.caption,
        reply_markup=markup,
        reply_parameters=reply,
        message_thread_id=message.thread_id,
    )


async def _edit(res, message: OutgoingMessage, markup) -> int:
    """Replace what an earlier row sent (a card's last part, which carries its buttons), or the
    Telegram message the row names (``reply_to_message_id``: a message a tap was on)."""
    if message.edit_of is None:
        target = {"kind": OutboxKind.TEXT, "telegram_message_ids": [message.reply_to_message_id]}
    else:
        target = await res.platform.outbox.get(message.edit_of)
    if target is None or not target["telegram_message_ids"]:
        raise BadRequest(f"outbox {message.edit_of} sent no message to edit")
    message_id = target["telegram_message_ids"][-1]
    text = _one_message(message.parts[0])
    try:
        if target["kind"] in (OutboxKind.DOCUMENT, OutboxKind.FILE):
            await res.bot.edit_message_caption(
                message.chat_id, message_id, caption=plain(text)[:1024], reply_markup=markup
            )
        else:
            await _edit_text(res.bot, message, message_id, text, markup)
    except BadRequest as exc:
        if "not modified" not in exc.message:  # the same edit, already made by an earlier try
            raise
    return message_id


def _one_message(text: str) -> str:
    """An edit is one message: what does not fit is cut at a line, and the cut says so."""
    parts = split_text(text, MESSAGE_LIMIT - 2)
    return parts[0] + "\n…" if len(parts) > 1 else parts[0]


async def _edit_text(bot, message: OutgoingMessage, message_id: int, text: str, markup) -> None:
    """editMessageText in HTML, as written if Telegram cannot parse it (see ``_as_written``)."""
    try:
        await bot.edit_message_text(
            text, message.chat_id, message_id, reply_markup=markup, parse_mode=ParseMode.HTML
        )
    except BadRequest as exc:
        if not _unparsable(exc):
            raise
        logger.warning("outbox %s: Telegram could not parse its HTML; edited as is", message.id)
        written = clip(text, MESSAGE_LIMIT)  # as _as_written: fits by what it shows
        await bot.edit_message_text(written, message.chat_id, message_id, reply_markup=markup)


def _send_later(outbox_id: int, delay_ms: int) -> None:
    deliver.send_with_options(args=(outbox_id,), delay=max(1, delay_ms))


def _seconds(retry_after) -> float:
    return retry_after.total_seconds() if hasattr(retry_after, "total_seconds") else retry_after


@dramatiq.actor(queue_name="default", max_retries=0)
async def sweep_outbox(schedule: str = "") -> dict:
    """Re-send what a delivery should have sent by now (lost message, crashed worker)."""
    outbox = (await resources()).platform.outbox
    due = await outbox.deliveries.due_for_retry(older_than=timedelta(seconds=20))
    for outbox_id in due:
        await asyncio.to_thread(deliver.send, outbox_id)
    return {"deliveries_requeued": len(due)}
