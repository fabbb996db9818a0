"""Capture through the real bot, on SQLite and Postgres: forwards and written messages become
tasks once, and the bad input of the issue (no text, 10,000 characters, an album, a repeated
update, an edit, hidden senders and channels, a stranger forwarding). Each test checks what the
user sees and what the database holds.

(Named apart from tests/bot/tasks/test_tasks.py, the core's tests: module names stay unique.)
"""

from __future__ import annotations

from typing import Any

from bot.chat.text import plain
from bot.store.tables import notes, outbox
from handlers.chat import HELP
from handlers.gate import REFUSAL
from tests.helpers.stack import OWNER_CHAT
from tests.helpers.task_chat import buttons, newest_id, say, task_rows
from tests.helpers.transport import (
    all_rows,
    drained,
    owner_marker,
    raw_message,
    settled,
    stranger,
    update_row,
)

ANN = {"id": 42, "is_bot": False, "first_name": "Ann"}
WHEN = 1_700_000_000  # when the forwarded messages were first sent
TRIAGE_BUTTONS = ["@next", "@someday", "@waiting", "@reference", "Drop"]
WHERE = "\nWhere does it go? Or leave it in the inbox for now."
HELP_FIRST_LINE = "aegis is your personal agent platform"


def from_ann(date: int = WHEN) -> dict[str, Any]:
    return {"type": "user", "sender_user": ANN, "date": date}


async def texts_after(stack, message_id: int) -> list[str]:
    return [m["text"] for m in await stack.bot_messages(OWNER_CHAT, message_id)]


# Capture


async def test_a_forward_is_captured_once_with_triage_buttons(stack):
    _, reply = await say(stack, "Call the plumber about the leak", forward_origin=from_ann())
    assert reply["text"] == "Captured as task 1: Call the plumber about the leak" + WHERE
    assert list(buttons(reply)) == TRIAGE_BUTTONS

    _, again = await say(stack, "Call the plumber about the leak", forward_origin=from_ann())
    assert again["text"] == "Already captured as task 1 (inbox): Call the plumber about the leak"
    assert buttons(again) == {}
    [row] = await task_rows(stack)
    assert (row.id, row.state, row.closed_at) == (1, "inbox", None)
    assert (row.origin_kind, row.origin_name, row.origin_user_id) == ("user", "Ann", 42)
    assert row.body == "Call the plumber about the leak"

    # The same words Ann sent at another moment are another message, so another task.
    later = from_ann(WHEN + 60)
    _, other = await say(stack, "Call the plumber about the leak", forward_origin=later)
    first, second = await task_rows(stack)
    assert first.id == 1 and other["text"].startswith(f"Captured as task {second.id}: ")


async def test_a_forwarded_command_is_captured_never_run(stack):
    await say(stack, "Pay the rent")
    _, reply = await say(stack, "/done 1", forward_origin=from_ann())
    assert reply["text"] == "Captured as task 2: /done 1" + WHERE
    _, unknown = await say(stack, "/frobnicate", forward_origin=from_ann())
    assert unknown["text"].startswith("Captured as task 3: /frobnicate")
    first, *_ = await task_rows(stack)
    assert first.closed_at is None  # Ann's "/done 1" closed nothing


async def test_a_written_message_is_captured_and_an_aside_is_not(stack):
    sent, reply = await say(stack, "buy milk\nand bread")
    assert reply["text"] == "Captured as task 1: buy milk" + WHERE
    assert reply["reply_to_message_id"] == sent["message_id"]
    _, aside = await say(stack, "/aside buy milk is done already")
    assert aside["text"] == "Not captured: /aside keeps a message out of your tasks."

    [row] = await task_rows(stack)
    assert (row.title, row.body, row.origin_kind) == ("buy milk", "buy milk\nand bread", "self")
    assert (row.chat_id, row.message_id) == (OWNER_CHAT, sent["message_id"])


async def test_a_note_is_kept_for_recall_and_is_not_a_task(stack):
    _, noted = await say(stack, "/note remember to water plants\nthe fern twice a week")
    assert noted["text"] == "Noted. /recall remember finds it."
    _, recalled = await say(stack, "/recall water")
    assert recalled["text"] == (
        "1 note:\n\n[your note] remember to water plants\nthe fern twice a week"
    )
    _, usage = await say(stack, "/note")
    assert usage["text"] == "Send /note and what to keep, e.g. /note the gate code is 4512."
    assert await task_rows(stack) == []  # a note, not a task
    [row] = await all_rows(stack.store, notes)
    assert (row.kind, row.user_id, row.task_id) == ("owner", OWNER_CHAT, None)
    _, help_text = await say(stack, "/help")
    assert "/note text: keep a note for /recall" in help_text["text"]
    assert "/aside text: say something that is neither captured nor kept" in help_text["text"]


