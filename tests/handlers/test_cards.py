"""Cards through the real bot: the demo agent's read, write and irreversible step, taps,
codes, replies, /pending and /audit, driven through the emulator like a person would."""

from __future__ import annotations

import pyotp

from bot.secrets import SecretFiles
from tests.helpers.stack import OWNER_CHAT, eventually


def buttons(message: dict) -> dict[str, str]:
    rows = (message.get("reply_markup") or {}).get("inline_keyboard", [])
    return {button["text"]: button["callback_data"] for row in rows for button in row}


async def wait_for_text(stack, fragment: str, *, after: int = 0, timeout: float = 15.0) -> dict:
    async def find():
        for message in await stack.bot_messages(OWNER_CHAT, after):
            if fragment in (message.get("text") or message.get("caption") or ""):
                return message
        return None

    return await eventually(find, timeout=timeout)


async def tap(stack, message: dict, label: str) -> dict:
    tapped = await stack.emulator.tap(OWNER_CHAT, message["message_id"], buttons(message)[label])
    return await eventually(lambda: stack.emulator.callback_answer(tapped["callback_query_id"]))


async def test_the_demo_reads_then_waits_for_a_tap_then_for_a_tap_and_a_code(stack):
    secret = pyotp.random_base32()
    SecretFiles(stack.settings.data_dir).put("totp", secret)
    sent = await stack.send("/demo")
    after = sent["message_id"]
    read = await wait_for_text(stack, "Step 1/3", after=after)
    assert "ran: the server clock says" in read["text"]

    card = await wait_for_text(stack, "Approval needed", after=after)
    assert "demo.write_file" in card["text"] and '"name": "hello.txt"' in card["text"]
    answer = await tap(stack, card, "Approve")
    assert "Approved" in answer["text"]
    written = await wait_for_text(stack, "ran: wrote", after=card["message_id"])
    assert written["text"].startswith("Step 2/3")
    assert (stack.settings.data_dir / "demo" / "hello.txt").exists()

    edited = await wait_for_text(stack, "✅ Approved", after=after)
    assert edited["message_id"] == card["message_id"] and buttons(edited) == {}

    irreversible = await wait_for_text(stack, "demo.delete_file", after=card["message_id"])
    answer = await tap(stack, irreversible, "Approve (then a code)")
    assert "code" in answer["text"]
    await wait_for_text(stack, "send the current 6-digit code", after=irreversible["message_id"])
    assert (stack.settings.data_dir / "demo" / "hello.txt").exists()
    await stack.send(pyotp.TOTP(secret).now())
    deleted = await wait_for_text(stack, "ran: deleted hello.txt", after=irreversible["message_id"])
    assert deleted["text"].startswith("Step 3/3")
    assert not (stack.settings.data_dir / "demo" / "hello.txt").exists()
    await wait_for_text(stack, "The demo is over", after=after)

    [audit] = await stack.ask("/audit")
    for event in ("allowed", "gated", "granted", "used", "code_asked"):
        assert f" {event} demo" in audit["text"]
