"""A dependency that goes away (the database, Redis, Telegram) logs like a person would want: one
line when it goes, one when it is back with how long it was away and how many tries waited.

A job that fails because a dependency is away is not a bug: it is tried again later, as before,
but without a traceback per try (a 20-second Postgres outage wrote 101 of them, issue 21). Every
other failure keeps its traceback. The same record serves the worker's own loops (its heartbeat,
its job-run writer), so they stay quiet through an outage too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from dramatiq import Middleware, Retry
from telegram.error import BadRequest, NetworkError

from bot.errors import BrokerError, StoreError

logger = logging.getLogger(__name__)


def dependency_of(exc: BaseException) -> str | None:
    """Which dependency being away ``exc`` says, or None when it says something else."""
    if isinstance(exc, StoreError):
        return "the database"
    if isinstance(exc, (BrokerError, redis.ConnectionError, redis.TimeoutError)):
        return "Redis"
    # BadRequest is a NetworkError to PTB, but it is Telegram answering: about the request.
    if isinstance(exc, NetworkError) and not isinstance(exc, BadRequest):
        return "Telegram"
    return None


@dataclass
class _Outage:
    since: float
    tries: int = 0
    waiting: set[str] = field(default_factory=set)  # what failed on it: one success ends it


class Outages:
    """The dependencies this process found away, each until something that failed on it works."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._away: dict[str, _Outage] = {}
        self._lock = threading.Lock()

    def failed(self, dependency: str, exc: BaseException, what: str) -> None:
        """``what`` (a job's name, "heartbeat") failed because ``dependency`` is away."""
        with self._lock:
            outage = self._away.get(dependency)
            if outage is None:
                outage = self._away[dependency] = _Outage(since=self.clock())
                logger.warning(
                    "%s is unreachable (%s); what needs it waits and is tried again",
                    dependency,
                    _reason(exc),
                )
            outage.tries += 1
            outage.waiting.add(what)

    def worked(self, what: str) -> None:
        """``what`` worked: each dependency it had failed on is back."""
        if not self._away:  # the common case, without the lock
            return
        with self._lock:
            for dependency, outage in list(self._away.items()):
                if what in outage.waiting:
                    del self._away[dependency]
                    logger.warning(
                        "%s is back after %.0f s; %d tries waited for it",
                        dependency,
                        self.clock() - outage.since,
                        outage.tries,
                    )

    def away(self) -> list[str]:
        with self._lock:
            return sorted(self._away)


outages = Outages()  # this process's


class OutageLog(Middleware):
    """Turns a job's failure for an absent dependency into a quiet retry (Dramatiq logs a
    ``Retry`` without a traceback), counted in ``outages``; a success ends the outage."""

    def after_declare_actor(self, broker, actor) -> None:
        # An actor is declared again on each broker it is moved to (jobs/worker/broker.py): once.
        if not getattr(actor.fn, "quiet_when_away", False):
            actor.fn = _quiet_when_away(actor.fn, actor.actor_name)

    def after_process_message(self, broker, message, *, result=None, exception=None) -> None:
        if exception is None:
            outages.worked(message.actor_name)


def _quiet_when_away(fn, name: str):
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            dependency = dependency_of(exc)
            if dependency is None:
                raise
            outages.failed(dependency, exc, name)
            raise Retry(f"{dependency} is unreachable: {_reason(exc)}") from exc

    run.__name__ = getattr(fn, "__name__", name)
    run.quiet_when_away = True
    return run


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
