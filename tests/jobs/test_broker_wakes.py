"""The broker's idle consumers wait on Redis for a wake instead of polling (jobs/worker/broker.py):
a message sent wakes one at once, a worker stopping wakes them all and then wakes another
process's for what it handed back, and a wake list nobody reads stays short. The waits are made
long here (a minute), so a message that got through, or a worker that stopped, did so through a
wake and not through a wait running out."""

from __future__ import annotations

import threading

import dramatiq

from jobs.worker.broker import WAKES_KEPT
from tests.helpers.stack import running_worker
from tests.helpers.wakes import noting_actor, until, waking_broker_at


def _waiting_consumers(broker) -> int:
    """This broker's connections blocked in a BLPOP now (flag b), not ones whose last command
    was one; other tests' share the server."""
    clients = broker.client.client_list()
    return sum(
        1
        for c in clients
        if c.get("name") == broker.namespace and c.get("cmd") == "blpop" and "b" in c["flags"]
    )


def test_a_message_sent_wakes_a_waiting_consumer_and_runs(waking_broker):
    actor, calls, ran = noting_actor(waking_broker, "wake_probe")
    with running_worker(waking_broker):
        assert until(lambda: _waiting_consumers(waking_broker) >= 2)  # the queue and its DQ
        actor.send("now")
        assert ran.wait(10), "the message waited for a consumer's poll"
        ran.clear()
        assert until(lambda: _waiting_consumers(waking_broker) >= 2)  # waiting again
        actor.send_with_options(args=("later",), delay=200)
        assert ran.wait(10), "the delayed message waited for a consumer's poll"
    assert calls == ["now", "later"]


def test_a_stopping_worker_wakes_its_consumers_and_stops(waking_broker):
    noting_actor(waking_broker, "stop_probe")
    with running_worker(waking_broker) as worker:
        assert until(lambda: _waiting_consumers(waking_broker) >= 2)
        stopping = threading.Thread(target=worker.stop, daemon=True)
        stopping.start()
        stopping.join(15)
        worker.stop = lambda: None  # stopped (or stopping): running_worker's own stop waits not
        assert not stopping.is_alive(), "a consumer kept waiting through the shutdown"
    assert _waiting_consumers(waking_broker) == 0


def test_the_wake_list_stays_short_while_no_worker_reads_it(waking_broker):
    actor, _, _ = noting_actor(waking_broker, "unread_probe")
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
    other = waking_broker_at(redis_server_url, waking_broker.namespace)  # another process's
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
            assert until(lambda: stopping.work_queue.qsize() == 1)
            with running_worker(other):
                assert until(lambda: _waiting_consumers(waking_broker) >= 3)  # the other's two
                stopper = threading.Thread(target=stopping.stop, daemon=True)
                stopper.start()
                assert until(lambda: not stopping.workers[0].running)  # told while it works
                release.set()
                stopper.join(30)
                stopping.stop = lambda: None  # stopped: running_worker's own stop does nothing
                assert other_ran.wait(10), "the message handed back waited for a poll"
    finally:
        other.client.close()
    assert taken == ["second"]
