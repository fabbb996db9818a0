"""The one gate: nothing from a stranger reaches a handler; pairing with a TOTP code.

Driven through the emulator like a person would; each test checks what the user sees and what
the database holds afterwards. Long polling handles updates one after another, so once an
owner's later message is answered every earlier update has been handled.
"""

from __future__ import annotations

import time

import pyotp
import pytest
from sqlalchemy import func, select

from bot.chat.text import plain
from bot.config.secrets import SecretFiles
from bot.store.tables import (
    code_attempts,
    outbox,
    owners,
    runs,
    totp_steps,
    unknown_senders,
    updates,
)
from handlers.gate import REFUSAL
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack
from tests.helpers.transport import (
    all_rows,
    drained,
    owner_marker,
    stranger,
    update_row,
    worker_ready,
)

STATUS_HEADLINE = "web: web@"


async def _count(store, table, *where) -> int:
    async with store.read() as conn:
        return (await conn.execute(select(func.count()).select_from(table).where(*where))).scalar()


async def handled(stack, update_id: int) -> None:
    """Wait until this update is handled: intake handles each chat's updates in order, and
    different chats' side by side, so an answer in one chat says nothing of another's."""

    async def done():
        row = await update_row(stack.store, update_id)
        return row is not None and row.status == "handled"

    await eventually(done)


async def _unknown(store, user_id: int):
    [row] = await all_rows(store, unknown_senders, unknown_senders.c.user_id == user_id)
    return row


async def test_a_stranger_reaches_no_handler_and_is_refused_once(stack):
    mallory = stranger()
    chat = mallory["id"]
    hello = await stack.emulator.send_message("hello", user=mallory)
    [refusal] = await stack.emulator.wait_for_bot_messages(chat, 1)
    assert refusal["text"] == REFUSAL
    command = await stack.emulator.send_message("/status", user=mallory)
    edit = await stack.emulator.edit_message(
        chat, command["message"]["message_id"], "/ping", user=mallory
    )
    # A correctly signed Refresh button, lifted from the owner's own /status: the gate must
    # stop it before the signature is even looked at.
    asked = await stack.emulator.send_message("/status")
    [status] = await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1)
    signed = status["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    tap = await stack.emulator.tap(chat, refusal["message_id"], signed, user=mallory)
    marker = await stack.emulator.send_message("/help")
    await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 2)  # every earlier update handled

    answer = await stack.emulator.callback_answer(tap["callback_query_id"])
    assert answer is not None and not answer["text"] and not answer["show_alert"]
    sent = await drained(stack)
    # Exactly one refusal; the second message, the edit and the tap got nothing.
    assert [m["text"] for m in await stack.bot_messages(chat)] == [REFUSAL]
    assert [(row.chat_id, row.idempotency_key) for row in sent] == [
        (chat, f"refusal:{hello['update_id']}"),
        (OWNER_CHAT, f"reply:{asked['update_id']}"),
        (OWNER_CHAT, f"reply:{marker['update_id']}"),
    ]
    assert plain("".join(sent[1].parts)) == status["text"]
    seen = await _unknown(stack.store, mallory["id"])
    assert (seen.updates_seen, seen.display_name) == (4, "Mallory")
    assert seen.last_refused_at is not None
    ids = [hello["update_id"], command["update_id"], edit["update_id"], tap["update_id"]]
    rows = [await update_row(stack.store, update_id) for update_id in ids]
    assert [(r.kind, r.sender_id, r.status) for r in rows] == [
        ("message", chat, "handled"),
        ("message", chat, "handled"),
        ("edited_message", chat, "handled"),
        ("callback_query", chat, "handled"),
    ]
    assert await _count(stack.store, runs, runs.c.job == "ping") == 0
    assert await _count(stack.store, owners) == 0


async def test_a_stranger_in_a_group_gets_no_refusal_but_is_recorded(stack):
    mallory = stranger()
    group = {"id": -100_500, "type": "group", "title": "Friends"}
    sent = await stack.emulator.inject_message(
        {"text": "/status", "user": mallory, "chat_id": group["id"], "chat": group}
    )
    await owner_marker(stack)
    await handled(stack, sent["update_id"])  # another chat's: beside the owner's, not before

    await drained(stack)
    assert await stack.bot_messages(group["id"]) == []
    assert await _count(stack.store, outbox, outbox.c.chat_id != OWNER_CHAT) == 0
    seen = await _unknown(stack.store, mallory["id"])
    assert seen.updates_seen == 1
    row = await update_row(stack.store, sent["update_id"])
    assert (row.kind, row.sender_id, row.status) == ("message", mallory["id"], "handled")


