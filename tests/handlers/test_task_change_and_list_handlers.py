"""Changing and listing tasks through the real bot, on SQLite and Postgres: labels (odd ones
refused), /done on a missing or closed task, the triage buttons on a receipt, the lists and
their pages, /find and /recall on every database, and /assign by command and by button. Each
test checks what the user sees and what the database holds.
"""

from __future__ import annotations

from bot.store.tables import notes
from bot.tasks.capture import Capture, Origin
from bot.tasks.task import State
from tests.helpers.stack import OWNER_CHAT
from tests.helpers.task_chat import buttons, say, tap, tap_for_edit, tap_for_reply, task_rows
from tests.helpers.transport import all_rows


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
    someday = buttons(second)["@someday"]
    _, third = await say(stack, "Wi-Fi password at the café: hunter2")

    answer, first = await tap_for_edit(stack, first, "@next")
    assert answer["text"] == "Task 1 → @next: book the flights"
    assert first["text"].startswith("Captured as task 1: book the flights\n✓ Task 1 → @next, by ")
    assert buttons(first) == {}  # chosen: nothing left to tap
    answer, second = await tap_for_edit(stack, second, "Drop")
    assert answer["text"] == "Task 2 dropped: old newsletter"
    assert second["text"].startswith("Captured as task 2: old newsletter\n✓ Task 2 dropped, by ")
    assert list(buttons(second)) == ["Undo"]
    answer, third = await tap_for_edit(stack, third, "@reference")
    assert answer["text"] == (
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

    # A closed task's buttons (here, one lifted from the receipt before it was edited) change
    # nothing, and say so.
    stale = {
        **second,
        "reply_markup": {"inline_keyboard": [[{"text": "@someday", "callback_data": someday}]]},
    }
    late = await tap(stack, stale, "@someday")
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
    assert list(buttons(first))[:4] == ["1 Done", "1 @waiting", "1 Assign", "2 Done"]
    assert "Next ›" in buttons(first) and "‹ Previous" not in buttons(first)

    _, second = await tap_for_edit(stack, first, "Next ›")  # the page turns in place
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
    _, back = await tap_for_edit(stack, second, "‹ Previous")
    assert back["text"] == first["text"]


async def test_inbox_waiting_and_someday_list_what_they_hold(stack):
    _, empty = await say(stack, "/inbox")
    assert empty["text"] == "The inbox is empty. Forward me anything to capture it."
    _, receipt = await say(stack, "ask Bob for the keys")
    await tap_for_edit(stack, receipt, "@waiting")
    _, receipt = await say(stack, "learn the cello")
    await tap_for_edit(stack, receipt, "@someday")
    await say(stack, "sort the mail")

    _, inbox = await say(stack, "/inbox")
    assert inbox["text"] == "Inbox: not triaged yet: 1 task\n\n3. sort the mail"
    assert list(buttons(inbox)) == ["3 @next", "3 @someday", "3 Drop"]
    _, waiting = await say(stack, "/waiting")
    assert waiting["text"] == "Waiting on someone (@waiting): 1 task\n\n1. ask Bob for the keys"
    assert list(buttons(waiting)) == ["1 Done", "1 @next", "1 Assign"]
    _, someday = await say(stack, "/someday")
    assert someday["text"] == "Someday, maybe (@someday): 1 task\n\n2. learn the cello"
    _, shouted = await say(stack, "/SOMEDAY")  # Telegram commands match whatever their case
    assert shouted["text"] == someday["text"]
    _, nothing = await say(stack, "/next")
    assert nothing["text"] == "Nothing in @next. /inbox shows what waits for triage."

    moved, inbox = await tap_for_edit(stack, inbox, "3 @next")
    assert moved["text"] == "Task 3 → @next: sort the mail"
    assert inbox["text"].startswith("Inbox: not triaged yet: 1 task\n\n3. sort the mail\n✓ Task 3")
    assert buttons(inbox) == {}
    finished, waiting = await tap_for_edit(stack, waiting, "1 Done")
    assert finished["text"] == "Task 1 done: ask Bob for the keys"
    assert list(buttons(waiting)) == ["1 Undo"]
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
    _, second = await tap_for_edit(stack, first, "Next ›")
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
        await tap_for_edit(stack, receipt, "@reference")

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

    await tap_for_edit(stack, receipt, "@next")
    _, listed = await say(stack, "/next")
    _, question = await tap_for_reply(stack, listed, "1 Assign")
    assert question["text"] == "Who takes task 1?"
    assert list(buttons(question)) == ["demo"]
    answer, said = await tap_for_edit(stack, question, "demo")
    assert answer["text"] == "Task 1 is assigned to demo: write the report"
    assert said["text"].startswith("Who takes task 1?\n✓ Task 1 → demo, by ")
    assert buttons(said) == {}
    [row] = await task_rows(stack)
    assert (row.assignee, row.state) == ("demo", "@next")
    _, listed = await say(stack, "/next")
    assert "1. write the report  (→ demo)" in listed["text"]
