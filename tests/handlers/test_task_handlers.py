"""Capture and triage through the real bot, on SQLite and Postgres: forwards and written
messages become tasks once, the bad input of the issue (no text, 10,000 characters, an album, a
repeated update, an edit, hidden senders, odd labels, missing tasks), the triage buttons, the
lists and searches. Each test checks what the user sees and what the database holds.

(Named apart from tests/bot/tasks/test_tasks.py, the core's tests: module names stay unique.)
"""

from __future__ import annotations

from typing import Any

from bot.store.tables import notes, outbox, tasks
from bot.tasks.capture import Capture, Origin
from bot.tasks.task import State
from handlers.chat import HELP
from handlers.gate import REFUSAL
from tests.helpers.stack import OWNER_CHAT, eventually
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


async def texts_after(stack, message_id: int) -> list[str]:
    return [m["text"] for m in await stack.bot_messages(OWNER_CHAT, message_id)]


async def task_rows(stack) -> list:
    return await all_rows(stack.store, tasks)


async def seed(stack, titles: list[str], state: State, labels: dict[str, list[str]]) -> None:
    """Tasks made through the same core the bot uses, for lists longer than a chat would
    bother to build; ``labels`` maps a title to its context labels."""
    service = stack.services.platform.tasks
    for number, title in enumerate(titles):
        capture = Capture(OWNER_CHAT, 50_000 + number, OWNER_CHAT, title, Origin("self"))
        task = (await service.capture(capture)).task
        await service.move(task.id, state, "test")
        if labels.get(title):
            await service.relabel(task.id, labels[title], [])


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


async def test_a_written_message_is_captured_and_a_note_is_not(stack):
    sent, reply = await say(stack, "buy milk\nand bread")
    assert reply["text"] == "Captured as task 1: buy milk" + WHERE
    assert reply["reply_to_message_id"] == sent["message_id"]
    _, noted = await say(stack, "/note buy milk is done already")
    assert noted["text"] == "Not captured: /note keeps a message out of your tasks."

    [row] = await task_rows(stack)
    assert (row.title, row.body, row.origin_kind) == ("buy milk", "buy milk\nand bread", "self")
    assert (row.chat_id, row.message_id) == (OWNER_CHAT, sent["message_id"])


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
    assert texts == ["Captured as task 1: Holiday" + WHERE, HELP]
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
    assert texts == [reply["text"], HELP]
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


# Changes


async def test_labels_are_added_and_removed_and_odd_ones_are_refused(stack):
    await say(stack, "fix the bike")
    _, added = await say(stack, "/label 1 +errand +Quick")
    assert added["text"] == "Task 1 labels: #errand #quick"
    _, changed = await say(stack, "/label 1 +quick -errand +#bike")
    assert changed["text"] == "Task 1 labels: #quick #bike"

    odd = ["+a b", "+!!", "+" + "x" * 40, "+", "+_hidden", "quick", "+ok +no/slash"]
    for change in odd:
        _, refused = await say(stack, f"/label 1 {change}")
        assert refused["text"].endswith("Nothing was changed."), change
        assert "label" in refused["text"], change
    [row] = await task_rows(stack)
    assert row.labels == ["quick", "bike"]

    _, long = await say(stack, "/label 1 +" + "x" * 40)
    assert long["text"] == (
        f"{'x' * 40!r} is not a label: use up to 32 letters, digits, - or _, starting with a "
        "letter or digit. Nothing was changed."
    )
    _, missing = await say(stack, "/label 9 +quick")
    assert missing["text"] == "There is no task 9. Nothing was changed."
    _, usage = await say(stack, "/label 1")
    assert usage["text"].startswith("Send /label, the task's number")
    [row] = await task_rows(stack)
    assert row.labels == ["quick", "bike"]


async def test_done_on_a_missing_task_or_twice_changes_nothing(stack):
    _, missing = await say(stack, "/done 99")
    assert missing["text"] == "There is no task 99. Nothing was changed."
    assert await task_rows(stack) == []
    _, usage = await say(stack, "/done soon")
    assert usage["text"] == "Send /done and the task's number, e.g. /done 12."

    await say(stack, "water the plants")
    _, done = await say(stack, "/done 1")
    assert done["text"] == "Task 1 done: water the plants"
    [row] = await task_rows(stack)
    closed_at = row.closed_at
    assert (row.closed_as, row.state) == ("done", "inbox") and closed_at is not None
    _, again = await say(stack, "/done #1")
    assert again["text"] == "Task 1 is already closed (inbox, done). Nothing was changed."
    [row] = await task_rows(stack)
    assert (row.closed_as, row.closed_at) == ("done", closed_at)


