"""The federation tests' nonce store (RedisNonces over the tests' Redis, in a namespace of its
own per test) and laptop, the bare asking side."""

from __future__ import annotations

import aiohttp
import pytest
import redis.asyncio

from bot.config.secrets import SecretFiles
from bot.store import migrate
from bot.store.database import Store
from federation.client import PeerClient
from federation.links import Peers
from federation.nonces import RedisNonces


@pytest.fixture
async def nonces(redis_server_url: str, redis_namespace: str):
    client = redis.asyncio.Redis.from_url(redis_server_url)
    try:
        yield RedisNonces(client, redis_namespace)
    finally:
        await client.aclose()


@pytest.fixture
async def laptop(tmp_path):
    """laptop, bare: its own store and links, and the client that asks its peers."""
    (tmp_path / "laptop").mkdir()
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'laptop' / 'aegis.sqlite3'}")
    await migrate.upgrade(store)
    peers = Peers(store, SecretFiles(tmp_path / "laptop"))
    try:
        async with aiohttp.ClientSession() as session:
            yield peers, PeerClient(peers, session, tries=2, timeout=5)
    finally:
        await store.close()
