"""Cards through the real bot: the demo agent's read, write and irreversible step, taps,
codes, replies, /pending and /audit, driven through the emulator like a person would."""

from __future__ import annotations

import re

import pyotp

from bot.actions.call import ToolCall
from bot.config.secrets import SecretFiles
from handlers.interactions import NO_CARD_OWES_A_CODE
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


async def delivery_recorded(stack, telegram_message_id: int) -> bool:
    """Whether the delivery has recorded the Telegram id it sent: it does so just after the
    emulator shows the message, and a reply is matched to its card by that id."""
    from sqlalchemy import select

    from bot.store.tables import outbox

    async with stack.store.read() as conn:
        sent = (await conn.execute(select(outbox.c.telegram_message_ids))).scalars().all()
    return any(telegram_message_id in ids for ids in sent)


async def tap(stack, message: dict, label: str) -> dict:
    tapped = await stack.emulator.tap(OWNER_CHAT, message["message_id"], buttons(message)[label])
    return await eventually(lambda: stack.emulator.callback_answer(tapped["callback_query_id"]))


async def test_the_demo_reads_then_waits_for_a_tap_then_for_a_tap_and_a_code(stack):
    secret = pyotp.random_base32()
    SecretFiles(stack.settings.data_dir).put("totp", secret)
    posted = await stack.emulator.send_message("/demo")
    after = posted["message"]["message_id"]
    name = f"hello-{posted['update_id']}.txt"  # each run has a file (and cards) of its own
    read = await wait_for_text(stack, "Step 1/3", after=after)
    assert "ran: the server clock says" in read["text"]

    card = await wait_for_text(stack, "Approval needed", after=after)
    assert "demo.write_file" in card["text"] and f'"name": "{name}"' in card["text"]
    answer = await tap(stack, card, "Approve")
    assert "Approved" in answer["text"]
    written = await wait_for_text(stack, "ran: wrote", after=card["message_id"])
    assert written["text"].startswith("Step 2/3")
    assert (stack.settings.data_dir / "demo" / name).exists()

    edited = await wait_for_text(stack, "✅ Approved", after=after)
    assert edited["message_id"] == card["message_id"] and buttons(edited) == {}

    irreversible = await wait_for_text(stack, "demo.delete_file", after=card["message_id"])
    answer = await tap(stack, irreversible, "Approve + code")
    assert "code" in answer["text"]
    await wait_for_text(stack, "send the current 6-digit code", after=irreversible["message_id"])
    assert (stack.settings.data_dir / "demo" / name).exists()
    await stack.send(pyotp.TOTP(secret).now())
    deleted = await wait_for_text(stack, f"ran: deleted {name}", after=irreversible["message_id"])
    assert deleted["text"].startswith("Step 3/3")
    assert not (stack.settings.data_dir / "demo" / name).exists()
    await wait_for_text(stack, "The demo is over", after=after)

    [audit] = await stack.ask("/audit")
    for words in ("ran unasked", "asked you", "approved", "ran, approved", "code asked for"):
        assert f" · {words} · demo" in audit["text"]
    # who decided is "you", not a raw account id; times are the chat's, not ISO timestamps
    assert " · approved · demo · demo.write_file · by you\ncard #" in audit["text"]
    assert not re.search(r"\d{4}-\d\d-\d\dT", audit["text"])
    assert str(OWNER_CHAT) not in audit["text"]


async def gated_write(stack, text: str = "hi", **continuation):
    """Ask the call path for the demo agent's write, as a worker would: it leaves a card."""
    from bot.actions.call import Continuation

    await stack.send("/start")  # Telegram knows a chat only once the user has written in it
    return await stack.services.platform.actions.perform(
        ToolCall("demo", "demo.write_file", {"name": "note.txt", "text": text}, OWNER_CHAT),
        continuation=Continuation("demo_step", continuation) if continuation else None,
    )


async def test_a_second_tap_gets_an_honest_answer_and_changes_nothing(stack):
    outcome = await gated_write(stack)
    card = await wait_for_text(stack, f"card #{outcome.interaction_id}")
    first = await tap(stack, card, "Approve")
    assert first["text"].startswith("✅ Approved by") and not first["show_alert"]
    again = await tap(stack, card, "Deny")
    assert again["text"].startswith("Already settled: ✅ Approved by")
    assert again["show_alert"]
    rows = await stack.services.platform.audit.latest(50)
    assert [entry.event for entry in rows].count("granted") == 1
    assert "declined" not in [entry.event for entry in rows]


async def test_tampered_callback_data_is_refused_and_recorded(stack):
    outcome = await gated_write(stack)
    card = await wait_for_text(stack, f"card #{outcome.interaction_id}")
    data = buttons(card)["Deny"].replace(":deny:", ":approve:")
    tapped = await stack.emulator.tap(OWNER_CHAT, card["message_id"], data)
    answer = await eventually(lambda: stack.emulator.callback_answer(tapped["callback_query_id"]))
    assert "not one of mine" in answer["text"]
    interaction = await stack.services.platform.interactions.get(outcome.interaction_id)
    assert interaction.status == "pending"
    [refusal] = await stack.services.platform.audit.latest(1)
    assert refusal.event == "tap_refused"


