"""The one place the Dramatiq broker is configured. Import no actor module before
``configure_broker`` has run: each calls ``require_broker()`` at import time and fails loudly
instead of letting Dramatiq invent a default broker somewhere else."""

from __future__ import annotations

import logging

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import AsyncIO

from bot.errors import BrokerError
from jobs.middleware import AgentRunsHandBack, JobRunRecorder, WorkerHeartbeat, WorkerResources
from jobs.outages import OutageLog
from jobs.redis_client import broker_client

NAMESPACE = "aegis"


class _SummariesAreRecorded(logging.Filter):
    """Actors return their summary of effects for ``JobRunRecorder``; that is not a lost result."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Results middleware" not in record.getMessage()


logging.getLogger("dramatiq.worker.WorkerThread").addFilter(_SummariesAreRecorded())
QUEUES = ("default", "outbox", "runs")
# Deliveries counted by outcome in a Redis hash (jobs/delivery.py), read by /metrics. An allow
# list: a name outside it is never written, so the scrape's series stay these.
DELIVERIES = "metrics:deliveries"
DELIVERY_OUTCOMES = (
    "sent",
    "failed",
    "rate_limited",
    "telegram_429",
    "network_error",
    "server_error",
    "lease_lost",
)
_configured: RedisBroker | None = None


def configure_broker(redis_url: str, *, namespace: str = NAMESPACE) -> RedisBroker:
    """Create the Redis broker with the AsyncIO middleware and make it Dramatiq's global one."""
    global _configured
    broker = RedisBroker(client=broker_client(redis_url), namespace=namespace)
    # Dramatiq runs ``after_*`` hooks in reverse: at shutdown the heartbeat goes, then the last
    # job runs are flushed, then the worker's resources close, then AsyncIO stops the loop.
    broker.add_middleware(AsyncIO())
    broker.add_middleware(WorkerResources())
    broker.add_middleware(JobRunRecorder())
    broker.add_middleware(WorkerHeartbeat())
    broker.add_middleware(AgentRunsHandBack())
    broker.add_middleware(OutageLog())
    dramatiq.set_broker(broker)
    if _configured is not None:
        _rebind_actors(_configured, broker)
    _configured = broker
    return broker


def require_broker() -> RedisBroker:
    if _configured is None:
        raise RuntimeError("jobs.broker.configure_broker() must run before actors are imported")
    return _configured


def queue_depths(broker: RedisBroker) -> dict[str, int]:
    """Messages waiting per queue (ready plus delayed), read straight from Redis."""
    try:
        return {
            queue: broker.client.llen(f"{broker.namespace}:{queue}")
            + broker.client.llen(f"{broker.namespace}:{queue}.DQ")
            for queue in QUEUES
        }
    except redis.RedisError as exc:
        raise BrokerError(f"Redis is unavailable: {type(exc).__name__}") from exc


def delivery_counts(broker: RedisBroker) -> dict[str, int]:
    """Deliveries so far by outcome (since Redis last lost its data), every outcome present."""
    try:
        stored = broker.client.hgetall(f"{broker.namespace}:{DELIVERIES}")
    except redis.RedisError as exc:
        raise BrokerError(f"Redis is unavailable: {type(exc).__name__}") from exc
    counts = {key.decode(): int(value) for key, value in stored.items()}
    return {outcome: counts.get(outcome, 0) for outcome in DELIVERY_OUTCOMES}


def _rebind_actors(old: RedisBroker, new: RedisBroker) -> None:
    for name in old.get_declared_actors():
        actor = old.get_actor(name)
        actor.broker = new
        new.declare_actor(actor)
