"""What the task handler tests (tests/handlers/test_task_*_handlers.py) do in the owner's chat:
say something and read the bot's one reply, tap a button and read its answer (and the message
it sends, or the one it edits), read a message's buttons and the tasks the database holds."""

from __future__ import annotations

from typing import Any

from bot.store.tables import tasks
from tests.helpers.stack import OWNER_CHAT, eventually
from tests.helpers.transport import all_rows


def buttons(message: dict) -> dict[str, str]:
    rows = (message.get("reply_markup") or {}).get("inline_keyboard", [])
    return {button["text"]: button["callback_data"] for row in rows for button in row}


async def newest_id(stack) -> int:
    messages = await stack.emulator.messages(OWNER_CHAT)
    return messages[-1]["message_id"] if messages else 0


async def say(stack, text: str | None = None, **options: Any) -> tuple[dict, dict]:
    """Send as the owner; the message as the emulator holds it and the bot's one reply."""
    sent = await stack.send(text, **options)
    [answer] = await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1, after=sent["message_id"])
    return sent, answer


async def tap(stack, message: dict, label: str) -> dict:
    """Tap the button ``label`` on ``message``; the bot's answer to the tap."""
    data = buttons(message)[label]
    tapped = await stack.emulator.tap(OWNER_CHAT, message["message_id"], data)
    return await eventually(lambda: stack.emulator.callback_answer(tapped["callback_query_id"]))


async def tap_for_reply(stack, message: dict, label: str) -> tuple[dict, dict]:
    """Tap a button that answers with a message too; the tap's answer and that message."""
    before = await newest_id(stack)
    answer = await tap(stack, message, label)
    [said] = await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1, after=before)
    return answer, said


async def tap_for_edit(stack, message: dict, label: str) -> tuple[dict, dict]:
    """Tap a button that edits its own message; the tap's answer and the message as edited."""
    before = (message["text"], message.get("reply_markup"))
    answer = await tap(stack, message, label)

    async def edited():
        for held in await stack.emulator.messages(OWNER_CHAT):
            same = held["message_id"] == message["message_id"]
            if same and (held["text"], held.get("reply_markup")) != before:
                return held
        return None

    return answer, await eventually(edited)


async def task_rows(stack) -> list:
    return await all_rows(stack.store, tasks)
