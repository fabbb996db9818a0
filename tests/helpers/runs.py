"""What the tests of agent runs do over and over: read a chat, tap a card's button, wait for a
run to reach a state, count how often a tool really ran."""

from __future__ import annotations

import re

from sqlalchemy import func, select

from bot.agents.agent_run import RunState
from bot.store.tables import agent_runs, audit_events
from tests.helpers.stack import OWNER_CHAT, eventually


def buttons(message: dict) -> dict[str, str]:
    """A message's inline buttons, text → callback data."""
    rows = (message.get("reply_markup") or {}).get("inline_keyboard", [])
    return {button["text"]: button["callback_data"] for row in rows for button in row}


async def message_with(stack, pattern: str, *, after: int = 0, timeout: float = 15) -> dict:
    """The first bot message (id > ``after``) whose text matches ``pattern``, once there is one."""

    async def found():
        for message in await stack.bot_messages(after=after):
            if re.search(pattern, message["text"] or ""):
                return message
        return None

    return await eventually(found, timeout=timeout)


async def tap(stack, message: dict, label: str) -> str:
    """Tap the button ``label`` as the owner; the text the bot answered the tap with."""
    tapped = await stack.emulator.tap(OWNER_CHAT, message["message_id"], buttons(message)[label])
    answer = await eventually(lambda: stack.emulator.callback_answer(tapped["callback_query_id"]))
    return answer.get("text") or ""


async def start(stack, text: str) -> tuple[int, dict]:
    """Send a /run command; the run's number and its progress message."""
    sent = await stack.send(text)
    progress = await message_with(stack, r"^Run #\d+ · ", after=sent["message_id"])
    return int(re.match(r"Run #(\d+)", progress["text"]).group(1)), progress


async def run_in(stack, run_id: int, *states: RunState, timeout: float = 20) -> dict:
    """The run's row, once it is in one of ``states``."""

    async def reached():
        async with stack.store.read() as conn:
            row = (await conn.execute(select(agent_runs).where(agent_runs.c.id == run_id))).one()
        return row._mapping if row.status in states else None

    return dict(await eventually(reached, timeout=timeout))


async def tool_runs(stack, tool: str) -> int:
    """How often ``tool`` ran: an allowed call, or a call that used its grant."""
    async with stack.store.read() as conn:
        query = select(func.count()).where(
            audit_events.c.tool == tool, audit_events.c.event.in_(("allowed", "used"))
        )
        return (await conn.execute(query)).scalar_one()
