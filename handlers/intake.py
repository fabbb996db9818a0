"""Update intake: record, then handle, then mark; by long polling or by webhook.

The order is the guarantee. An update is recorded under its unique ``update_id`` before anything
acts on it, so a duplicate is dropped. Long polling only moves its offset past an update once it
is recorded (a database outage means the update is fetched again, not lost); a webhook answers
503 when it cannot record, so Telegram delivers again. An update whose handling hit an outage
stays pending and ``retry_pending`` handles it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from telegram import Bot, Update
from telegram.error import InvalidToken, RetryAfter, TelegramError
from telegram.ext import Application
from telegram.warnings import PTBUserWarning

from bot.chat.incoming import checked_update
from bot.chat.updates import UpdateLog
from bot.errors import StoreError, TransportError
from handlers.errors import HandlingOutcome, current_outcome, is_outage

logger = logging.getLogger(__name__)
# We ask for getUpdates' raw JSON on purpose: an update is recorded before it is parsed.
warnings.filterwarnings("ignore", message=".*getUpdates.*", category=PTBUserWarning)
POLL_TIMEOUT_SECONDS = 25


def validate_payload(payload: Any, bot: Bot | None = None) -> tuple[dict[str, Any], Update]:
    """The update as it is to be recorded, and as PTB builds it for ``bot``; TransportError for
    what is not an update, or one of a shape Telegram never sends (bot/chat/incoming.py). An
    update of an unknown kind is still an update.

    PTB must be able to build it, too: an object nested anywhere in it (a user inside an
    entity, a forwarded message's sender) that lacks what Telegram always sends would otherwise
    be recorded and then fail in the handler. What is built here is what is handled, when the
    same process handles it (``Intake``): an update is parsed once, not twice.
    """
    update = checked_update(payload)
    try:
        built = Update.de_json(update, bot)
    except Exception as exc:  # PTB raises whatever its constructors raise on such input
        raise TransportError(f"Telegram never sends this: {type(exc).__name__}") from None
    return update, built


class Intake:
    def __init__(
        self,
        application: Application,
        update_log: UpdateLog,
        *,
        replies_gathered: Callable[[], AbstractAsyncContextManager] = contextlib.nullcontext,
    ) -> None:
        self.application = application
        self.log = update_log
        # Around each chat's part of a polled batch: its replies go out together after it.
        self.replies_gathered = replies_gathered
        self.in_flight: set[int] = set()
        # Updates recorded here and not yet handled, as PTB built them when they were checked
        # (validate_payload): handling takes them from here instead of parsing them again.
        self.built: dict[int, Update] = {}

    async def accept(self, payload: Any) -> dict[str, Any] | None:
        """Record the update; returns it as recorded if it is new, None for a duplicate.
        Raises TransportError for what is refused, StoreError when it cannot be recorded."""
        update, built = validate_payload(payload, self.application.bot)
        if not await self.log.record(update):
            return None
        self.built[update["update_id"]] = built
        return update

    async def handle(self, payload: dict[str, Any], attempts: int = 0) -> None:
        """Handle one update and mark its outcome (webhook deliveries, retries)."""
        update_id = payload["update_id"]
        self.in_flight.add(update_id)
        try:
            if await self._process(payload, attempts):
                await self.log.mark_handled(update_id)
        except StoreError as exc:
            logger.warning("could not mark update %s: %s (it will be retried)", update_id, exc)
        finally:
            self.in_flight.discard(update_id)

    async def handle_batch(self, payloads: list[dict[str, Any]]) -> None:
        """Handle a polled batch: chats side by side, each chat's updates in order, and the
        handled ones marked in one transaction at the end."""
        by_chat: dict[Any, list[dict[str, Any]]] = {}
        for payload in payloads:
            by_chat.setdefault(conversation_of(payload), []).append(payload)
        self.in_flight.update(payload["update_id"] for payload in payloads)
        try:
            done = await asyncio.gather(*(self._process_in_order(p) for p in by_chat.values()))
            await self.log.mark_handled_many([uid for handled in done for uid in handled])
        except StoreError as exc:
            logger.warning("could not mark a batch of updates: %s (they will be retried)", exc)
        finally:
            self.in_flight.difference_update(payload["update_id"] for payload in payloads)

    async def _process_in_order(self, payloads: list[dict[str, Any]]) -> list[int]:
        handled = []
        async with self.replies_gathered():
            for payload in payloads:
                try:
                    if await self._process(payload, 0):
                        handled.append(payload["update_id"])
                except StoreError as exc:
                    logger.warning("update %s left for a retry: %s", payload["update_id"], exc)
        return handled

    async def _process(self, payload: dict[str, Any], attempts: int) -> bool:
        """Run the update through the Application; True if it was handled, else its failure
        is recorded (an outage leaves it pending for a retry)."""
        update_id = payload["update_id"]
        update = self.built.pop(update_id, None)
        try:
            update = update or Update.de_json(payload, self.application.bot)
        except Exception as exc:
            logger.warning("update %s is malformed: %s", update_id, exc)
            await self.log.mark_failed(update_id, f"malformed: {exc}")
            return False
        outcome = HandlingOutcome()
        token = current_outcome.set(outcome)
        try:
            await self.application.process_update(update)
        finally:
            current_outcome.reset(token)
        if outcome.error is None:
            return True
        if is_outage(outcome.error):
            await self.log.mark_unhandled(update_id, str(outcome.error), attempts + 1)
        else:
            await self.log.mark_failed(update_id, repr(outcome.error))
        return False

    async def retry_pending(self) -> int:
        """Handle again what an outage interrupted; returns how many were tried."""
        tried = 0
        for recorded in await self.log.pending():
            if recorded.update_id in self.in_flight:
                continue
            if recorded.is_stale:
                logger.error("gave up on update %s after a day of outages", recorded.update_id)
                await self.log.mark_failed(recorded.update_id, "gave up after a day")
                continue
            await self.handle(recorded.payload, recorded.attempts)
            tried += 1
        return tried

    async def run_retries(self, stop: asyncio.Event, every: float = 5.0) -> None:
        while not stop.is_set():
            try:
                await self.retry_pending()
            except StoreError as exc:
                logger.warning("update retry sweep skipped: %s", exc)
            await _wait(stop, every)

    async def poll(self, bot: Bot, stop: asyncio.Event) -> None:
        """Long polling that advances the offset only past updates already recorded."""
        # Start from what Telegram still holds unconfirmed rather than from the highest id we
        # stored: after a week of silence Telegram may pick a new, lower id at random, and an
        # offset above it would confirm (drop) that update unseen. Duplicates are dropped anyway.
        offset = 0
        backoff = _Backoff()
        while not stop.is_set():
            try:
                batch = await bot.do_api_request(
                    "getUpdates",
                    api_kwargs={
                        "offset": offset,
                        "timeout": POLL_TIMEOUT_SECONDS,
                        "allowed_updates": Update.ALL_TYPES,
                    },
                    read_timeout=POLL_TIMEOUT_SECONDS + 10,
                )
            except InvalidToken:
                logger.error("the bot token was refused; check AEGIS_TELEGRAM_TOKEN")
                raise
            except RetryAfter as exc:
                await _wait(stop, _seconds(exc.retry_after))
                continue
            except TelegramError as exc:  # network trouble, or Conflict: another poller
                logger.warning("getUpdates failed: %s", exc)
                await _wait(stop, backoff.next())
                continue
            backoff.reset()
            taken = await self._take(batch or [], offset, stop)
            if batch and taken == offset:  # only what no offset can confirm: do not spin on it
                await _wait(stop, backoff.next())
            offset = taken

    async def _take(self, batch: list[Any], offset: int, stop: asyncio.Event) -> int:
        """Record the batch, move the offset past it, handle what is new."""
        updates_, built = [], {}
        for payload in batch:
            try:
                update, parsed = validate_payload(payload, self.application.bot)
            except TransportError as exc:
                logger.warning("skipped something that is not an update: %s", exc)
                continue
            updates_.append(update)
            built[update["update_id"]] = parsed
        new = await self._record_until_stored(updates_, stop)
        if new is None:
            return offset
        self.built.update((u["update_id"], built[u["update_id"]]) for u in new)
        # Past the refused ones too: Telegram would otherwise hand them back at every poll.
        offset = max([offset, *(_next_offset(payload) for payload in batch)])
        await self.handle_batch(new)
        return offset

    async def _record_until_stored(
        self, payloads: list[dict[str, Any]], stop: asyncio.Event
    ) -> list[dict[str, Any]] | None:
        backoff = _Backoff()
        while not stop.is_set():
            try:
                return await self.log.record_many(payloads)
            except StoreError as exc:
                logger.warning("cannot record updates yet, not acknowledging them: %s", exc)
                await _wait(stop, backoff.next())
        return None


def _next_offset(payload: Any) -> int:
    """The offset that confirms ``payload``, refused or not (0: it has no usable id)."""
    update_id = payload.get("update_id") if isinstance(payload, dict) else None
    if isinstance(update_id, int) and 0 <= update_id < 2**63 - 1:
        return update_id + 1
    return 0


def conversation_of(payload: dict[str, Any]) -> Any:
    """The chat an update belongs to, so one chat's updates are handled in order."""
    for kind in ("message", "edited_message", "channel_post", "edited_channel_post"):
        body = payload.get(kind)
        if isinstance(body, dict) and isinstance(body.get("chat"), dict):
            return body["chat"].get("id")
    query = payload.get("callback_query")
    if isinstance(query, dict):
        message = query.get("message")
        if isinstance(message, dict) and isinstance(message.get("chat"), dict):
            return message["chat"].get("id")
        sender = query.get("from")
        return sender.get("id") if isinstance(sender, dict) else None
    return None


def _seconds(retry_after) -> float:
    return retry_after.total_seconds() if hasattr(retry_after, "total_seconds") else retry_after


class _Backoff:
    def __init__(self, first: float = 0.5, ceiling: float = 30.0) -> None:
        self.first, self.ceiling, self.current = first, ceiling, 0.0

    def next(self) -> float:
        self.current = min(self.ceiling, self.current * 2 if self.current else self.first)
        return self.current

    def reset(self) -> None:
        self.current = 0.0


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        pass