async def test_a_stranger_refused_only_in_a_group_is_still_refused_in_private(stack):
    mallory = stranger()
    group = {"id": -100_501, "type": "group", "title": "Friends"}
    first = await stack.emulator.inject_message(
        {"text": "hello all", "user": mallory, "chat_id": group["id"], "chat": group}
    )
    [refusal] = await stack.ask("hello bot", user=mallory)
    assert refusal["text"] == REFUSAL
    await handled(stack, first["update_id"])  # the group's, handled beside the private chat's
    assert (await _unknown(stack.store, mallory["id"])).updates_seen == 2


async def test_an_update_with_no_sender_is_dropped(stack):
    post = {
        "message_id": 7,
        "date": int(time.time()),
        "chat": {"id": -100_777, "type": "channel", "title": "News"},
        "text": "/status",
        "entities": [{"type": "bot_command", "offset": 0, "length": 7}],
    }
    injected = await stack.emulator.inject_update({"channel_post": post})
    await owner_marker(stack)

    row = await update_row(stack.store, injected["update_id"])
    assert (row.kind, row.sender_id, row.status) == ("channel_post", None, "handled")
    assert await _count(stack.store, unknown_senders) == 0
    assert await _count(stack.store, outbox, outbox.c.chat_id != OWNER_CHAT) == 0
    assert await stack.bot_messages(-100_777) == []


async def test_pair_without_a_totp_secret_says_pairing_is_off(stack):
    mallory = stranger()
    [reply] = await stack.ask("/pair 123456", user=mallory)
    assert "Pairing is off" in reply["text"]
    assert await _count(stack.store, owners) == 0
    # /pair is let through the gate to answer, not counted as a stranger's knock.
    assert await _count(stack.store, unknown_senders) == 0


# -- pairing with a TOTP secret -----------------------------------------------------------


@pytest.fixture
async def paired_stack(tmp_path, database_url, redis_server_url, redis_namespace):
    """A stack whose data dir holds a TOTP secret before the web process starts."""
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    secret = pyotp.random_base32()
    SecretFiles(settings.data_dir).put("totp", secret)
    async with running_stack(settings, namespace=redis_namespace) as running:
        running.totp = pyotp.TOTP(secret)
        await worker_ready(running)
        yield running


async def _pair(stack, user, code: str) -> str:
    [reply] = await stack.ask(f"/pair {code}", user=user)
    return reply["text"]


async def test_a_current_code_pairs_a_stranger_who_can_then_use_the_bot(paired_stack):
    stack = paired_stack
    alice = stranger("Alice")
    assert await _pair(stack, alice, stack.totp.now()) == "Paired: this account is now an owner."

    [status] = await stack.ask("/status", user=alice)
    assert STATUS_HEADLINE in status["text"]
    [row] = await all_rows(stack.store, owners)
    assert (row.user_id, row.display_name) == (alice["id"], "Alice")
    assert await _count(stack.store, unknown_senders) == 0
    assert await _count(stack.store, code_attempts, code_attempts.c.accepted.is_(True)) == 1
    assert await _pair(stack, alice, stack.totp.now()) == "You are already an owner."


async def test_a_replayed_code_is_refused(paired_stack):
    stack = paired_stack
    alice, bob = stranger("Alice"), stranger("Bob")
    code = stack.totp.now()
    assert (await _pair(stack, alice, code)).startswith("Paired")

    assert "already used" in await _pair(stack, bob, code)
    # Bob is still a stranger: his next message is refused and reaches no handler.
    [refusal] = await stack.ask("/status", user=bob)
    assert refusal["text"] == REFUSAL
    assert [row.user_id for row in await all_rows(stack.store, owners)] == [alice["id"]]
    attempts = await all_rows(stack.store, code_attempts)
    assert [(a.user_id, a.accepted) for a in attempts] == [(alice["id"], True), (bob["id"], False)]


async def test_an_older_code_after_a_newer_one_is_refused(paired_stack):
    stack = paired_stack
    alice, bob = stranger("Alice"), stranger("Bob")
    moment = time.time()
    # The next step's code is inside the drift window (one step either way); the current step
    # stays inside it even if the clock moves on one step meanwhile.
    newer, older = stack.totp.at(moment + 30), stack.totp.at(moment)
    assert newer != older
    assert (await _pair(stack, alice, newer)).startswith("Paired")

    assert "already used" in await _pair(stack, bob, older)
    [step] = await all_rows(stack.store, totp_steps)
    assert step.last_step == stack.totp.timecode(_at(moment + 30))
    assert await _count(stack.store, owners) == 1


