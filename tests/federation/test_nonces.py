"""The nonce store (federation/nonces.py) on a real Redis: claims made at once go together and
each nonce is new once; a Redis that cannot be reached is an error the route turns into a 503,
never a pass."""

from __future__ import annotations

import asyncio

import redis.asyncio

from bot.errors import FederationError
from federation.nonces import RedisNonces
from tests.helpers.stack import free_port


async def test_claims_at_once_each_nonce_new_once_and_its_ttl_kept(nonces, redis_namespace):
    claims = [nonces.claim("laptop", f"{n % 50:032x}", 600) for n in range(200)]
    claims.append(nonces.claim("laptop", "f" * 32, 30))
    results = await asyncio.gather(*claims)
    assert sum(results[:200]) == 50 and results[200] is True
    assert results[:50] == [True] * 50 and not any(results[50:200])
    prefix = f"{redis_namespace}:federation:nonce:laptop:"
    assert 590 < await nonces.client.ttl(prefix + "0" * 32) <= 600
    assert 0 < await nonces.client.ttl(prefix + "f" * 32) <= 30
    assert await nonces.claim("desktop", "0" * 32, 600)  # another peer's nonces are apart


async def test_an_unreachable_redis_is_an_error_for_every_claim_waiting():
    client = redis.asyncio.Redis(port=free_port(), socket_connect_timeout=0.5)
    nonces = RedisNonces(client, "nowhere")
    try:
        results = await asyncio.gather(
            *(nonces.claim("laptop", f"{n:032x}", 600) for n in range(5)),
            return_exceptions=True,
        )
    finally:
        await client.aclose()
    assert all(isinstance(result, FederationError) for result in results), results
    assert "unavailable" in str(results[0])
