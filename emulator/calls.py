"""The context object every Bot API method implementation receives."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from emulator.models import BotState
from emulator.params import Params
from emulator.state import EmulatorState


@dataclass
class Call:
    """One Bot API call: who is calling, with what, on which emulator."""

    state: EmulatorState
    bot: BotState
    params: Params
    closing: asyncio.Event


Method = Callable[[Call], Awaitable[Any]]
