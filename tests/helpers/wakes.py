"""A broker whose idle consumers wait a minute for a wake (jobs/worker/broker.py), and what
the tests of its wakes and of the worker's threads read it with."""

from __future__ import annotations

import threading

import dramatiq
import redis

from jobs.worker.broker import WakingRedisBroker, _WakesOnShutdown

LONG_WAIT = 60  # seconds: far past how long each test waits for what it expects


def waking_broker_at(url: str, namespace: str) -> WakingRedisBroker:
    """A waking broker whose client waits past LONG_WAIT (set IDLE_WAIT_SECONDS to it too)."""
    client = redis.Redis.from_url(url, socket_timeout=LONG_WAIT + 5, client_name=namespace)
    broker = WakingRedisBroker(client=client, namespace=namespace)
    broker.add_middleware(_WakesOnShutdown())
    return broker


def noting_actor(broker, name: str):
    """An actor that notes each call and sets ``ran`` each time."""
    calls: list[str] = []
    ran = threading.Event()

    def note(word: str) -> None:
        calls.append(word)
        ran.set()

    return dramatiq.actor(note, broker=broker, actor_name=name, max_retries=0), calls, ran


def until(check, seconds: float = 10.0) -> bool:
    stop = threading.Event()
    for _ in range(int(seconds / 0.02)):
        if check():
            return True
        stop.wait(0.02)
    return False