async def test_the_triage_buttons_on_the_receipt_move_drop_and_file_a_task(stack):
    _, first = await say(stack, "book the flights")
    _, second = await say(stack, "old newsletter")
    _, third = await say(stack, "Wi-Fi password at the café: hunter2")

    answer, said = await tap_for_reply(stack, first, "@next")
    assert answer["text"] == said["text"] == "Task 1 → @next: book the flights"
    answer, said = await tap_for_reply(stack, second, "Drop")
    assert answer["text"] == said["text"] == "Task 2 dropped: old newsletter"
    answer, said = await tap_for_reply(stack, third, "@reference")
    assert said["text"] == (
        "Task 3 filed as @reference; /recall finds it: Wi-Fi password at the café: hunter2"
    )

    flights, newsletter, password = await task_rows(stack)
    assert (flights.state, flights.closed_at, flights.triaged_by) == ("@next", None, "owner You")
    assert (newsletter.state, newsletter.closed_as) == ("inbox", "dropped")
    assert (password.state, password.closed_as) == ("@reference", "filed")
    [note] = await all_rows(stack.store, notes)
    assert (note.kind, note.task_id, note.text) == (
        "reference",
        3,
        "Wi-Fi password at the café: hunter2",
    )
    _, recalled = await say(stack, "/recall hunter2")
    assert recalled["text"] == "1 note:\n\n[task 3] Wi-Fi password at the café: hunter2"

    # A closed task's buttons change nothing, and say so.
    late = await tap(stack, second, "@someday")
    assert late["text"] == "Task 2 is already closed (inbox, dropped)." and late["show_alert"]
    [_, newsletter, _] = await task_rows(stack)
    assert (newsletter.state, newsletter.closed_as) == ("inbox", "dropped")


# Lists and searches


async def test_next_groups_by_first_label_and_pages(stack):
    titles = [f"task {n:02d}" for n in range(1, 24)]
    labels = {title: ["home"] for title in titles[:5]}
    labels |= {title: ["errand", "home"] for title in titles[5:8]}
    await seed(stack, titles, State.NEXT, labels)

    _, first = await say(stack, "/next")
    lines = first["text"].split("\n")
    assert lines[:2] == ["What you can do now (@next): 23 tasks", ""]
    assert lines[2:6] == [
        "#errand",
        "  6. task 06  (#errand #home)",
        "  7. task 07  (#errand #home)",
        "  8. task 08  (#errand #home)",
    ]
    assert lines[6] == "#home" and lines[12] == "#other"
    assert lines[13:14] == ["  9. task 09"] and lines[-3:] == ["  20. task 20", "", "Page 1 of 2"]
    assert list(buttons(first))[:4] == ["1: done", "1: someday", "1: waiting", "1: assign"]
    assert "Next ›" in buttons(first) and "‹ Previous" not in buttons(first)

    _, second = await tap_for_reply(stack, first, "Next ›")
    assert second["text"].split("\n") == [
        "What you can do now (@next): 23 tasks",
        "",
        "#other",
        "  21. task 21",
        "  22. task 22",
        "  23. task 23",
        "",
        "Page 2 of 2",
    ]
    assert "‹ Previous" in buttons(second) and "Next ›" not in buttons(second)
    _, back = await tap_for_reply(stack, second, "‹ Previous")
    assert back["text"] == first["text"]


async def test_inbox_waiting_and_someday_list_what_they_hold(stack):
    _, empty = await say(stack, "/inbox")
    assert empty["text"] == "The inbox is empty. Forward me anything to capture it."
    _, receipt = await say(stack, "ask Bob for the keys")
    await tap_for_reply(stack, receipt, "@waiting")
    _, receipt = await say(stack, "learn the cello")
    await tap_for_reply(stack, receipt, "@someday")
    await say(stack, "sort the mail")

    _, inbox = await say(stack, "/inbox")
    assert inbox["text"] == "Inbox: not triaged yet: 1 task\n\n3. sort the mail"
    assert list(buttons(inbox)) == ["3: @next", "3: someday", "3: drop"]
    _, waiting = await say(stack, "/waiting")
    assert waiting["text"] == "Waiting on someone (@waiting): 1 task\n\n1. ask Bob for the keys"
    assert list(buttons(waiting)) == ["1: done", "1: someday", "1: assign"]
    _, someday = await say(stack, "/someday")
    assert someday["text"] == "Someday, maybe (@someday): 1 task\n\n2. learn the cello"
    _, shouted = await say(stack, "/SOMEDAY")  # Telegram commands match whatever their case
    assert shouted["text"] == someday["text"]
    _, nothing = await say(stack, "/next")
    assert nothing["text"] == "Nothing in @next. /inbox shows what waits for triage."

    _, moved = await tap_for_reply(stack, inbox, "3: @next")
    assert moved["text"] == "Task 3 → @next: sort the mail"
    _, finished = await tap_for_reply(stack, waiting, "1: done")
    assert finished["text"] == "Task 1 done: ask Bob for the keys"
    states = [(row.state, row.closed_as) for row in await task_rows(stack)]
    assert states == [("@waiting", "done"), ("@someday", None), ("@next", None)]
    _, waiting = await say(stack, "/waiting")
    assert waiting["text"] == "Nothing is @waiting."


