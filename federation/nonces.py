"""Nonces of peers' requests, kept in Redis for twice the clock window.

``SET key 1 NX EX ttl`` stores a nonce and tells whether it was new in one atomic step, so two
copies of one request racing on two web processes cannot both pass. A nonce outlives every
timestamp that could still carry it; after that the clock check refuses the request first.
"""

from __future__ import annotations

import redis.asyncio

from bot.errors import FederationError


class RedisNonces:
    def __init__(self, client: redis.asyncio.Redis, namespace: str) -> None:
        self.client = client
        self.prefix = f"{namespace}:federation:nonce:"

    async def claim(self, peer: str, nonce: str, ttl: int) -> bool:
        try:
            stored = await self.client.set(f"{self.prefix}{peer}:{nonce}", b"1", nx=True, ex=ttl)
        except redis.RedisError as exc:
            raise FederationError(f"the nonce store is unavailable ({type(exc).__name__})") from exc
        return bool(stored)
