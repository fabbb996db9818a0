"""The federation tests' nonce store: RedisNonces over the tests' Redis, in a namespace of its
own per test."""

from __future__ import annotations

import pytest
import redis.asyncio

from federation.nonces import RedisNonces


@pytest.fixture
async def nonces(redis_server_url: str, redis_namespace: str):
    client = redis.asyncio.Redis.from_url(redis_server_url)
    try:
        yield RedisNonces(client, redis_namespace)
    finally:
        await client.aclose()