async def test_a_photo_without_caption_is_captured_with_its_file(stack):
    sent, reply = await say(stack, photo={"file_name": "receipt.jpg"}, forward_origin=from_ann())
    assert "text" not in sent and "caption" not in sent
    assert reply["text"] == "Captured as task 1: Photo from Ann" + WHERE
    _, document = await say(stack, document={"file_name": "lease.pdf"})
    assert document["text"] == "Captured as task 2: Document lease.pdf" + WHERE
    _, again = await say(stack, photo={"file_name": "receipt.jpg"}, forward_origin=from_ann())
    assert again["text"] == "Already captured as task 1 (inbox): Photo from Ann"

    photo, lease = await task_rows(stack)
    assert photo.body == "" and photo.title == "Photo from Ann"
    [kept] = photo.attachments
    largest = sent["photo"][-1]
    assert (kept["kind"], kept["file_id"]) == ("photo", largest["file_id"])
    assert kept["file_unique_id"] == largest["file_unique_id"]
    [kept] = lease.attachments
    assert (kept["kind"], kept["file_name"]) == ("document", "lease.pdf")
    _, detail = await say(stack, "/task 1")
    assert detail["text"].startswith("Task 1 [inbox]: Photo from Ann")
    assert "from Ann" in detail["text"] and "1 attachment" in detail["text"]


async def test_a_ten_thousand_character_forward_is_kept_whole_with_a_short_reply(stack):
    text = ("word " * 2000) + "lastword"
    assert len(text) > 10_000
    opened = await owner_marker(stack)  # the emulator sends raw updates to a chat it knows
    message = raw_message(text, message_id=900_001)
    message["forward_origin"] = {"type": "hidden_user", "sender_user_name": "Long", "date": WHEN}
    injected = await stack.emulator.inject_update({"message": message})
    [reply] = await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1, after=opened["message_id"])

    title = ("word " * 16)[:79] + "…"
    assert reply["text"] == f"Captured as task 1: {title}" + WHERE
    assert (await update_row(stack.store, injected["update_id"])).status == "handled"
    [row] = await task_rows(stack)
    assert row.body == text and len(row.body) == len(text)
    assert row.title == title
    # Search holds every word of it, the last one too.
    _, found = await say(stack, "/find lastword")
    assert found["text"].startswith("Tasks with 'lastword': 1\n\n1. word word")


async def test_an_album_is_one_task_with_one_reply_and_every_photo(stack):
    first = await stack.send(
        None, photo={"file_name": "beach-1.jpg"}, caption="Holiday", media_group_id="4711"
    )
    sent = [first]
    for number in (2, 3):
        photo = {"file_name": f"beach-{number}.jpg"}
        sent.append(await stack.send(None, photo=photo, media_group_id="4711"))
    await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1, after=first["message_id"])
    await owner_marker(stack)  # every earlier update is handled once this is answered

    texts = await texts_after(stack, first["message_id"])
    assert texts == ["Captured as task 1: Holiday" + WHERE, plain(HELP)]
    [row] = await task_rows(stack)
    assert row.body == "Holiday"
    assert [a["kind"] for a in row.attachments] == ["photo"] * 3
    assert len({a["file_unique_id"] for a in row.attachments}) == 3
    message_ids = [a["message_id"] for a in row.attachments]
    assert message_ids == [message["message_id"] for message in sent]
    _, detail = await say(stack, "/task 1")
    assert "3 attachments" in detail["text"]
    # A caption edit cannot say which part of the album's text it replaces: refused, in words.
    await stack.emulator.edit_message(OWNER_CHAT, sent[1]["message_id"], "Beach day")
    [answer] = await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1, after=detail["message_id"])
    assert answer["text"] == (
        "Task 1 keeps its text: it holds a whole album, so the edit is not applied."
    )
    assert (await task_rows(stack))[0].body == "Holiday"


async def test_the_same_update_delivered_twice_makes_one_task_and_one_reply(stack):
    opened = await owner_marker(stack)
    first = await stack.emulator.inject_update({"message": raw_message("renew the passport")})
    update_id = first["update_id"]
    [reply] = await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1, after=opened["message_id"])
    assert reply["text"] == "Captured as task 1: renew the passport" + WHERE
    await settled(stack)
    delivered = (await stack.emulator.stats())["updates_delivered"]

    recorded = (await update_row(stack.store, update_id)).payload
    again = await stack.emulator.inject_update(recorded)
    assert again["update_id"] == update_id
    await owner_marker(stack)

    assert (await stack.emulator.stats())["updates_delivered"] == delivered + 2
    sent = await drained(stack)
    assert [row.idempotency_key for row in sent].count(f"reply:{update_id}") == 1
    texts = await texts_after(stack, opened["message_id"])
    assert texts == [reply["text"], plain(HELP)]
    assert len(await task_rows(stack)) == 1

    # The same message in a new update (a client resending it) is answered, not captured.
    before = await newest_id(stack)
    await stack.emulator.inject_update({"message": recorded["message"]})
    [answer] = await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1, after=before)
    assert answer["text"] == "Already captured as task 1 (inbox): renew the passport"
    assert len(await task_rows(stack)) == 1


