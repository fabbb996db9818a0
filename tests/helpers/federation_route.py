"""The federation route served on a real port over a real store (SQLite) and a real Redis,
with one link on which ``laptop`` calls ``vps``, its secret the cases' own."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict
from sqlalchemy import update

from bot.config.secrets import SecretFiles
from bot.store import migrate
from bot.store.database import Store
from bot.store.tables import peers as peer_rows
from federation import server
from federation.links import Peers
from tests.helpers.signature_cases import (
    CALLEE,
    CALLER,
    OFFERED,
    OLD_SECRET,
    SECRET,
    Sent,
    World,
)


@dataclass
class Route:
    server: TestServer
    session: aiohttp.ClientSession
    peers: Peers
    federation: server.Federation

    async def send(self, sent: Sent) -> tuple[int, dict]:
        url = self.server.make_url(sent.path_qs)
        async with self.session.request(
            sent.method, url, data=sent.body, headers=CIMultiDict(sent.headers)
        ) as response:
            try:
                answer = await response.json(content_type=None)
            except ValueError:
                answer = {}
            return response.status, answer if isinstance(answer, dict) else {}

    async def use(self, world: World) -> None:
        """The link's secrets as ``world`` has them (the old one only with an overlap)."""
        files = self.peers.files
        files.put(f"peer-in-{CALLER}", SECRET.hex())
        files.path(f"peer-in-{CALLER}.previous").unlink(missing_ok=True)
        until = offer_until = None
        if world.old_until is not None:
            files.put(f"peer-in-{CALLER}.previous", OLD_SECRET.hex())
            until = datetime.fromtimestamp(world.old_until, UTC)
        files.path(f"peer-in-{CALLER}.offered").unlink(missing_ok=True)
        if world.offer_until is not None:
            files.put(f"peer-in-{CALLER}.offered", OFFERED.hex())
            offer_until = datetime.fromtimestamp(world.offer_until, UTC)
        async with self.peers.store.write() as conn:
            await conn.execute(
                update(peer_rows).values(previous_until=until, expires_at=offer_until)
            )
        self.federation.forget_links()


@contextlib.asynccontextmanager
async def federation_route(data_dir: Path, redis_url: str, namespace: str) -> AsyncIterator[Route]:
    store = Store(f"sqlite+aiosqlite:///{data_dir / 'aegis.sqlite3'}")
    await migrate.upgrade(store)
    peers = Peers(store, SecretFiles(data_dir))
    await peers.invite(CALLER, us=CALLEE, url="http://127.0.0.1:1")
    await peers.claim(CALLER, b"\x00" * 32)  # claimed; ``Route.use`` sets its secret

    async def status() -> dict:
        return {"instance": CALLEE, "ok": True}

    app = web.Application()
    served = server.mount(app)
    client = redis.asyncio.Redis.from_url(redis_url)
    async with server.serving(peers, client, namespace, status) as federation:
        served.federation = federation
        test_server = TestServer(app)
        await test_server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                yield Route(test_server, session, peers, federation)
        finally:
            await test_server.close()
            await store.close()


def start_of_a_second() -> int:
    """Now, early in a second: a case's timestamps at the window's edge (300 s) must still be
    at the edge when the server reads its clock."""
    while time.time() % 1 > 0.3:
        time.sleep(0.05)
    return int(time.time())