async def test_a_tap_from_someone_who_is_not_an_owner_changes_nothing(stack):
    outcome = await gated_write(stack)
    card = await wait_for_text(stack, f"card #{outcome.interaction_id}")
    stranger = {"id": 777, "is_bot": False, "first_name": "Eve"}
    await stack.emulator.tap(OWNER_CHAT, card["message_id"], buttons(card)["Approve"], stranger)

    async def refusal_recorded():
        return [e for e in await stack.services.platform.audit.latest(5) if e.user_id == 777]

    [refusal] = await eventually(refusal_recorded)
    assert refusal.event == "tap_refused"
    interaction = await stack.services.platform.interactions.get(outcome.interaction_id)
    assert interaction.status == "pending"


async def test_pending_resends_open_cards_and_a_tap_there_settles_every_copy(stack):
    outcome = await gated_write(stack)
    original = await wait_for_text(stack, f"card #{outcome.interaction_id}")
    sent = await stack.send("/pending")
    await wait_for_text(stack, "1 card(s) waiting for you", after=sent["message_id"])
    copy = await wait_for_text(stack, f"card #{outcome.interaction_id}", after=sent["message_id"])
    assert copy["message_id"] != original["message_id"]
    await tap(stack, copy, "Deny")

    async def both_settled():
        messages = {m["message_id"]: m for m in await stack.bot_messages()}
        texts = [messages[m["message_id"]]["text"] for m in (original, copy)]
        return all(text.startswith("❌ Denied") for text in texts)

    await eventually(both_settled)
    late = await tap(stack, original, "Approve")
    assert late["text"].startswith("Already settled: ❌ Denied")
    [nothing] = await stack.ask("/pending")
    assert nothing["text"] == "Nothing is waiting for you."


async def test_a_reply_to_a_card_is_kept_as_a_note_for_the_agent(stack):
    outcome = await gated_write(stack)
    card = await wait_for_text(stack, f"card #{outcome.interaction_id}")
    await eventually(lambda: delivery_recorded(stack, card["message_id"]))
    [receipt] = await stack.ask("use notes/ next time", reply_to_message_id=card["message_id"])
    assert receipt["text"] == "Noted for demo: its later runs will see this."
    notes = await stack.services.platform.interactions.notes_for("demo")
    assert notes == ["use notes/ next time"]


async def test_a_tap_after_expiry_says_so_and_the_continuation_hears_no(stack):
    from sqlalchemy import update

    from bot.store.tables import interactions
    from bot.timeutil import now

    outcome = await gated_write(stack, chat_id=OWNER_CHAT, run="t", step=1)
    card = await wait_for_text(stack, f"card #{outcome.interaction_id}")
    async with stack.store.write() as conn:
        await conn.execute(
            update(interactions)
            .where(interactions.c.id == outcome.interaction_id)
            .values(expires_at=now())
        )
    answer = await tap(stack, card, "Approve")
    assert answer["text"].startswith("Already settled: ⌛ Expired at")
    assert "nothing was done" in answer["text"]
    interaction = await stack.services.platform.interactions.get(outcome.interaction_id)
    assert interaction.status == "expired"
    # The continuation (the demo agent's step) was sent, and heard no.
    await wait_for_text(stack, f"card #{outcome.interaction_id} was expired, so nothing was done")
    again = await gated_write(stack)
    assert again.status == "gated" and again.interaction_id != outcome.interaction_id


async def test_arguments_too_long_for_a_message_arrive_as_a_file_under_the_card(stack):
    outcome = await gated_write(stack, "x" * 6000)
    card = await wait_for_text(stack, f"card #{outcome.interaction_id}")
    assert card["document"] and "attached file" in card["caption"]
    content = (await stack.emulator.file_content(card["document"]["file_id"])).decode()
    assert '"text": "' + "x" * 6000 + '"' in content
    answer = await tap(stack, card, "Approve")
    assert answer["text"].startswith("✅ Approved")

    async def caption_settled():
        messages = {m["message_id"]: m for m in await stack.bot_messages()}
        return messages[card["message_id"]]["caption"].startswith("✅ Approved")

    await eventually(caption_settled)


async def test_a_code_from_an_account_that_did_not_tap_approves_nothing(stack):
    secret = pyotp.random_base32()
    SecretFiles(stack.settings.data_dir).put("totp", secret)
    await stack.send("/start")
    outcome = await stack.services.platform.actions.perform(
        ToolCall("demo", "demo.delete_file", {"name": "x.txt"}, OWNER_CHAT)
    )
    card = await wait_for_text(stack, f"card #{outcome.interaction_id}")
    await tap(stack, card, "Approve + code")
    await wait_for_text(stack, "send the current 6-digit code", after=card["message_id"])
    other = {"id": 2000002, "is_bot": False, "first_name": "Other"}
    # The other account is an owner too, as if listed in AEGIS_OWNER_IDS.
    stack.services.owners.configured = frozenset({*stack.services.owners.configured, 2000002})
    await stack.emulator.send_message(pyotp.TOTP(secret).now(), user=other, chat_id=2000002)
    await eventually(lambda: stack.emulator.messages(2000002))
    interaction = await stack.services.platform.interactions.get(outcome.interaction_id)
    assert interaction.status == "awaiting_code"
    [wrong] = await stack.ask("000000")
    assert "not valid" in wrong["text"] and "still waiting" in wrong["text"]
    [granted] = await stack.ask(pyotp.TOTP(secret).now())
    assert granted["text"].startswith("✅ Approved")
    [replayed] = await stack.ask(pyotp.TOTP(secret).now())
    # No card owes a code any more; a code is still never captured as a task.
    assert replayed["text"] == NO_CARD_OWES_A_CODE
