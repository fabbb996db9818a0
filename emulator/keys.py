"""Typed aiohttp application keys for the objects the emulator's handlers share.

Everything is stored before the app starts; objects that only exist while it runs
(the HTTP session, the delivery task) hang off :class:`Runtime`, so nothing writes to
the app mapping after aiohttp has frozen it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from emulator.state import EmulatorState


@dataclass
class Runtime:
    """Per-app objects with the app's lifetime."""

    closing: asyncio.Event = field(default_factory=asyncio.Event)
    session: aiohttp.ClientSession | None = None
    delivery_task: asyncio.Task[None] | None = None


STATE_KEY = web.AppKey("emulator_state", EmulatorState)
TOKEN_KEY = web.AppKey("emulator_bot_token", str)
CONTROL_KEY = web.AppKey("emulator_control_key", str)
RUNTIME_KEY = web.AppKey("emulator_runtime", Runtime)
