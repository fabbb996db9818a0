"""Enqueueing by actor name from async code: the web process, the core's hooks, the actors."""

from __future__ import annotations

import asyncio

import redis
from dramatiq import Broker

from bot.errors import BrokerError


def make_enqueue(broker: Broker):
    """An async ``enqueue(actor_name, *args, **kwargs)`` that never blocks the loop on Redis."""

    async def enqueue(actor_name: str, *args, **kwargs) -> None:
        actor = broker.get_actor(actor_name)
        try:
            await asyncio.to_thread(actor.send, *args, **kwargs)
        except redis.RedisError as exc:
            raise BrokerError(f"could not enqueue {actor_name}: Redis is unavailable") from exc

    return enqueue
