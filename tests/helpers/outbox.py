"""Helpers for delivery tests: a running stack whose emulated chats exist before any message,
and waits on outbox rows and runs."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from emulator import DEFAULT_USER, EmulatorState
from tests.helpers.stack import OWNER_CHAT, Stack, eventually, make_settings, running_stack

OTHER_USER = {"id": 424_242, "first_name": "Other", "username": "other_person"}
OTHER_CHAT = OTHER_USER["id"]
SETTLED = ("sent", "failed")


@contextlib.asynccontextmanager
async def delivery_stack(
    data_dir: Path, database_url: str, redis_url: str, namespace: str, **overrides: Any
) -> AsyncIterator[Stack]:
    """A stack where the owner's and another user's private chats already exist.

    On Telegram the bot can only write to someone who wrote first; the emulator holds it to
    that, so the chats are opened here without a message (and without a reply from the bot).
    """
    state = EmulatorState()
    state.private_chat(DEFAULT_USER)
    state.private_chat(OTHER_USER)
    settings = make_settings(data_dir, database_url, redis_url, **overrides)
    async with running_stack(settings, namespace=namespace, emulator_state=state) as stack:
        yield stack


async def settled_row(stack: Stack, outbox_id: int, *, timeout: float = 10.0) -> dict[str, Any]:
    """The outbox row once it is sent or failed."""

    async def check():
        row = await stack.services.platform.outbox.get(outbox_id)
        return row if row and row["status"] in SETTLED else None

    return await eventually(check, timeout=timeout)


async def delivery_runs(stack: Stack) -> list:
    return [
        run for run in await stack.services.platform.job_runs.latest(500) if run.job == "deliver"
    ]


async def bot_texts(stack: Stack, chat_id: int = OWNER_CHAT) -> list[str | None]:
    return [message["text"] for message in await stack.bot_messages(chat_id)]