def _at(seconds: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC)


async def test_five_wrong_codes_lock_the_account(paired_stack):
    stack = paired_stack
    mallory = stranger()
    good = {stack.totp.at(time.time() + 30 * shift) for shift in (-2, -1, 0, 1, 2)}
    wrong = [
        code for code in (f"{n:06d}" for n in range(100_000, 999_999, 7919)) if code not in good
    ]
    for code in wrong[:5]:
        assert "not valid" in await _pair(stack, mallory, code)

    assert "Too many wrong codes" in await _pair(stack, mallory, stack.totp.now())
    assert await _count(stack.store, owners) == 0
    assert await _count(stack.store, totp_steps) == 0  # the good code was not even spent
    attempts = await all_rows(stack.store, code_attempts)
    assert [(a.user_id, a.accepted) for a in attempts] == [(mallory["id"], False)] * 5
    # Someone else is not locked out by Mallory's guesses.
    alice = stranger("Alice")
    assert (await _pair(stack, alice, stack.totp.now())).startswith("Paired")


async def test_pair_without_a_code_explains_the_usage(paired_stack):
    stack = paired_stack
    mallory = stranger()
    assert "/pair followed by the 6-digit code" in await _pair(stack, mallory, "")
    assert "/pair followed by the 6-digit code" in await _pair(stack, mallory, "1 2")
    assert await _count(stack.store, code_attempts) == 0
    assert await _count(stack.store, owners) == 0


async def test_pair_in_a_group_is_gated_like_anything_else(paired_stack):
    stack = paired_stack
    mallory = stranger()
    group = {"id": -100_502, "type": "group", "title": "Friends"}
    sent = await stack.emulator.inject_message(
        {
            "text": f"/pair {stack.totp.now()}",
            "user": mallory,
            "chat_id": group["id"],
            "chat": group,
        }
    )
    await owner_marker(stack)
    await handled(stack, sent["update_id"])  # another chat's: beside the owner's, not before

    await drained(stack)
    assert await stack.bot_messages(group["id"]) == []
    assert await _count(stack.store, owners) == 0
    assert await _count(stack.store, code_attempts) == 0
    assert (await update_row(stack.store, sent["update_id"])).status == "handled"
    assert await _count(stack.store, updates) >= 2


async def test_pair_addressed_to_another_bot_is_gated(stack):
    mallory = stranger()
    username = (await stack.emulator.bot_info())["user"]["username"]
    [refusal] = await stack.ask("/pair@someone_else_bot 123456", user=mallory)
    assert refusal["text"] == REFUSAL
    [off] = await stack.ask(f"/pair@{username} 123456", user=mallory)
    assert "Pairing is off" in off["text"]
    assert (await _unknown(stack.store, mallory["id"])).updates_seen == 1


async def test_the_gate_fails_closed_when_it_cannot_check(stack, monkeypatch):
    """PTB runs the next handler group after an error in the gate; the gate must not raise."""
    from bot.errors import StoreError

    checks = {"down": True}
    is_owner = stack.services.owners.is_owner

    async def unreachable(user_id):  # fault injection: the owner check hits a database outage
        if checks["down"]:
            raise StoreError("injected outage: the database is unreachable")
        return await is_owner(user_id)

    monkeypatch.setattr(stack.services.owners, "is_owner", unreachable)
    mallory = stranger()
    sent = await stack.emulator.send_message("/ping", user=mallory)

    async def left_pending():
        row = await update_row(stack.store, sent["update_id"])
        return row is not None and row.status == "pending" and row.attempts >= 1

    await eventually(left_pending)
    assert await all_rows(stack.store, runs, runs.c.job == "ping") == []
    assert await all_rows(stack.store, outbox) == []

    checks["down"] = False  # the retry now finds a stranger: refused, never pinged
    [refusal] = await stack.emulator.wait_for_bot_messages(mallory["id"], 1, timeout=15)
    assert refusal["text"] == REFUSAL
    assert (await update_row(stack.store, sent["update_id"])).status == "handled"
    assert await all_rows(stack.store, runs, runs.c.job == "ping") == []
