"""Update intake: record, then handle, then mark; by long polling or by webhook.

The order is the guarantee. An update is recorded under its unique ``update_id`` before anything
acts on it, so a duplicate is dropped. Long polling only moves its offset past an update once it
is recorded (a database outage means the update is fetched again, not lost); a webhook answers
503 when it cannot record, so Telegram delivers again. An update whose handling hit an outage
stays pending and ``retry_pending`` handles it again.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from datetime import timedelta
from typing import Any

from telegram import Bot, Update
from telegram.error import InvalidToken, NetworkError
from telegram.ext import Application
from telegram.warnings import PTBUserWarning

from bot.errors import StoreError, TransportError
from bot.updates import UpdateLog
from handlers.errors import HandlingOutcome, current_outcome, is_outage

logger = logging.getLogger(__name__)
# We ask for getUpdates' raw JSON on purpose: an update is recorded before it is parsed.
warnings.filterwarnings("ignore", message=".*getUpdates.*", category=PTBUserWarning)
POLL_TIMEOUT_SECONDS = 25
RETRY_AFTER = timedelta(seconds=10)


def validate_payload(payload: Any) -> dict[str, Any]:
    """Refuse what is not an update at all; an update of an unknown kind is still an update."""
    if not isinstance(payload, dict):
        raise TransportError("an update must be a JSON object")
    update_id = payload.get("update_id")
    if not isinstance(update_id, int) or isinstance(update_id, bool) or update_id < 0:
        raise TransportError("an update needs a non-negative integer update_id")
    return payload


class Intake:
    def __init__(
        self,
        application: Application,
        update_log: UpdateLog,
        *,
        retry_after: timedelta = RETRY_AFTER,
    ) -> None:
        self.application = application
        self.log = update_log
        self.retry_after = retry_after
        self.in_flight: set[int] = set()

    async def accept(self, payload: Any) -> bool:
        """Record the update; True if it is new. Raises StoreError when it cannot be recorded."""
        return await self.log.record(validate_payload(payload))

    async def handle(self, payload: dict[str, Any], attempts: int = 0) -> None:
        update_id = payload["update_id"]
        self.in_flight.add(update_id)
        try:
            await self._handle(payload, update_id, attempts)
        except StoreError as exc:
            logger.warning("could not mark update %s: %s (it will be retried)", update_id, exc)
        finally:
            self.in_flight.discard(update_id)

    async def _handle(self, payload: dict[str, Any], update_id: int, attempts: int) -> None:
        try:
            update = Update.de_json(payload, self.application.bot)
        except Exception as exc:
            logger.warning("update %s is malformed: %s", update_id, exc)
            await self.log.mark_unhandled(update_id, f"malformed: {exc}", attempts=10**6)
            return
        outcome = HandlingOutcome()
        token = current_outcome.set(outcome)
        try:
            await self.application.process_update(update)
        finally:
            current_outcome.reset(token)
        if outcome.error is None:
            await self.log.mark_handled(update_id)
        elif is_outage(outcome.error):
            await self.log.mark_unhandled(update_id, str(outcome.error), attempts + 1)
        else:
            await self.log.mark_unhandled(update_id, repr(outcome.error), attempts=10**6)

    async def retry_pending(self) -> int:
        """Handle again what an outage interrupted; returns how many were tried."""
        tried = 0
        for recorded in await self.log.pending(older_than=self.retry_after):
            if recorded.update_id in self.in_flight:
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
            except NetworkError as exc:
                logger.warning("getUpdates failed: %s", exc)
                await _wait(stop, backoff.next())
                continue
            backoff.reset()
            offset = await self._take(batch or [], offset, stop)

    async def _take(self, batch: list[Any], offset: int, stop: asyncio.Event) -> int:
        for payload in batch:
            new = await self._record_until_stored(payload, stop)
            if new is None:
                return offset
            offset = max(offset, payload["update_id"] + 1) if isinstance(payload, dict) else offset
            if new:
                await self.handle(payload)
        return offset

    async def _record_until_stored(self, payload: Any, stop: asyncio.Event) -> bool | None:
        backoff = _Backoff()
        while not stop.is_set():
            try:
                return await self.accept(payload)
            except TransportError as exc:
                logger.warning("skipped something that is not an update: %s", exc)
                return False
            except StoreError as exc:
                logger.warning("cannot record an update yet, not acknowledging it: %s", exc)
                await _wait(stop, backoff.next())
        return None


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
