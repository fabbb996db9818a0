"""Update intake over long polling: recorded before handled, duplicates dropped, bad input
survived, and signed buttons. Updates are injected verbatim through the emulator where a real
client could not produce them (a repeated update_id, a malformed body, an unknown type)."""

from __future__ import annotations

import pytest

from aegis.web import EMULATOR
from bot.store.tables import outbox, tasks, updates
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack
from tests.helpers.transport import (
    all_rows,
    drained,
    outbox_rows,
    owner_marker,
    raw_message,
    settled,
    update_row,
)

NOT_MINE = "This button is not one of mine; nothing was done."


async def _deliveries(stack) -> int:
    return (await stack.emulator.stats())["updates_delivered"]


async def _open_chat(stack) -> dict:
    """The emulator knows a chat once its user wrote in it; raw updates then go there."""
    return await owner_marker(stack, "/help")


async def test_the_same_update_delivered_twice_is_handled_once(stack):
    opened = await _open_chat(stack)
    first = await stack.emulator.inject_update({"message": raw_message("/start")})
    update_id = first["update_id"]
    [reply] = await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1, after=opened["message_id"])
    assert reply["text"].startswith("Hello! I am aegis.")
    await settled(stack)
    delivered = await _deliveries(stack)

    recorded = (await update_row(stack.store, update_id)).payload
    again = await stack.emulator.inject_update(recorded)
    assert again["update_id"] == update_id
    await owner_marker(stack)

    assert await _deliveries(stack) == delivered + 2  # the repeat really reached the bot
    sent = await drained(stack)
    assert [row.idempotency_key for row in sent].count(f"reply:{update_id}") == 1
    texts = [m["text"] for m in await stack.bot_messages()]
    assert sum(text.startswith("Hello! I am aegis.") for text in texts) == 1
    rows = await all_rows(stack.store, updates, updates.c.update_id == update_id)
    assert [(row.kind, row.status) for row in rows] == [("message", "handled")]


@pytest.mark.parametrize(
    "body",
    [
        {"message": "not an object"},
        {"message": {**raw_message("no chat"), "chat": None}},
        {"message": {**raw_message("from a string"), "from": "someone"}},
        {"callback_query": {"id": "1", "from": {"id": "not a number"}}},
        {"message": {**raw_message("a huge chat id"), "chat": {"id": 2**64, "type": "private"}}},
    ],
    ids=["message-not-object", "no-chat", "from-a-string", "tap-from-bad-id", "huge-chat-id"],
)
async def test_an_update_telegram_never_sends_is_skipped_unrecorded(stack, caplog, body):
    await _open_chat(stack)
    before = await all_rows(stack.store, updates)
    await stack.emulator.inject_update(body)
    [reply] = await stack.ask("/help")  # handled after it: the poll moved past it
    assert "/status" in reply["text"]
    assert len(await all_rows(stack.store, updates)) == len(before) + 1  # the /help alone
    assert "skipped something that is not an update" in caplog.text

    async def confirmed():  # by the next poll, which passes the offset beyond both
        return (await stack.emulator.stats())["pending_updates"] == 0

    await eventually(confirmed)


async def test_nul_and_a_lone_surrogate_are_kept_as_replacement_characters(stack):
    await _open_chat(stack)
    text = "pay the bill \x00 before \ud800 friday"
    injected = await stack.emulator.inject_update({"message": raw_message(text)})
    update_id = injected["update_id"]
    await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 2)  # the /help, then the capture
    row = await update_row(stack.store, update_id)
    assert row.status == "handled"
    kept = "pay the bill \ufffd before \ufffd friday"
    assert row.payload["message"]["text"] == kept
    [task] = await all_rows(stack.store, tasks)
    assert task.body == kept


async def test_an_unknown_update_type_is_recorded_and_handled_quietly(stack):
    novel = await stack.emulator.inject_update({"something_new": {"x": 1}})
    await owner_marker(stack)

    row = await update_row(stack.store, novel["update_id"])
    assert (row.kind, row.sender_id, row.status) == ("something_new", None, "handled")
    assert row.payload["something_new"] == {"x": 1}
    assert len(await outbox_rows(stack.store)) == 1  # the marker's reply only


