"""aegis's worker threads wait for work without polling, and a stop wakes them (jobs/worker/
threads.py). Their wait is made an hour here, so a thread that took a message, or that stopped,
did so through the queue and not through a wait running out."""

from __future__ import annotations

import threading
from queue import Empty

import dramatiq
import pytest
from dramatiq.worker import _WorkQueueItem

from jobs.worker import threads
from jobs.worker.threads import Worker, _WorkQueue
from tests.helpers.wakes import noting_actor, until

AN_HOUR = 3600.0


@pytest.fixture(autouse=True)
def _waits_an_hour(monkeypatch):
    monkeypatch.setattr(threads, "IDLE_WAIT_SECONDS", AN_HOUR)


def test_an_idle_worker_runs_what_is_sent_and_stops_at_once(waking_broker):
    actor, calls, ran = noting_actor(waking_broker, "thread_probe")
    worker = Worker(waking_broker, worker_threads=3, worker_timeout=50)
    worker.start()
    try:
        assert all(thread.timeout == AN_HOUR for thread in worker.workers)
        for word in ("one", "two"):
            ran.clear()
            actor.send(word)
            assert ran.wait(10), "a message waited for a worker thread's wait to run out"
    finally:
        stopping = threading.Thread(target=worker.stop, kwargs={"timeout": 30_000}, daemon=True)
        stopping.start()
        stopping.join(40)
    assert calls == ["one", "two"]
    assert not stopping.is_alive()
    assert not [thread for thread in worker.workers if thread.is_alive()], (
        "a worker thread kept waiting through the stop"
    )


def test_a_stop_waits_for_the_job_running_and_the_thread_takes_nothing_more(waking_broker):
    release = threading.Event()
    started, calls = threading.Event(), []

    def slow(word: str) -> None:
        calls.append(word)
        started.set()
        release.wait(30)

    actor = dramatiq.actor(slow, broker=waking_broker, actor_name="slow_probe", max_retries=0)
    worker = Worker(waking_broker, worker_threads=1, worker_timeout=50)
    worker.start()
    stopping = threading.Thread(target=worker.stop, kwargs={"timeout": 30_000}, daemon=True)
    try:
        actor.send("first")
        assert started.wait(10)
        actor.send("second")  # taken from Redis into the worker's queue while the first runs
        assert until(lambda: worker.work_queue.qsize() == 1)
        stopping.start()
        assert until(lambda: not worker.workers[0].running)  # told to stop while it works
    finally:
        release.set()
        if stopping.ident is None:
            worker.stop(timeout=30_000)  # a step above failed before the stop began
    stopping.join(40)
    assert not stopping.is_alive() and not worker.workers[0].is_alive()
    assert calls == ["first"]  # the second went back to Redis, for the next worker
    queue = f"{waking_broker.namespace}:default"
    assert waking_broker.client.llen(queue) == 1


def test_a_wake_comes_before_any_message_and_is_passed_over_when_the_queue_is_emptied():
    queue = _WorkQueue(threads=1)
    queue.put(_WorkQueueItem(0, "message"))
    queue.wake()
    with pytest.raises(Empty):  # a thread waiting for work: woken, and takes nothing
        queue.get(timeout=AN_HOUR)
    assert queue.get(timeout=AN_HOUR).message == "message"
    queue.put(_WorkQueueItem(5, "later"))
    queue.wake()
    queue.put(_WorkQueueItem(1, "sooner"))
    # Emptied without waiting (Dramatiq's requeue at stop): every message, no wake.
    emptied = []
    with pytest.raises(Empty):
        while True:
            emptied.append(queue.get_nowait().message)
    assert emptied == ["sooner", "later"]
    assert queue.unfinished_tasks == 3  # the wakes counted done; the messages are the takers'


def test_a_wake_taken_by_a_thread_not_yet_stopping_leaves_one_for_each_other_thread():
    """Dramatiq tells its threads to stop one by one: one not yet told may take a wake first."""
    queue = _WorkQueue(threads=3)
    queue.wake()  # the first thread is told to stop
    with pytest.raises(Empty):
        queue.get(timeout=AN_HOUR)  # taken by another thread, which waits again
    assert queue.qsize() == 2  # the first thread, and the third, each still find one
    for _ in range(2):
        with pytest.raises(Empty):
            queue.get(timeout=AN_HOUR)