async def test_find_searches_open_and_closed_tasks_and_pages(stack):
    await say(stack, "invoice march electricity")
    await say(stack, "Invoice April water")
    await say(stack, "dentist on friday")
    await say(stack, "/done 2")

    _, found = await say(stack, "/find invoice")
    assert found["text"] == (
        "Tasks with 'invoice': 2\n\n"
        "2. Invoice April water  [inbox, done]\n"
        "1. invoice march electricity  [inbox]"
    )
    _, narrowed = await say(stack, "/find INVOICE elec")
    assert narrowed["text"] == (
        "Tasks with 'invoice elec': 1\n\n1. invoice march electricity  [inbox]"
    )
    _, none = await say(stack, "/find invoice dentist")
    assert none["text"] == "No task holds 'invoice dentist'."
    _, usage = await say(stack, "/find !!")
    assert usage["text"] == "Send /find followed by words, e.g. /find invoice march."

    await seed(stack, [f"receipt {n}" for n in range(12)], State.SOMEDAY, {})
    _, first = await say(stack, "/find receipt")
    assert first["text"].startswith("Tasks with 'receipt': 12\n\n15. receipt 11  [@someday]")
    assert first["text"].endswith("Page 1 of 2") and list(buttons(first)) == ["Next ›"]
    _, second = await tap_for_reply(stack, first, "Next ›")
    assert second["text"] == (
        "Tasks with 'receipt': 12\n\n"
        "5. receipt 1  [@someday]\n"
        "4. receipt 0  [@someday]\n\n"
        "Page 2 of 2"
    )


async def test_recall_finds_filed_items_by_words_alike_on_every_database(stack):
    """The same assertions run on SQLite (FTS5) and Postgres (tsvector)."""
    for text in (
        "Wi-Fi password at the café: hunter2",
        "Deploy guide: https://example.com/deploy-guide",
        "Tax rules, 2031 edition",
    ):
        _, receipt = await say(stack, text)
        await tap_for_reply(stack, receipt, "@reference")

    expected = {
        "/recall wi fi": ["[task 1] Wi-Fi password at the café: hunter2"],
        "/recall CAFÉ": ["[task 1] Wi-Fi password at the café: hunter2"],
        "/recall example deploy": ["[task 2] Deploy guide: https://example.com/deploy-guide"],
        "/recall tax 2031": ["[task 3] Tax rules, 2031 edition"],
        "/recall ta": ["[task 3] Tax rules, 2031 edition"],  # a prefix of a word
        "/recall the": ["[task 1] Wi-Fi password at the café: hunter2"],
    }
    for query, found in expected.items():
        _, recalled = await say(stack, query)
        count = f"{len(found)} note{'s' if len(found) != 1 else ''}:"
        assert recalled["text"] == "\n\n".join([count, *found]), query
    _, recalled = await say(stack, "/recall e")  # "example" and "edition"; newest first
    assert recalled["text"] == (
        "2 notes:\n\n[task 3] Tax rules, 2031 edition\n\n"
        "[task 2] Deploy guide: https://example.com/deploy-guide"
    )
    for query in ("cafe", "wifi", "hunter", "guides"):
        _, nothing = await say(stack, f"/recall {query}")
        if query == "hunter":
            assert nothing["text"].startswith("1 note:"), query  # hunter2 begins with hunter
        else:
            assert nothing["text"] == f"No note holds {query!r}.", query
    _, usage = await say(stack, "/recall")
    assert usage["text"] == "Send /recall followed by words, e.g. /recall wifi password."


async def test_assign_by_command_and_by_button(stack):
    _, receipt = await say(stack, "write the report")
    _, assigned = await say(stack, "/assign 1 demo")
    assert assigned["text"] == "Task 1 is assigned to demo: write the report"
    _, refused = await say(stack, "/assign 1 nosuchagent")
    assert refused["text"] == (
        "There is no agent 'nosuchagent'; the agents are: demo. Nothing was changed."
    )
    [row] = await task_rows(stack)
    assert row.assignee == "demo"
    _, nobody = await say(stack, "/assign 1 nobody")
    assert nobody["text"] == "Task 1 is assigned to nobody now."
    [row] = await task_rows(stack)
    assert row.assignee is None

    await tap_for_reply(stack, receipt, "@next")
    _, listed = await say(stack, "/next")
    _, question = await tap_for_reply(stack, listed, "1: assign")
    assert question["text"] == "Who takes task 1?"
    assert list(buttons(question)) == ["demo"]
    answer, said = await tap_for_reply(stack, question, "demo")
    assert answer["text"] == said["text"] == "Task 1 is assigned to demo: write the report"
    [row] = await task_rows(stack)
    assert (row.assignee, row.state) == ("demo", "@next")
    _, listed = await say(stack, "/next")
    assert "1. write the report  (→ demo)" in listed["text"]


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
