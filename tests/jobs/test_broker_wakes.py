"""The broker's idle consumers wait on Redis for a wake instead of polling (jobs/worker/broker.py):
a message sent wakes one at once, a worker stopping wakes them all and then wakes another
process's for what it handed back, and a wake list nobody reads stays short. The waits are made
long here (a minute), so a message that got through, or a worker that stopped, did so through a
wake and not through a wait running out."""

from __future__ import annotations

import threading

import dramatiq
import pytest
import redis

from jobs.worker import broker as broker_module
from jobs.worker.broker import WAKES_KEPT, WakingRedisBroker, _WakesOnShutdown
from tests.helpers.stack import running_worker

LONG_WAIT = 60  # seconds: far past how long each test waits for what it expects


@pytest.fixture
def waking_broker(redis_server_url, redis_namespace, monkeypatch):
    monkeypatch.setattr(broker_module, "IDLE_WAIT_SECONDS", LONG_WAIT)
    client = redis.Redis.from_url(
        redis_server_url, socket_timeout=LONG_WAIT + 5, client_name=redis_namespace
    )
    broker = WakingRedisBroker(client=client, namespace=redis_namespace)
    broker.add_middleware(_WakesOnShutdown())
    yield broker
    client.close()


def _actor(broker, name: str):
    """An actor that notes each call and sets ``ran`` each time."""
    calls: list[str] = []
    ran = threading.Event()

    def note(word: str) -> None:
        calls.append(word)
        ran.set()

    return dramatiq.actor(note, broker=broker, actor_name=name, max_retries=0), calls, ran


def _waiting_consumers(broker) -> int:
    """This broker's connections blocked in a BLPOP now (flag b), not ones whose last command
    was one; other tests' share the server."""
    clients = broker.client.client_list()
    return sum(
        1
        for c in clients
        if c.get("name") == broker.namespace and c.get("cmd") == "blpop" and "b" in c["flags"]
    )


def _until(check, seconds: float = 10.0) -> bool:
    stop = threading.Event()
    for _ in range(int(seconds / 0.02)):
        if check():
            return True
        stop.wait(0.02)
    return False


def test_a_message_sent_wakes_a_waiting_consumer_and_runs(waking_broker):
    actor, calls, ran = _actor(waking_broker, "wake_probe")
    with running_worker(waking_broker):
        assert _until(lambda: _waiting_consumers(waking_broker) >= 2)  # the queue and its DQ
        actor.send("now")
        assert ran.wait(10), "the message waited for a consumer's poll"
        ran.clear()
        assert _until(lambda: _waiting_consumers(waking_broker) >= 2)  # waiting again
        actor.send_with_options(args=("later",), delay=200)
        assert ran.wait(10), "the delayed message waited for a consumer's poll"
    assert calls == ["now", "later"]


def test_a_stopping_worker_wakes_its_consumers_and_stops(waking_broker):
    _actor(waking_broker, "stop_probe")
    with running_worker(waking_broker) as worker:
        assert _until(lambda: _waiting_consumers(waking_broker) >= 2)
        stopping = threading.Thread(target=worker.stop, daemon=True)
        stopping.start()
        stopping.join(15)
        worker.stop = lambda: None  # stopped (or stopping): running_worker's own stop waits not
        assert not stopping.is_alive(), "a consumer kept waiting through the shutdown"
    assert _waiting_consumers(waking_broker) == 0


def test_the_wake_list_stays_short_while_no_worker_reads_it(waking_broker):
    actor, _, _ = _actor(waking_broker, "unread_probe")
    for n in range(WAKES_KEPT * 3):
        actor.send(str(n))
    key = f"{waking_broker.namespace}:default.wake"
    assert waking_broker.client.llen(key) == WAKES_KEPT
    assert waking_broker.client.llen(f"{waking_broker.namespace}:default") == WAKES_KEPT * 3


def test_a_message_a_stopping_worker_held_is_taken_by_another_worker_at_once(
    waking_broker, redis_server_url
):
    """Two processes' workers on one queue: what the one stopping had fetched but not started
    goes back on the queue, and the other's consumers, waiting on the wake list, take it."""
    release, started = threading.Event(), threading.Event()
    taken: list[str] = []

    def busy(word: str) -> None:
        started.set()
        release.wait(30)

    dramatiq.actor(busy, broker=waking_broker, actor_name="handed_probe", max_retries=0)
    other_client = redis.Redis.from_url(
        redis_server_url, socket_timeout=LONG_WAIT + 5, client_name=waking_broker.namespace
    )
    other = WakingRedisBroker(client=other_client, namespace=waking_broker.namespace)
    other.add_middleware(_WakesOnShutdown())
    other_ran = threading.Event()

    def note(word: str) -> None:
        taken.append(word)
        other_ran.set()

    dramatiq.actor(note, broker=other, actor_name="handed_probe", max_retries=0)
    try:
        with running_worker(waking_broker, threads=1) as stopping:
            waking_broker.get_actor("handed_probe").send("first")
            assert started.wait(10)
            waking_broker.get_actor("handed_probe").send("second")  # fetched, not started
            assert _until(lambda: stopping.work_queue.qsize() == 1)
            with running_worker(other):
                assert _until(lambda: _waiting_consumers(waking_broker) >= 3)  # the other's two
                stopper = threading.Thread(target=stopping.stop, daemon=True)
                stopper.start()
                assert _until(lambda: not stopping.workers[0].running)  # told while it works
                release.set()
                stopper.join(30)
                stopping.stop = lambda: None  # stopped: running_worker's own stop does nothing
                assert other_ran.wait(10), "the message handed back waited for a poll"
    finally:
        other_client.close()
    assert taken == ["second"]
