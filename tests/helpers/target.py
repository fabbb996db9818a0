"""A site for monitors to watch whose health the test decides: ``/health`` answers 200 "all
good" or 503, and holds each answer open ``stall`` seconds while ``state["stall"]`` is set."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from tests.helpers.stack import free_port


@contextlib.asynccontextmanager
async def health_target(*, healthy: bool = True, stall: float = 4.0) -> AsyncIterator[dict]:
    state = {"healthy": healthy, "stall": False, "hits": 0, "in_flight": 0}

    async def health(request: web.Request) -> web.Response:
        state["hits"] += 1
        if state["stall"]:
            state["in_flight"] += 1
            try:
                await asyncio.sleep(stall)
            finally:
                state["in_flight"] -= 1
        if state["healthy"]:
            return web.Response(text="all good")
        return web.Response(status=503, text="down for maintenance")

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    state["url"] = f"http://127.0.0.1:{port}/health"
    try:
        yield state
    finally:
        await runner.cleanup()