async def test_an_edit_is_followed_while_the_task_is_open_and_refused_once_closed(stack):
    sent, captured = await say(stack, "call mom")
    await stack.emulator.edit_message(OWNER_CHAT, sent["message_id"], "call mom on sunday\ntrip")
    [followed] = await stack.emulator.wait_for_bot_messages(
        OWNER_CHAT, 1, after=captured["message_id"]
    )
    assert followed["text"] == "Task 1 follows your edit: call mom on sunday"
    [row] = await task_rows(stack)
    assert (row.title, row.body) == ("call mom on sunday", "call mom on sunday\ntrip")
    _, found = await say(stack, "/find sunday trip")
    assert found["text"].startswith("Tasks with 'sunday trip': 1")

    _, done = await say(stack, "/done 1")
    assert done["text"] == "Task 1 done: call mom on sunday"
    await stack.emulator.edit_message(OWNER_CHAT, sent["message_id"], "call dad")
    [refused] = await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1, after=done["message_id"])
    assert refused["text"] == (
        "Task 1 keeps its text: it is closed (inbox, done), so the edit is not applied."
    )
    [row] = await task_rows(stack)
    assert (row.title, row.body, row.closed_as) == (
        "call mom on sunday",
        "call mom on sunday\ntrip",
        "done",
    )


async def test_a_photo_caption_edited_after_capture_becomes_the_title(stack):
    sent, captured = await say(stack, photo={"file_name": "whiteboard.jpg"})
    assert captured["text"] == "Captured as task 1: Photo" + WHERE
    await stack.emulator.edit_message(OWNER_CHAT, sent["message_id"], "Sprint plan")
    [followed] = await stack.emulator.wait_for_bot_messages(
        OWNER_CHAT, 1, after=captured["message_id"]
    )
    assert followed["text"] == "Task 1 follows your edit: Sprint plan"
    [row] = await task_rows(stack)
    assert (row.title, row.body, len(row.attachments)) == ("Sprint plan", "Sprint plan", 1)


async def test_a_forward_from_a_hidden_user_and_from_channels_keep_where_they_came_from(stack):
    hidden = {"type": "hidden_user", "sender_user_name": "Secret Sam", "date": WHEN}
    public = {
        "type": "channel",
        "chat": {"id": -1001234, "type": "channel", "title": "Daily News", "username": "daily"},
        "message_id": 77,
        "date": WHEN,
    }
    private = {
        "type": "channel",
        "chat": {"id": -1005678, "type": "channel", "title": "Family"},
        "message_id": 3,
        "date": WHEN,
    }
    _, reply = await say(stack, "meet at noon", forward_origin=hidden)
    assert reply["text"] == "Captured as task 1: meet at noon" + WHERE
    _, reply = await say(stack, "Big news today", forward_origin=public)
    assert reply["text"] == "Captured as task 2: Big news today" + WHERE
    _, reply = await say(stack, photo={"file_name": "cat.jpg"}, forward_origin=private)
    assert reply["text"] == "Captured as task 3: Photo from Family" + WHERE
    # A channel post is known by its channel and number, whenever it is forwarded again.
    _, again = await say(stack, "Big news today", forward_origin={**public, "date": WHEN + 99})
    assert again["text"] == "Already captured as task 2 (inbox): Big news today"

    sam, news, family = await task_rows(stack)
    assert (sam.origin_kind, sam.origin_name) == ("hidden_user", "Secret Sam")
    assert sam.origin_user_id is None
    assert sam.origin_link is None
    assert (news.origin_kind, news.origin_name) == ("channel", "Daily News")
    assert (news.origin_chat_id, news.origin_message_id) == (-1001234, 77)
    assert news.origin_link == "https://t.me/daily/77"
    assert (family.origin_name, family.origin_link) == ("Family", None)
    _, detail = await say(stack, "/task 2")
    assert "from Daily News; https://t.me/daily/77" in detail["text"]
    _, found = await say(stack, "/find secret sam")
    assert found["text"].startswith("Tasks with 'secret sam': 1\n\n1. meet at noon")


async def test_a_stranger_forwarding_something_makes_no_task(stack):
    mallory = stranger()
    await stack.emulator.send_message("buy now!", user=mallory, forward_origin=from_ann())
    [refusal] = await stack.emulator.wait_for_bot_messages(mallory["id"], 1)
    assert refusal["text"] == REFUSAL
    await stack.emulator.send_message(user=mallory, photo={"file_name": "spam.jpg"})
    await owner_marker(stack)  # every earlier update is handled once this is answered

    assert await task_rows(stack) == []
    assert [m["text"] for m in await stack.bot_messages(mallory["id"])] == [REFUSAL]
    assert len(await all_rows(stack.store, outbox, outbox.c.chat_id == mallory["id"])) == 1
