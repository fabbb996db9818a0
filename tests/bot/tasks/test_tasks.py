"""Tasks against SQLite and Postgres: capture once per message (and once per album, however
its parts arrive), edits followed while open, triage only out of the inbox, closing once, and
the views (lists by page, search, the weekly review, what the sweep asks about)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from bot.chat.outbox import Outbox
from bot.errors import TaskRefused
from bot.store.tables import notes, outbox, tasks
from bot.tasks.capture import Capture, Origin
from bot.tasks.notes import NoteKind, Notes
from bot.tasks.task import MAX_LABELS, Closed, State, parse_label
from bot.tasks.tasks import COUNT_AT_MOST, Tasks
from bot.tasks.triage import Triage
from tests.helpers.interactions import ALICE, CHAT

SELF = Origin("self")


def capture(message_id: int, text: str | None = None, **overrides) -> Capture:
    values = {
        "chat_id": CHAT,
        "message_id": message_id,
        "user_id": ALICE,
        "text": f"task from message {message_id}" if text is None else text,
        "origin": SELF,
    }
    values.update(overrides)
    return Capture(**values)


def photo(message_id: int, album: str = "A1", text: str = "") -> Capture:
    attachment = {"kind": "photo", "file_unique_id": f"u{message_id}", "message_id": message_id}
    return capture(message_id, text, attachments=(attachment,), album=album)


@pytest.fixture
def tasks_(store) -> Tasks:
    return Tasks(store)


async def row_count(store, table=tasks) -> int:
    async with store.read() as conn:
        return (await conn.execute(select(func.count()).select_from(table))).scalar_one()


async def age(store, task_id: int, days: int) -> None:
    """As if the task had last changed ``days`` ago."""
    past = datetime.now(UTC) - timedelta(days=days)
    async with store.write() as conn:
        await conn.execute(update(tasks).where(tasks.c.id == task_id).values(updated_at=past))


async def new_task(tasks_: Tasks, message_id: int, text: str | None = None) -> int:
    return (await tasks_.capture(capture(message_id, text))).task.id


# Capture


async def queued(store) -> list[tuple]:
    async with store.read() as conn:
        query = select(outbox.c.id, outbox.c.parts, outbox.c.reply_markup).order_by(outbox.c.id)
        return [tuple(row) for row in (await conn.execute(query)).all()]


async def test_a_capture_and_its_receipt_commit_together_or_not_at_all(store, tasks_):
    rows = Outbox(store)

    def receipt(captured):
        text = f"task {captured.task.id}, new: {captured.new}"
        markup = {"inline_keyboard": [[{"text": "Drop", "callback_data": "x"}]]}
        return rows.row_of(CHAT, text, key=f"reply:{text}", reply_markup=markup, reply_to=7)

    def broken(captured):
        raise RuntimeError("the receipt could not be made")

    with pytest.raises(RuntimeError):
        await tasks_.capture_then(capture(1, "Buy milk"), broken)
    assert await row_count(store) == 0 and await queued(store) == []  # no task without it
    first, first_receipt = await tasks_.capture_then(capture(1, "Buy milk"), receipt)
    again, again_receipt = await tasks_.capture_then(capture(1, "Buy milk"), receipt)
    assert first.new and not again.new and again.task.id == first.task.id
    markup = {"inline_keyboard": [[{"text": "Drop", "callback_data": "x"}]]}
    assert await queued(store) == [
        (first_receipt, [f"task {first.task.id}, new: True"], markup),
        (again_receipt, [f"task {first.task.id}, new: False"], markup),
    ]
    # The task as the capture returned it is the task as stored (on Postgres it is made
    # before the row is written, to make the receipt with its id).
    assert first.task == await tasks_.get(first.task.id)
    # A receipt whose key was queued before is not queued again.
    third, none = await tasks_.capture_then(capture(1, "Buy milk"), receipt)
    assert none is None and len(await queued(store)) == 2


async def test_a_capture_without_a_receipt_queues_nothing_and_ids_have_no_gaps(store, tasks_):
    ids = [(await tasks_.capture_then(capture(n, f"t{n}"), lambda _: None)) for n in (1, 2, 1, 3)]
    assert [(captured.task.id, receipt) for captured, receipt in ids] == [
        (1, None), (2, None), (1, None), (3, None)
    ]  # fmt: skip
    assert await queued(store) == []


async def test_the_same_message_twice_is_one_task(store, tasks_):
    first = await tasks_.capture(capture(1, "Buy milk\nsemi-skimmed"))
    again = await tasks_.capture(capture(1, "Buy milk\nsemi-skimmed"))
    assert first.new and not again.new and not again.joined
    assert again.task.id == first.task.id
    assert first.task.title == "Buy milk" and first.task.state is State.INBOX
    assert await row_count(store) == 1


async def test_a_forward_is_keyed_by_its_origin_not_by_the_message_that_carried_it(store, tasks_):
    at = datetime(2030, 1, 1, tzinfo=UTC)
    channel = Origin("channel", name="News", chat_id=-100, message_id=77, at=at)
    user = Origin("user", name="Bob", user_id=555, at=at)
    first = await tasks_.capture(capture(1, "Post", origin=channel))
    forwarded_again = await tasks_.capture(capture(2, "Post", origin=channel))
    from_bob = await tasks_.capture(capture(3, "Hello", origin=user))
    from_bob_again = await tasks_.capture(capture(4, "Hello", origin=user))
    from_bob_other = await tasks_.capture(capture(5, "Another thing", origin=user))
    assert forwarded_again.task.id == first.task.id and not forwarded_again.new
    assert from_bob_again.task.id == from_bob.task.id and not from_bob_again.new
    assert from_bob_other.new
    assert await row_count(store) == 3


async def test_the_parts_of_an_album_join_one_task_and_a_redelivered_part_is_not_doubled(
    store, tasks_
):
    first = await tasks_.capture(photo(10, text="Holiday photos"))
    second = await tasks_.capture(photo(11))
    third = await tasks_.capture(photo(12, text="the beach"))
    again = await tasks_.capture(photo(11))
    assert first.new and not first.joined
    assert second.joined and third.joined and again.joined
    assert not (second.new or third.new or again.new)
    task = await tasks_.get(first.task.id)
    assert [a["message_id"] for a in task.attachments] == [10, 11, 12]
    assert task.body == "Holiday photos\n\nthe beach"
    assert task.title == "Holiday photos"
    assert await row_count(store) == 1
    # the first part redelivered is not added either
    assert (await tasks_.capture(photo(10, text="Holiday photos"))).task.attachments == (
        task.attachments
    )
    # a second album is a second task
    assert (await tasks_.capture(photo(20, album="A2"))).new
    assert await row_count(store) == 2


async def test_a_text_part_of_an_album_is_remembered_once(tasks_):
    first = await tasks_.capture(photo(10))
    await tasks_.capture(capture(11, "a caption", album="A1"))
    await tasks_.capture(capture(11, "a caption", album="A1"))
    task = await tasks_.get(first.task.id)
    assert task.body.count("a caption") == 1
    assert [a["message_id"] for a in task.attachments] == [10, 11]


async def test_a_message_captured_again_uses_up_no_task_id(tasks_):
    first = await tasks_.capture(capture(1, "Buy milk"))
    assert not (await tasks_.capture(capture(1, "Buy milk"))).new
    second = await tasks_.capture(capture(2, "Buy bread"))
    assert second.new and second.task.id == first.task.id + 1


async def test_concurrent_captures_of_one_message_make_exactly_one_task(store, tasks_):
    results = await asyncio.gather(*(tasks_.capture(capture(1, "once")) for _ in range(10)))
    assert await row_count(store) == 1
    assert len({result.task.id for result in results}) == 1
    assert sum(result.new for result in results) == 1


async def test_concurrent_parts_of_one_album_make_one_task_holding_every_part(store, tasks_):
    results = await asyncio.gather(*(tasks_.capture(photo(100 + n)) for n in range(6)))
    assert await row_count(store) == 1
    assert sum(result.new for result in results) == 1
    task = await tasks_.get(results[0].task.id)
    assert sorted(a["message_id"] for a in task.attachments) == list(range(100, 106))


async def test_a_message_without_text_is_titled_by_what_it_holds(tasks_):
    document = {"kind": "document", "file_name": "invoice.pdf", "file_unique_id": "d1"}
    origin = Origin("user", name="Bob", user_id=555)
    captured = await tasks_.capture(Capture(CHAT, 1, ALICE, "", origin, attachments=(document,)))
    assert captured.task.title == "Document invoice.pdf from Bob"
    assert (await tasks_.find("invoice")).total == 1
    assert (await tasks_.find("bob")).total == 1


# Edits


async def test_an_open_task_follows_an_edit_of_its_message(tasks_):
    task_id = await new_task(tasks_, 1, "Call the plumber")
    edit = await tasks_.follow_edit(CHAT, 1, "Call the electrician\ntomorrow")
    assert edit.applied and edit.why_not is None
    edited = edit.task
    assert edited.id == task_id
    assert edited.title == "Call the electrician" and edited.body.endswith("tomorrow")
    assert (await tasks_.find("electrician")).total == 1
    assert (await tasks_.find("plumber")).total == 0


async def test_a_closed_task_does_not_follow_an_edit(tasks_):
    task_id = await new_task(tasks_, 1, "Call the plumber")
    await tasks_.close(task_id, Closed.DONE)
    edit = await tasks_.follow_edit(CHAT, 1, "Something else")
    assert not edit.applied and edit.why_not == "it is closed (inbox, done)"
    unchanged = edit.task
    assert unchanged.id == task_id and unchanged.title == "Call the plumber"
    assert (await tasks_.get(task_id)).body == "Call the plumber"


async def test_an_edit_of_a_message_that_captured_nothing_is_none(tasks_):
    await new_task(tasks_, 1)
    assert await tasks_.follow_edit(CHAT, 2, "new text") is None
    assert await tasks_.follow_edit(CHAT + 1, 1, "new text") is None


async def test_an_edit_to_no_text_keeps_the_title(tasks_):
    task_id = await new_task(tasks_, 1, "Keep me")
    edited = (await tasks_.follow_edit(CHAT, 1, "   ")).task
    assert edited.id == task_id and edited.title == "Keep me"


# Changes


async def test_triage_takes_a_task_out_of_the_inbox_once(tasks_):
    task_id = await new_task(tasks_, 1)
    moved = await tasks_.triage(task_id, Triage(State.NEXT, "rule work", ("work",), "scribe"))
    assert moved.state is State.NEXT and moved.triaged_by == "rule work"
    assert moved.labels == ("work",) and moved.assignee == "scribe" and moved.is_open
    with pytest.raises(TaskRefused) as refused:
        await tasks_.triage(task_id, Triage(State.SOMEDAY, "owner Alice"))
    assert str(refused.value) == f"Task {task_id} was already triaged to @next (rule work)."
    assert (await tasks_.get(task_id)).state is State.NEXT


async def test_a_triage_never_leaves_a_task_in_the_inbox():
    with pytest.raises(ValueError, match="leave the inbox"):
        Triage(State.INBOX, "owner Alice")
    with pytest.raises(ValueError):
        Triage("@next", "owner Alice")  # text is not a state label


async def test_move_keeps_who_triaged_and_adds_labels_without_doubling(tasks_):
    task_id = await new_task(tasks_, 1)
    await tasks_.triage(task_id, Triage(State.NEXT, "owner Alice", ("home",)))
    moved = await tasks_.move(task_id, State.WAITING, "owner Bob", labels=("home", "shop"))
    assert moved.state is State.WAITING and moved.triaged_by == "owner Alice"
    assert moved.labels == ("home", "shop")


async def test_filing_as_reference_writes_a_note_and_closes_the_task(store, tasks_):
    origin = Origin("channel", name="News", chat_id=-100, message_id=9, link="https://t.me/n/9")
    task_id = (
        await tasks_.capture(capture(1, "Tax rules\nthe 2031 edition", origin=origin))
    ).task.id
    filed = await tasks_.move(task_id, State.REFERENCE, "owner Alice")
    assert filed.state is State.REFERENCE and filed.closed_as is Closed.FILED
    assert not filed.is_open
    found, total = await Notes(store).search("tax 2031")
    assert total == 1
    [note] = found
    assert note.kind is NoteKind.REFERENCE and note.task_id == task_id
    # The body once (its first line is the title), then the link.
    assert note.text == "Tax rules\nthe 2031 edition\n\nhttps://t.me/n/9"
    with pytest.raises(TaskRefused, match="already closed"):
        await tasks_.move(task_id, State.NEXT, "owner Alice")
    assert await row_count(store, notes) == 1


async def test_closing_twice_is_refused(tasks_):
    task_id = await new_task(tasks_, 1)
    closed = await tasks_.close(task_id, Closed.DONE)
    assert closed.closed_as is Closed.DONE and closed.state is State.INBOX
    with pytest.raises(TaskRefused) as refused:
        await tasks_.close(task_id, Closed.DROPPED)
    assert str(refused.value) == f"Task {task_id} is already closed (inbox, done)."
    assert (await tasks_.get(task_id)).closed_as is Closed.DONE


async def test_changes_to_a_task_that_does_not_exist_are_refused(tasks_):
    for change in (
        tasks_.close(99, Closed.DONE),
        tasks_.move(99, State.NEXT, "owner Alice"),
        tasks_.relabel(99, ["a"], []),
        tasks_.assign(99, "scribe"),
    ):
        with pytest.raises(TaskRefused, match="There is no task 99."):
            await change


async def test_relabel_adds_removes_and_stops_at_the_limit(tasks_):
    task_id = await new_task(tasks_, 1)
    task = await tasks_.relabel(task_id, ["home", "shop", "home"], [])
    assert task.labels == ("home", "shop")
    task = await tasks_.relabel(task_id, ["work"], ["home"])
    assert task.labels == ("shop", "work")
    full = [f"l{n}" for n in range(MAX_LABELS - 2)]
    assert len((await tasks_.relabel(task_id, full, [])).labels) == MAX_LABELS
    # A rule's labels count against the same limit, and a refused triage changes nothing.
    other = await new_task(tasks_, 2)
    await tasks_.relabel(other, full, [])
    crowded = Triage(State.NEXT, "rule many", ("x1", "x2", "x3"))
    with pytest.raises(TaskRefused, match=f"at most {MAX_LABELS} labels"):
        await tasks_.triage(other, crowded)
    assert (await tasks_.get(other)).state is State.INBOX
    with pytest.raises(TaskRefused, match=f"at most {MAX_LABELS} labels"):
        await tasks_.relabel(task_id, ["one-too-many"], [])
    # swapping one for another at the limit is fine
    assert "swap" in (await tasks_.relabel(task_id, ["swap"], ["l0"])).labels
    await tasks_.close(task_id, Closed.DONE)
    with pytest.raises(TaskRefused, match="already closed"):
        await tasks_.relabel(task_id, ["late"], [])


def test_labels_are_kept_folded_and_odd_ones_are_refused():
    assert parse_label("#Home") == "home"
    assert parse_label(" deep-focus ") == "deep-focus"
    assert parse_label("café_2") == "café_2"
    for odd in ("", "#", "-dash", "_under", "two words", "a" * 33, "semi;colon"):
        with pytest.raises(TaskRefused, match="is not a label"):
            parse_label(odd)


async def test_assign_and_unassign(tasks_):
    task_id = await new_task(tasks_, 1)
    assert (await tasks_.assign(task_id, "scribe")).assignee == "scribe"
    assert (await tasks_.assign(task_id, None)).assignee is None


# Views


async def test_in_state_pages_open_tasks_oldest_first_with_totals(tasks_):
    ids = [await new_task(tasks_, n) for n in range(1, 8)]
    for task_id in ids[:5]:
        await tasks_.triage(task_id, Triage(State.NEXT, "owner Alice"))
    await tasks_.close(ids[4], Closed.DONE)  # closed: in no list
    first = await tasks_.in_state(State.NEXT, size=3)
    second = await tasks_.in_state(State.NEXT, page=1, size=3)
    assert [t.id for t in first.tasks] == ids[:3] and first.has_next
    assert [t.id for t in second.tasks] == [ids[3]] and not second.has_next
    assert first.total == second.total == 4 and first.pages == 2
    inbox = await tasks_.in_state(State.INBOX)
    assert [t.id for t in inbox.tasks] == ids[5:] and inbox.total == 2
    empty = await tasks_.in_state(State.WAITING)
    assert empty.tasks == [] and empty.total == 0 and empty.pages == 1
    beyond = await tasks_.in_state(State.NEXT, page=5, size=3)
    assert beyond.tasks == [] and beyond.total == 4


async def test_find_covers_open_and_closed_tasks_newest_first(tasks_):
    open_id = await new_task(tasks_, 1, "Pay the invoice for March")
    done_id = await new_task(tasks_, 2, "Pay the invoice for April")
    await new_task(tasks_, 3, "Water the plants")
    await tasks_.close(done_id, Closed.DONE)
    found = await tasks_.find("invoice")
    assert [t.id for t in found.tasks] == [done_id, open_id] and found.total == 2
    assert [t.id for t in (await tasks_.find("pay april")).tasks] == [done_id]
    assert (await tasks_.find("...")).total == 0
    paged = await tasks_.find("pay", page=1, size=1)
    assert [t.id for t in paged.tasks] == [open_id] and paged.total == 2


async def test_for_review_lists_someday_and_waiting_untouched_for_a_week(store, tasks_):
    someday = await new_task(tasks_, 1)
    fresh_waiting = await new_task(tasks_, 2)
    stale_waiting = await new_task(tasks_, 3)
    stale_closed = await new_task(tasks_, 4)
    stale_next = await new_task(tasks_, 5)
    await tasks_.triage(someday, Triage(State.SOMEDAY, "owner Alice"))
    for task_id in (fresh_waiting, stale_waiting, stale_closed):
        await tasks_.triage(task_id, Triage(State.WAITING, "owner Alice"))
    await tasks_.triage(stale_next, Triage(State.NEXT, "owner Alice"))
    await tasks_.close(stale_closed, Closed.DONE)
    for task_id in (stale_waiting, stale_closed, stale_next):
        await age(store, task_id, days=8)
    await age(store, fresh_waiting, days=6)
    listed_someday, listed_waiting = await tasks_.for_review()
    assert [t.id for t in listed_someday.tasks] == [someday] and listed_someday.total == 1
    assert [t.id for t in listed_waiting.tasks] == [stale_waiting] and listed_waiting.total == 1


async def test_untriaged_leaves_out_tasks_asked_about_triaged_or_closed(store, tasks_):
    asked, triaged, closed, waiting = [await new_task(tasks_, n) for n in range(1, 5)]
    await tasks_.triage(triaged, Triage(State.NEXT, "owner Alice"))
    await tasks_.close(closed, Closed.DROPPED)
    async with store.write() as conn:
        assert await tasks_.ask_about(conn, asked, interaction_id=1)
    async with store.write() as conn:
        assert not await tasks_.ask_about(conn, asked, interaction_id=2)  # asked once
        assert not await tasks_.ask_about(conn, triaged, interaction_id=3)  # out of the inbox
    assert await tasks_.untriaged() == [waiting]
    assert (await tasks_.get(asked)).triage_interaction_id == 1


async def test_capturing_chats_are_each_chat_once(tasks_):
    await new_task(tasks_, 1)
    await new_task(tasks_, 2)
    await tasks_.capture(capture(1, chat_id=CHAT + 1))
    assert await tasks_.capturing_chats() == [CHAT, CHAT + 1]


async def test_of_concurrent_triages_of_one_task_exactly_one_applies(tasks_):
    task_id = await new_task(tasks_, 1)
    states = [State.NEXT, State.SOMEDAY, State.WAITING, State.REFERENCE] * 3
    results = await asyncio.gather(
        *(tasks_.triage(task_id, Triage(state, f"owner {n}")) for n, state in enumerate(states)),
        return_exceptions=True,
    )
    applied = [result for result in results if not isinstance(result, Exception)]
    refused = [result for result in results if isinstance(result, TaskRefused)]
    assert len(applied) == 1 and len(refused) == len(states) - 1
    task = await tasks_.get(task_id)
    assert task.state is applied[0].state and task.triaged_by == applied[0].triaged_by


async def test_concurrent_relabels_keep_every_label(tasks_):
    task_id = await new_task(tasks_, 1)
    await asyncio.gather(*(tasks_.relabel(task_id, [f"l{n}"], []) for n in range(MAX_LABELS)))
    labels = (await tasks_.get(task_id)).labels
    assert sorted(labels) == sorted(f"l{n}" for n in range(MAX_LABELS))


async def test_a_long_list_is_counted_up_to_a_bound_and_pages_past_it(store, tasks_):
    moment = datetime.now(UTC)
    row = {
        "title": "t",
        "body": "t",
        "search_text": "t",
        "state": State.SOMEDAY,
        "labels": [],
        "attachments": [],
        "origin_kind": "self",
        "created_at": moment,
        "updated_at": moment,
    }
    over = COUNT_AT_MOST + 50
    async with store.write() as conn:
        await conn.execute(tasks.insert(), [dict(row, capture_key=f"k{n}") for n in range(over)])
    first = await tasks_.in_state(State.SOMEDAY, size=20)
    assert not first.counted_all and first.shown_total() == f"{COUNT_AT_MOST}+"
    assert first.has_next and len(first.tasks) == 20
    # Deep pages still know whether another follows: the count reaches past the page shown.
    last = await tasks_.in_state(State.SOMEDAY, page=(over - 1) // 20, size=20)
    assert last.counted_all and last.total == over and not last.has_next
    assert len(last.tasks) == over % 20 or len(last.tasks) == 20
    small = await tasks_.in_state(State.NEXT, size=20)
    assert small.counted_all and small.shown_total() == "0"
