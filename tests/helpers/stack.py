"""A running aegis for tests: the real web app (PTB, gate, intake, emulator) on a real port, a
real Dramatiq worker on a real Redis, and the emulator's control API to play the user."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from aegis.botapi.endpoint import EMULATOR_PREFIX, emulator_key
from aegis.clock import run_clock
from aegis.web import WEB, create_web_app
from bot.config.live import LiveConfig
from bot.config.settings import Settings
from bot.store import migrate
from bot.store.database import Store
from emulator import DEFAULT_USER, EmulatorState
from emulator.client import EmulatorClient
from jobs import load_actors
from jobs.worker.enqueue import make_enqueue
from jobs.worker.threads import Worker
from tests.helpers.ports import free_port

OWNER_CHAT = DEFAULT_USER["id"]


def make_settings(data_dir: Path, database_url: str, redis_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "config_file": data_dir / "aegis.yaml",
        "database_url": database_url,
        "redis_url": redis_url,
        "port": free_port(),
        "mcp_port": free_port(),
        "outbox_per_chat_per_second": 1000,
        "outbox_global_per_second": 1000,
        "update_retry_seconds": 0.5,
        "worker_threads": 2,
        "_env_file": None,
    }
    values.update(overrides)
    return Settings(**values)


@dataclass
class Stack:
    settings: Settings
    store: Store
    emulator: EmulatorClient
    app: web.Application
    broker: Any

    @property
    def services(self):
        return self.app[WEB].services

    @property
    def intake(self):
        return self.app[WEB].intake

    async def send(self, text: str, **options: Any) -> dict[str, Any]:
        """Send as the owner (or ``user=``); returns the emulator's message."""
        return (await self.emulator.send_message(text, **options))["message"]

    async def ask(
        self, text: str, *, count: int = 1, timeout: float = 10.0, **options: Any
    ) -> list[dict[str, Any]]:
        """Send a message and return the first ``count`` bot messages that follow it."""
        sent = await self.send(text, **options)
        chat_id = sent["chat"]["id"]
        replies = await self.emulator.wait_for_bot_messages(
            chat_id, count, after=sent["message_id"], timeout=timeout
        )
        return replies[:count]

    async def bot_messages(self, chat_id: int = OWNER_CHAT, after: int = 0) -> list[dict]:
        return [m for m in await self.emulator.messages(chat_id, after) if m["from_bot"]]


@contextlib.asynccontextmanager
async def running_web(
    settings: Settings, broker, *, emulator_state: EmulatorState | None = None
) -> AsyncIterator[web.Application]:
    app = create_web_app(settings, broker, "test Redis", emulator_state=emulator_state)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.port).start()
    try:
        await asyncio.wait_for(app[WEB].ready.wait(), timeout=15)
        yield app
    finally:
        await runner.cleanup()


@contextlib.contextmanager
def running_worker(broker, threads: int = 2):
    worker = Worker(broker, worker_threads=threads, worker_timeout=50)  # aegis's, as it runs
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


@contextlib.asynccontextmanager
async def running_stack(
    settings: Settings,
    *,
    namespace: str,
    worker: bool = True,
    emulator_state: EmulatorState | None = None,
) -> AsyncIterator[Stack]:
    broker = load_actors(settings, settings.redis_url, namespace=namespace)
    store = Store(settings.effective_database_url)
    await migrate.upgrade(store)
    emulator = EmulatorClient(settings.web_url + EMULATOR_PREFIX, emulator_key(settings))
    try:
        async with running_web(settings, broker, emulator_state=emulator_state) as app:
            running = running_worker(broker) if worker else contextlib.nullcontext()
            running.__enter__()
            try:
                yield Stack(settings, store, emulator, app, broker)
            finally:
                # Off the loop: a worker finishing a request to the emulator needs this loop.
                await asyncio.to_thread(running.__exit__, None, None, None)
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def running_clock(stack):
    """The real clock over the stack's store and broker: schedules, monitors' slots, process
    watches' looks, and aegis.yaml followed as it changes."""
    stop = asyncio.Event()
    platform = stack.services.platform
    config = LiveConfig(stack.settings.config_file, look_every=0.1)
    enqueue = make_enqueue(stack.broker)
    task = asyncio.create_task(run_clock(stack.store, enqueue, stop, config, platform.monitors))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


async def eventually(check, *, timeout: float = 10.0, every: float = 0.05):
    """Poll ``check`` (sync or async) until it returns something truthy; return that."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(every)