async def test_a_ten_thousand_character_message_is_answered_and_kept_whole(stack):
    text = ("word " * 2000).strip() + "!!!!"
    assert len(text) >= 10_000
    opened = await _open_chat(stack)
    injected = await stack.emulator.inject_update({"message": raw_message(text)})
    [reply] = await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1, after=opened["message_id"])
    # Captured as a task: the reply names it by its title, a short first line.
    assert reply["text"].startswith("Captured as task 1: word word")
    assert len(reply["text"]) < 200

    row = await update_row(stack.store, injected["update_id"])
    assert row.status == "handled"
    assert row.payload["message"]["text"] == text
    [task] = await all_rows(stack.store, tasks)
    assert task.body == text
    [_, sent] = await drained(stack)
    assert sent.idempotency_key == f"reply:{injected['update_id']}"


async def test_a_tap_with_data_the_bot_never_sent_is_refused_with_an_alert(stack):
    [start] = await stack.ask("/start")
    tap = await stack.emulator.tap(OWNER_CHAT, start["message_id"], "refresh:status:go:made-up")
    await owner_marker(stack)

    answer = await stack.emulator.callback_answer(tap["callback_query_id"])
    assert answer["text"] == NOT_MINE and answer["show_alert"] is True
    assert (await update_row(stack.store, tap["update_id"])).status == "handled"
    sent = await drained(stack)
    assert len(sent) == 2  # /start's and the marker's replies: the tap sent nothing
    assert len(await stack.bot_messages()) == 2


async def test_the_signed_refresh_button_edits_the_status_in_place(stack):
    [status] = await stack.ask("/status")
    assert "ping completed" not in status["text"]
    data = status["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    await stack.services.enqueue("ping", OWNER_CHAT, 0.0, 1)  # something new to show

    async def pinged():
        return any(run.job == "ping" for run in await stack.services.platform.job_runs.latest(5))

    await eventually(pinged)
    tap = await stack.emulator.tap(OWNER_CHAT, status["message_id"], data)
    assert tap["matched_button"] is True

    async def edited():
        [message] = [m for m in await stack.bot_messages() if m["text"].startswith("aegis")]
        return message if "ping completed" in message["text"] else None

    fresh = await eventually(edited)  # the one status message, not a second one
    assert fresh["message_id"] == status["message_id"]
    assert fresh["reply_markup"]["inline_keyboard"][0][0]["callback_data"] == data
    answer = await stack.emulator.callback_answer(tap["callback_query_id"])
    assert answer["text"] == "Refreshed" and not answer["show_alert"]
    rows = await outbox_rows(stack.store, OWNER_CHAT)
    assert ("edit", f"reply:{tap['update_id']}") in [(r.kind, r.idempotency_key) for r in rows]


async def test_a_tampered_refresh_button_is_refused(stack):
    [status] = await stack.ask("/status")
    data = status["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    last = data[-1]
    tampered = data[:-1] + ("A" if last != "A" else "B")
    tap = await stack.emulator.tap(OWNER_CHAT, status["message_id"], tampered)
    await owner_marker(stack)

    answer = await stack.emulator.callback_answer(tap["callback_query_id"])
    assert answer["text"] == NOT_MINE and answer["show_alert"] is True
    sent = await drained(stack)
    assert len(sent) == 2  # the status and the marker's reply; no fresh status
    assert not any(row.idempotency_key == f"reply:{tap['update_id']}" for row in sent)


async def test_an_update_handled_before_a_restart_is_not_handled_again(
    tmp_path, database_url, redis_server_url, redis_namespace
):
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    async with running_stack(settings, namespace=redis_namespace) as before:
        sent = await before.emulator.send_message("/start")
        update_id = sent["update_id"]
        await before.emulator.wait_for_bot_messages(OWNER_CHAT, 1)
        await settled(before)
        original = (await update_row(before.store, update_id)).payload
        state = before.app[EMULATOR]

    async with running_stack(settings, namespace=redis_namespace, emulator_state=state) as after:
        delivered = (await after.emulator.stats())["updates_delivered"]
        await after.emulator.inject_update(original)
        await owner_marker(after)

        assert (await after.emulator.stats())["updates_delivered"] == delivered + 2
        sent_rows = await drained(after)
        keys = [row.idempotency_key for row in sent_rows]
        assert keys.count(f"reply:{update_id}") == 1 and len(keys) == 2
        texts = [m["text"] for m in await after.bot_messages()]
        assert sum(text.startswith("Hello! I am aegis.") for text in texts) == 1
        row = await update_row(after.store, update_id)
        assert (row.status, row.attempts) == ("handled", 0)
        assert len(await all_rows(after.store, outbox, outbox.c.chat_id == OWNER_CHAT)) == 2
