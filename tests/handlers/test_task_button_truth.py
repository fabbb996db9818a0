"""Task buttons that tell the truth (issue 19), through the real bot on SQLite and Postgres: a
tap on a receipt whose task moved since changes nothing and asks again, Drop there asks before
it drops, a Drop can be undone, and a button signed before buttons carried the state shown
does not drop at once."""

from __future__ import annotations

from tests.helpers.stack import OWNER_CHAT, eventually
from tests.helpers.task_chat import buttons, say, tap, tap_for_edit, task_rows


async def test_drop_on_a_receipt_whose_task_moved_asks_again_then_keeps_or_drops(stack):
    _, receipt = await say(stack, "book the flights")
    _, inbox = await say(stack, "/inbox")
    await tap_for_edit(stack, inbox, "1 @next")  # moved elsewhere; the receipt still shows Drop

    answer, receipt = await tap_for_edit(stack, receipt, "Drop")
    assert answer["show_alert"]
    assert answer["text"] == "Task 1 is @next now; nothing was done. Drop it anyway?"
    [row] = await task_rows(stack)
    assert (row.state, row.closed_at) == ("@next", None)  # nothing dropped
    assert receipt["text"] == (
        "Captured as task 1: book the flights\n⚠ Task 1 is @next now. Drop it anyway?"
    )
    assert list(buttons(receipt)) == ["Drop", "Keep"]

    answer, kept = await tap_for_edit(stack, receipt, "Keep")
    assert answer["text"] == "Task 1 stays @next."
    assert kept["text"].startswith("Captured as task 1: book the flights\n✓ Task 1 kept, by ")
    assert buttons(kept) == {}
    [row] = await task_rows(stack)
    assert (row.state, row.closed_at) == ("@next", None)

    answer, dropped = await tap_for_edit(stack, receipt, "Drop")  # the asked-again Drop
    assert answer["text"] == "Task 1 dropped: book the flights"
    [row] = await task_rows(stack)
    assert (row.state, row.closed_as) == ("@next", "dropped")


async def test_a_move_on_a_stale_receipt_changes_nothing_and_shows_the_state_now(stack):
    _, receipt = await say(stack, "learn the cello")
    await say(stack, "/done 1")

    answer = await tap(stack, receipt, "@someday")
    assert answer["text"] == "Task 1 is already closed (inbox, done)." and answer["show_alert"]

    async def edited():
        [held] = [m for m in await stack.bot_messages() if m["message_id"] == receipt["message_id"]]
        return held if held["text"] != receipt["text"] else None

    held = await eventually(edited)
    assert held["text"] == "Captured as task 1: learn the cello\n⚠ Task 1 is closed (inbox, done)."
    assert buttons(held) == {}
    [row] = await task_rows(stack)
    assert (row.state, row.closed_as) == ("inbox", "done")


async def test_a_dropped_task_is_brought_back_by_undo(stack):
    _, receipt = await say(stack, "old newsletter")
    _, dropped = await tap_for_edit(stack, receipt, "Drop")
    assert list(buttons(dropped)) == ["Undo"]

    answer, back = await tap_for_edit(stack, dropped, "Undo")
    assert answer["text"] == "Task 1 is back in inbox: old newsletter"
    assert back["text"].startswith("Captured as task 1: old newsletter\n↩ Task 1 back, by ")
    assert "dropped" not in back["text"]  # the earlier line about this task is replaced
    assert list(buttons(back)) == ["@next", "@someday", "@waiting", "@reference", "Drop"]
    [row] = await task_rows(stack)
    assert (row.state, row.closed_at, row.closed_as) == ("inbox", None, None)

    late = await tap(stack, dropped, "Undo")  # the Undo again, from before: it is open now
    assert late["text"] == "Task 1 is inbox now; nothing was done." and late["show_alert"]
    [row] = await task_rows(stack)
    assert row.closed_at is None


async def test_a_drop_signed_before_buttons_carried_the_state_asks_first(stack):
    _, receipt = await say(stack, "pay the rent")
    old = stack.services.signer.sign("task", "1", "drop")  # as receipts were signed before
    tapped = await stack.emulator.tap(OWNER_CHAT, receipt["message_id"], old)
    answer = await eventually(lambda: stack.emulator.callback_answer(tapped["callback_query_id"]))
    assert answer["text"] == "Task 1 is inbox now; nothing was done. Drop it anyway?"
    [row] = await task_rows(stack)
    assert row.closed_at is None


async def test_every_task_button_fits_a_phone(stack):
    _, receipt = await say(stack, "a task with a long enough title to need some room")
    for n in range(3):
        await say(stack, f"task {n}")
    _, inbox = await say(stack, "/inbox")
    _, shown = await say(stack, "/task 1")
    for message in (receipt, inbox, shown):
        rows = message["reply_markup"]["inline_keyboard"]
        assert all(len(row) <= 3 for row in rows)
        assert all(len(b["text"]) <= 14 and "…" not in b["text"] for row in rows for b in row)
    # The same words on the receipt and in /inbox.
    assert {"@someday", "Drop"} <= set(buttons(receipt))
    assert {"4 @someday", "4 Drop"} <= set(buttons(inbox))
