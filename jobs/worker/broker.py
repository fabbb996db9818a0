"""The one place the Dramatiq broker is configured. Import no actor module before
``configure_broker`` has run: each calls ``require_broker()`` at import time and fails loudly
instead of letting Dramatiq invent a default broker somewhere else."""

from __future__ import annotations

import logging

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.common import dq_name
from dramatiq.errors import ConnectionClosed
from dramatiq.middleware import AsyncIO, Middleware

from bot.errors import BrokerError
from jobs.worker.middleware import (
    AgentRunsHandBack,
    JobRunRecorder,
    WorkerHeartbeat,
    WorkerResources,
)
from jobs.worker.outages import OutageLog
from jobs.worker.redis_client import broker_client

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
# How long a consumer with nothing in hand waits for a wake before it polls anyway: whole
# seconds, as Redis before 6.0 reads BLPOP's timeout, and under the client's socket timeout
# (jobs/worker/redis_client.py, 5 s). A stopping worker waits on none.
IDLE_WAIT_SECONDS = 4
WAKES_KEPT = 16  # a wake list nobody consumes (no worker running) stays this short
# Of a million commands to Redis, how many also run Dramatiq's maintenance, which puts a dead
# worker's messages back on their queue once its heartbeat is a minute old. Dramatiq's 1000 was
# set for consumers polling ten times a second; an idle aegis sends about one fetch a second.
MAINTENANCE_CHANCE = 50_000
_configured: RedisBroker | None = None


class WakingRedisBroker(RedisBroker):
    """Dramatiq's Redis broker, whose idle consumers wait on Redis instead of polling it.

    Dramatiq's consumer polls an empty queue every ``worker_timeout`` (100 ms): three queues and
    their delay queues, six polls ten times a second, were most of what an idle aegis spent
    (about 40 ms of CPU a second, and 10 more in Redis). Here every enqueue also pushes a wake
    onto the queue's wake list, and a consumer with nothing in hand waits on that list (BLPOP)
    up to IDLE_WAIT_SECONDS (under the client's socket timeout) before it polls. A consumer
    holding messages (being processed, or delayed until their time) polls as before, so a
    delayed message still leaves on time. A worker that stops wakes the queues once it has put
    back what it held, so another worker takes those at once; a message put on a queue some
    other way (a dead worker's, put back by the maintenance that one command in twenty runs,
    once that worker's heartbeat is a minute old) waits at most IDLE_WAIT_SECONDS more.
    """

    stopping = False  # set while a worker of this broker shuts down: nothing waits then

    def __init__(self, **options) -> None:
        options.setdefault("maintenance_chance", MAINTENANCE_CHANCE)
        super().__init__(**options)

    @property
    def consumer_class(self):
        return _WakingConsumer

    def enqueue(self, message, *, delay=None):
        enqueued = super().enqueue(message, delay=delay)
        self.wake(enqueued.queue_name)
        return enqueued

    def wake(self, queue_name: str) -> None:
        """Wake one consumer waiting on ``queue_name``. A wake that fails loses nothing: the
        message is queued, and a consumer polls within IDLE_WAIT_SECONDS."""
        key = _wake_key(self.namespace, queue_name)
        try:
            with self.client.pipeline(transaction=False) as pipe:
                pipe.lpush(key, 1).ltrim(key, 0, WAKES_KEPT - 1).execute()
        except redis.RedisError as exc:
            logging.getLogger(__name__).debug("no wake for %s: %s", queue_name, exc)

    def wait_for_work(self, queue_name: str) -> None:
        if not self.stopping:
            self.client.blpop([_wake_key(self.namespace, queue_name)], IDLE_WAIT_SECONDS)


class _WakingConsumer(_RedisConsumer):
    def __next__(self):
        if not self.message_cache and not self.queued_message_ids:
            try:
                self.broker.wait_for_work(self.queue_name)
            except (redis.ConnectionError, redis.TimeoutError) as exc:  # Redis away or stalled
                raise ConnectionClosed(exc) from None
        return super().__next__()


class _WakesOnShutdown(Middleware):
    """A worker shutting down wakes its waiting consumers, and none waits again until the next
    worker boots: Dramatiq joins its consumer threads, and a wait would hold that up. Once it
    has put the messages it held back on their queues, it wakes the queues again, for the
    workers of other processes."""

    def before_worker_boot(self, broker, worker) -> None:
        broker.stopping = False

    def before_worker_shutdown(self, broker, worker) -> None:
        broker.stopping = True
        self._wake_all(broker)

    def after_worker_shutdown(self, broker, worker) -> None:
        self._wake_all(broker)

    @staticmethod
    def _wake_all(broker) -> None:
        for queue_name in broker.get_declared_queues():
            broker.wake(queue_name)
            broker.wake(dq_name(queue_name))


def _wake_key(namespace: str, queue_name: str) -> str:
    return f"{namespace}:{queue_name}.wake"


def configure_broker(redis_url: str, *, namespace: str = NAMESPACE) -> RedisBroker:
    """Create the Redis broker with the AsyncIO middleware and make it Dramatiq's global one."""
    global _configured
    broker = WakingRedisBroker(client=broker_client(redis_url), namespace=namespace)
    # Dramatiq runs ``after_*`` hooks in reverse: at shutdown the heartbeat goes, then the last
    # job runs are flushed, then the worker's resources close, then AsyncIO stops the loop.
    broker.add_middleware(AsyncIO())
    broker.add_middleware(WorkerResources())
    broker.add_middleware(JobRunRecorder())
    broker.add_middleware(WorkerHeartbeat())
    broker.add_middleware(AgentRunsHandBack())
    broker.add_middleware(OutageLog())
    broker.add_middleware(_WakesOnShutdown())
    dramatiq.set_broker(broker)
    if _configured is not None:
        _rebind_actors(_configured, broker)
    _configured = broker
    return broker


def require_broker() -> RedisBroker:
    if _configured is None:
        raise RuntimeError(
            "jobs.worker.broker.configure_broker() must run before actors are imported"
        )
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
