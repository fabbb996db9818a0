"""The broker's Redis as this process reaches it: one URL, and the same fail-fast settings for
the broker's own client and for the asyncio client a worker's loop uses (jobs/worker/resources.py).

Fail fast in an outage: the caller keeps the work (an update stays pending, an outbox row waits
for the sweep) rather than hold a thread or a loop through redis-py's default long backoff.
"""

from __future__ import annotations

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

_OPTIONS = {"socket_timeout": 5, "socket_connect_timeout": 2, "health_check_interval": 30}
_url: str | None = None


def broker_client(url: str) -> redis.Redis:
    """The broker's client; its URL is remembered for ``loop_client``."""
    global _url
    _url = url
    return redis.Redis.from_url(url, retry=Retry(_backoff(), 2), **_OPTIONS)


def loop_client(*, waiting_beyond: int | None = None) -> redis.asyncio.Redis:
    """A client of the broker's Redis for the calling event loop, for work that would otherwise
    hop to a thread for each command; the caller closes it (``aclose``).

    With ``waiting_beyond``, a command finding that many connections busy waits for one (up
    to the socket timeout) instead of failing: redis-py's own pool raises "Too many
    connections" past 100, which a burst of requests served at once reaches."""
    if _url is None:
        raise RuntimeError("jobs.worker.broker.configure_broker() must run first")
    retry = AsyncRetry(_backoff(), 2)
    if waiting_beyond is None:
        return redis.asyncio.Redis.from_url(_url, retry=retry, **_OPTIONS)
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        _url, max_connections=waiting_beyond, timeout=_OPTIONS["socket_timeout"], **_OPTIONS
    )
    return redis.asyncio.Redis(connection_pool=pool, retry=retry)


def _backoff() -> ExponentialBackoff:
    return ExponentialBackoff(cap=0.5, base=0.05)
