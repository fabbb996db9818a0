"""Fixtures running the emulator on a real TCP port, driven by the real PTB Bot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import telegram
from aiohttp import web

from emulator import EmulatorState, create_emulator_app
from emulator.client import EmulatorClient

TOKEN = "123456789:AAHemulatorTestTokenAbcdefghijklmnop"
CONTROL_KEY = "test-control-key"


@dataclass
class RunningEmulator:
    """A started emulator: its URLs, its state, and the two ways to drive it."""

    url: str
    state: EmulatorState
    client: EmulatorClient

    @property
    def bot_base_url(self) -> str:
        return f"{self.url}/bot"

    def make_bot(self, token: str = TOKEN) -> telegram.Bot:
        return telegram.Bot(token, base_url=self.bot_base_url, base_file_url=f"{self.url}/file/bot")


async def start_site(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on an ephemeral localhost port; returns the runner and base URL."""
    runner = web.AppRunner(app, shutdown_timeout=2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


@pytest.fixture
async def emulator() -> AsyncIterator[RunningEmulator]:
    state = EmulatorState()
    runner, url = await start_site(create_emulator_app(state, token=TOKEN, control_key=CONTROL_KEY))
    try:
        yield RunningEmulator(url=url, state=state, client=EmulatorClient(url, CONTROL_KEY))
    finally:
        await runner.cleanup()


@pytest.fixture
async def bot(emulator: RunningEmulator) -> AsyncIterator[telegram.Bot]:
    async with emulator.make_bot() as ptb_bot:
        yield ptb_bot


@pytest.fixture
async def page() -> AsyncIterator:
    """A phone-sized page of Chromium (tests/helpers/chat_page.py)."""
    from tests.helpers.chat_page import phone_page

    async with phone_page() as opened:
        yield opened


@pytest.fixture
async def aegis(tmp_path, redis_server_url: str, redis_namespace: str) -> AsyncIterator:
    """The whole of aegis on SQLite with its built-in emulator, for the chat page to talk to."""
    from tests.helpers.stack import make_settings, running_stack

    database = f"sqlite+aiosqlite:///{tmp_path / 'aegis.sqlite3'}"
    settings = make_settings(tmp_path / "data", database, redis_server_url)
    async with running_stack(settings, namespace=redis_namespace) as stack:
        yield stack
