"""Tasks: everything captured lands here, and one question, "what can I do now?", has one answer.

A task always carries exactly one state label (``inbox``, ``@next``, ``@someday``, ``@waiting``,
``@reference``), free context labels and at most one assignee. Capturing is idempotent on a
capture key derived from where the message came from (bot/tasks/capture.py), so forwarding the same
message twice makes one task. Leaving the inbox always sets a state label: see bot/tasks/triage.py.

Closing a task (done, dropped, or filed as reference) keeps its state label and its row.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import String, bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.chat.outbox_statements import insert_unless_keyed
from bot.errors import TaskChanged, TaskRefused
from bot.store import search
from bot.store.database import Store
from bot.store.tables import notes, tasks
from bot.tasks.capture import Capture
from bot.tasks.capture_statements import (
    CAPTURED_COLUMNS,
    PG_INSERT_TASK,
    PG_INSERT_TASK_AND_RECEIPT,
    PG_NEW_TASK_ID,
    RECEIPT_COLUMNS,
    driver_value,
    new_task,
)
from bot.tasks.notes import NoteKind, add_note
from bot.tasks.task import MAX_LABELS, Captured, Closed, Edit, Page, State, Task
from bot.timeutil import now

if TYPE_CHECKING:
    from bot.tasks.triage import Triage

COUNT_AT_MOST = 1000  # a list's total is counted up to here (and past the page shown)


class Tasks:
    def __init__(self, store: Store) -> None:
        self.store = store

    # Capture

    async def capture(self, capture: Capture) -> Captured:
        """Make ``capture`` a task, once: a message seen before returns its task; one more
        message of an album adds itself to the album's task."""
        captured, _ = await self.capture_then(capture, _no_receipt)
        return captured

    async def capture_then(
        self, capture: Capture, receipt: Callable[[Captured], dict[str, Any] | None]
    ) -> tuple[Captured, int | None]:
        """``capture``, and the outbox row ``receipt`` makes of what was captured (Outbox.row_of;
        None for none) queued with it: one commit for both. Returns what was captured and the
        row's id (None when none was queued, or its key was queued before)."""
        values = _captured_values(capture, now())
        if not self.store.is_sqlite:
            fast = await self._capture_new_on_postgres(values, receipt)
            if fast is not None:
                return fast
        key = {"capture_key": capture.key}
        try:
            async with self.store.write() as conn:
                # Look first: a failed insert would use up an id on Postgres (task 3 after 1).
                row = (await conn.execute(CAPTURED_AS, key)).first()
                if row is not None:
                    captured = await self._seen_before(conn, Task.from_row(row), capture)
                else:
                    row = (await conn.execute(INSERT_TASK, values)).one()
                    captured = Captured(Task.from_row(row), new=True)
                return captured, await _queue_within(conn, receipt(captured))
        except IntegrityError:
            pass  # a concurrent capture of the same message (or album) won the insert
        async with self.store.write() as conn:
            row = (await conn.execute(CAPTURED_AS, key)).one()
            captured = await self._seen_before(conn, Task.from_row(row), capture)
            return captured, await _queue_within(conn, receipt(captured))

    async def _capture_new_on_postgres(
        self, values: dict[str, Any], receipt: Callable[[Captured], dict[str, Any] | None]
    ) -> tuple[Captured, int | None] | None:
        """Postgres, a message not captured before (nearly every one): two statements through
        the driver (Store.driver), each its own transaction, instead of BEGIN, two statements
        and COMMIT through SQLAlchemy. The first finds the key taken, or draws the new task's
        id; knowing the id, the receipt is made, and the second inserts the task and its receipt
        together. None when the key was taken (before, or by a capture racing this one): the
        general way then says what it joins. A race lost leaves the id it drew unused."""
        async with self.store.driver() as pg:
            task_id = await pg.fetchval(PG_NEW_TASK_ID, values["capture_key"])
            if task_id is None:
                return None
            captured = Captured(new_task(task_id, values), new=True)
            row = receipt(captured)
            task_values = [task_id, *(driver_value(values[name]) for name in CAPTURED_COLUMNS)]
            if row is None:
                inserted = await pg.fetchrow(PG_INSERT_TASK, *task_values)
                return (captured, None) if inserted is not None else None
            queued = [driver_value(row[name]) for name in RECEIPT_COLUMNS]
            inserted = await pg.fetchrow(PG_INSERT_TASK_AND_RECEIPT, *task_values, *queued)
        if inserted is None:
            return None
        return captured, inserted["receipt_id"]

    async def create(
        self,
        title: str,
        body: str,
        *,
        by_agent: str,
        state: State = State.INBOX,
        labels: tuple[str, ...] = (),
    ) -> Task:
        """A task an agent writes down (not a captured message): its origin is the agent."""
        moment = now()
        title = Capture.title_of(title) or Capture.title_of(body) or "untitled"
        values = {
            "title": title,
            "body": body,
            "search_text": search_text_of(title, body, (), by_agent),
            "state": state,
            "labels": _merged_labels(None, labels, ()),
            "attachments": [],
            "origin_kind": "agent",
            "origin_name": by_agent,
            "created_at": moment,
            "updated_at": moment,
        }
        if state is not State.INBOX:
            values.update(triaged_at=moment, triaged_by=f"agent {by_agent}"[:120])
        async with self.store.write() as conn:
            row = (await conn.execute(insert(tasks).values(**values).returning(tasks))).one()
        return Task.from_row(row)

    async def _seen_before(self, conn: AsyncConnection, task: Task, capture: Capture) -> Captured:
        if capture.album is None or capture.message_id == task.message_id:
            return Captured(task, new=False)
        if any(part.get("message_id") == capture.message_id for part in task.attachments):
            return Captured(task, new=False, joined=True)
        return Captured(await self._join_album(conn, task, capture), new=False, joined=True)

    async def _join_album(self, conn: AsyncConnection, task: Task, capture: Capture) -> Task:
        body = "\n\n".join(part for part in (task.body, capture.text) if part)
        attachments = [*task.attachments, *capture.attachments]
        if not capture.attachments:  # a text part: remember it was seen
            attachments.append({"kind": "text", "message_id": capture.message_id})
        values = {"body": body, "attachments": attachments, "updated_at": now()}
        values["search_text"] = search_text_of(task.title, body, attachments, task.origin_name)
        return await self._update(conn, task.id, values)

    async def follow_edit(
        self, chat_id: int, message_id: int, text: str, *, album: str | None = None
    ) -> Edit | None:
        """A message that captured a task was edited: an open task follows it. None when that
        message captured nothing; otherwise the task and whether it followed, or why not."""
        async with self.store.write() as conn:
            if album is not None:
                key = f"album:{chat_id}:{album}"
                row = (await conn.execute(select(tasks).where(tasks.c.capture_key == key))).first()
                if row is None:
                    return None
                return Edit(Task.from_row(row), applied=False, why_not="it holds a whole album")
            where = (tasks.c.chat_id == chat_id) & (tasks.c.message_id == message_id)
            row = (await conn.execute(_locked(where))).first()
            if row is None:
                return None
            task = Task.from_row(row)
            if not task.is_open:
                return Edit(task, applied=False, why_not=f"it is closed ({task.describe_state()})")
            if text == task.body:
                return Edit(task, applied=True)
            title = Capture.title_of(text) or task.title
            values = {"title": title, "body": text, "updated_at": now()}
            values["search_text"] = search_text_of(title, text, task.attachments, task.origin_name)
            return Edit(await self._update(conn, task.id, values), applied=True)

    # Changes

    async def triage(self, task_id: int, verdict: Triage) -> Task:
        """Take an inbox task out of the inbox as ``verdict`` says. A task already out of it is
        refused, so two answers to one question cannot both apply."""
        return await self.move(
            task_id,
            verdict.state,
            verdict.by,
            from_inbox_only=True,
            labels=verdict.labels,
            assignee=verdict.assignee,
        )

    async def move(
        self,
        task_id: int,
        state: State,
        by: str,
        *,
        from_inbox_only: bool = False,
        labels: tuple[str, ...] = (),
        assignee: str | None = None,
        only_from: State | None = None,
    ) -> Task:
        """Give an open task a new state label (and add labels, set an assignee);
        ``@reference`` also files its content as a note and closes the task. With
        ``only_from``, a task in another state is refused (TaskChanged): a button shown for
        that state no longer applies."""
        async with self.store.write() as conn:
            task = await self._open_task(conn, task_id, only_from)
            if from_inbox_only and task.state is not State.INBOX:
                raise TaskRefused(
                    f"Task {task_id} was already triaged to {task.state} ({task.triaged_by})."
                )
            moment = now()
            values: dict[str, Any] = {"state": state, "updated_at": moment}
            if task.state is State.INBOX:
                values.update(triaged_at=moment, triaged_by=by[:120])
            if labels:
                values["labels"] = _merged_labels(task, labels, ())
            if assignee is not None:
                values["assignee"] = assignee
            if state is State.REFERENCE:
                values.update(closed_at=moment, closed_as=Closed.FILED)
                await add_note(conn, NoteKind.REFERENCE, _note_text(task), task_id=task.id)
            return await self._update(conn, task_id, values)

    async def close(
        self, task_id: int, closed_as: Closed, *, only_from: State | None = None
    ) -> Task:
        async with self.store.write() as conn:
            await self._open_task(conn, task_id, only_from)
            moment = now()
            values = {"closed_at": moment, "closed_as": closed_as, "updated_at": moment}
            return await self._update(conn, task_id, values)

    async def reopen(self, task_id: int, state: State, by: str) -> Task:
        """Undo a close (done or dropped): the task is open again, with ``state``. A task
        open already, or filed as @reference, is refused."""
        async with self.store.write() as conn:
            row = (await conn.execute(_locked(tasks.c.id == task_id))).first()
            if row is None:
                raise TaskRefused(f"There is no task {task_id}.")
            task = Task.from_row(row)
            if task.closed_as not in (Closed.DONE, Closed.DROPPED):
                raise TaskChanged(f"Task {task_id} is {_shown_state(task)} now.")
            values = {"closed_at": None, "closed_as": None, "state": state, "updated_at": now()}
            if state is State.INBOX:
                values.update(triaged_at=None, triaged_by=None)
            elif task.state is State.INBOX:
                values.update(triaged_at=now(), triaged_by=by[:120])
            return await self._update(conn, task_id, values)

    async def relabel(self, task_id: int, add: list[str], remove: list[str]) -> Task:
        async with self.store.write() as conn:
            task = await self._open_task(conn, task_id)
            labels = _merged_labels(task, add, remove)
            return await self._update(conn, task_id, {"labels": labels, "updated_at": now()})

    async def assign(self, task_id: int, agent: str | None) -> Task:
        async with self.store.write() as conn:
            await self._open_task(conn, task_id)
            return await self._update(conn, task_id, {"assignee": agent, "updated_at": now()})

    async def comment(self, task_id: int, text: str, *, agent: str | None = None) -> int:
        """Say something about a task (a run's result, why it was parked); kept as a note."""
        async with self.store.write() as conn:
            return await add_note(conn, NoteKind.COMMENT, text, agent=agent, task_id=task_id)

    async def comments(self, task_id: int, *, limit: int = 5) -> list[str]:
        """The task's latest comments, oldest first."""
        query = (
            select(notes.c.text)
            .where(notes.c.task_id == task_id, notes.c.kind == NoteKind.COMMENT)
            .order_by(notes.c.id.desc())
            .limit(limit)
        )
        async with self.store.read() as conn:
            return list(reversed((await conn.execute(query)).scalars().all()))

    async def ask_about(self, conn: AsyncConnection, task_id: int, interaction_id: int) -> bool:
        """Record the card asking where an inbox task goes; False when one was asked already
        or the task left the inbox meanwhile (the caller's transaction then rolls back)."""
        marked = await conn.execute(
            update(tasks)
            .where(
                tasks.c.id == task_id,
                tasks.c.state == State.INBOX,
                tasks.c.closed_at.is_(None),
                tasks.c.triage_interaction_id.is_(None),
            )
            .values(triage_interaction_id=interaction_id)
        )
        return marked.rowcount == 1

    async def _open_task(
        self, conn: AsyncConnection, task_id: int, only_from: State | None = None
    ) -> Task:
        row = (await conn.execute(_locked(tasks.c.id == task_id))).first()
        if row is None:
            raise TaskRefused(f"There is no task {task_id}.")
        task = Task.from_row(row)
        if not task.is_open:
            error = TaskRefused if only_from is None else TaskChanged
            raise error(f"Task {task_id} is already closed ({task.describe_state()}).")
        if only_from is not None and task.state is not only_from:
            raise TaskChanged(f"Task {task_id} is {task.state} now.")
        return task

    @staticmethod
    async def _update(conn: AsyncConnection, task_id: int, values: dict[str, Any]) -> Task:
        row = (
            await conn.execute(
                update(tasks).where(tasks.c.id == task_id).values(**values).returning(tasks)
            )
        ).one()
        return Task.from_row(row)

    # Views

    async def get(self, task_id: int) -> Task | None:
        async with self.store.read() as conn:
            row = (await conn.execute(select(tasks).where(tasks.c.id == task_id))).first()
        return Task.from_row(row) if row else None

    async def in_state(self, state: State, *, page: int = 0, size: int = 20) -> Page:
        """Open tasks with this state label, oldest first."""
        condition = (tasks.c.state == state) & tasks.c.closed_at.is_(None)
        return await self._page(condition, tasks.c.id, page, size)

    async def find(self, query: str, *, page: int = 0, size: int = 10) -> Page:
        """Every task, open or closed, holding every word of ``query``; newest first."""
        words = search.words(query)
        if not words:
            return Page([], 0, page, size)
        condition = search.matches(tasks, words, sqlite=self.store.is_sqlite)
        return await self._page(condition, tasks.c.id.desc(), page, size)

    async def _page(self, condition, order, page: int, size: int) -> Page:
        # Counting stops a little past this page: 30,000 open tasks are "1000+", not a scan of
        # 30,000 index entries on every /next.
        cap = max(COUNT_AT_MOST, (page + 1) * size + 1)
        counted = select(tasks.c.id).where(condition).limit(cap).subquery()
        async with self.store.read() as conn:
            total = (await conn.execute(select(func.count()).select_from(counted))).scalar_one()
            rows = await conn.execute(
                select(tasks).where(condition).order_by(order).limit(size).offset(page * size)
            )
            found = [Task.from_row(row) for row in rows.all()]
        return Page(found, total, page, size, counted_all=total < cap)

    async def untriaged(self, *, limit: int = 100) -> list[int]:
        """Open inbox tasks nobody has been asked about yet, oldest first."""
        query = (
            select(tasks.c.id)
            .where(
                tasks.c.state == State.INBOX,
                tasks.c.closed_at.is_(None),
                tasks.c.triage_interaction_id.is_(None),
            )
            .order_by(tasks.c.id)
            .limit(limit)
        )
        async with self.store.read() as conn:
            return list((await conn.execute(query)).scalars())

    async def for_review(self, *, waiting_for: timedelta = timedelta(days=7), limit: int = 30):
        """What a weekly review shows: open ``@someday`` tasks, and ``@waiting`` tasks untouched
        for longer than ``waiting_for``; each oldest first, with its total count."""
        someday = await self.in_state(State.SOMEDAY, size=limit)
        stale = (
            (tasks.c.state == State.WAITING)
            & tasks.c.closed_at.is_(None)
            & (tasks.c.updated_at < now() - waiting_for)
        )
        waiting = await self._page(stale, tasks.c.id, 0, limit)
        return someday, waiting

    async def capturing_chats(self) -> list[int]:
        """The chats tasks were captured in: the owners' chats a review goes to."""
        query = select(tasks.c.chat_id).where(tasks.c.chat_id.is_not(None)).distinct()
        async with self.store.read() as conn:
            return sorted((await conn.execute(query)).scalars())


def _merged_labels(task: Task | None, add, remove) -> list[str]:
    """The task's labels without ``remove`` and with ``add`` (each once, in order)."""
    labels = [label for label in (task.labels if task else ()) if label not in remove]
    labels += [label for label in dict.fromkeys(add) if label not in labels]
    if len(labels) > MAX_LABELS:
        raise TaskRefused(f"A task has at most {MAX_LABELS} labels.")
    return labels


def search_text_of(title: str, body: str, attachments, origin_name: str | None) -> str:
    """What search finds a task by: its title, text, file names and links, and who sent it."""
    names = [a.get("file_name") or a.get("url") or "" for a in attachments]
    return search.search_text("\n".join([title, body, *names, origin_name or ""]))


def _locked(condition):
    """The task rows a change reads before it writes, locked until the transaction ends, so
    Postgres cannot interleave two changes (two triages of one task both applying, album parts
    overwriting each other). SQLite needs no lock: a write transaction there holds the whole
    database, and SQLAlchemy leaves FOR UPDATE out."""
    return select(tasks).where(condition).with_for_update()


# Capture's statements, built once: every message the bot is sent runs them, with the file's
# write lock held, and a statement built anew costs more to build than to run.
CAPTURED_AS = _locked(tasks.c.capture_key == bindparam("capture_key", type_=String))
INSERT_TASK = insert(tasks).returning(tasks)


def _no_receipt(_captured: Captured) -> None:
    return None


def _captured_values(capture: Capture, moment: datetime) -> dict[str, Any]:
    """A captured message's task row, but for its id."""
    return {
        "capture_key": capture.key,
        "title": capture.title(),
        "body": capture.text,
        "search_text": search_text_of(
            capture.title(), capture.text, capture.attachments, capture.origin.name
        ),
        "state": State.INBOX,
        "labels": [],
        "attachments": list(capture.attachments),
        "origin_kind": capture.origin.kind,
        "origin_name": capture.origin.name,
        "origin_user_id": capture.origin.user_id,
        "origin_chat_id": capture.origin.chat_id,
        "origin_message_id": capture.origin.message_id,
        "origin_at": capture.origin.at,
        "origin_link": capture.origin.link,
        "chat_id": capture.chat_id,
        "message_id": capture.message_id,
        "captured_by": capture.user_id,
        "assignee": capture.assignee,
        "created_at": moment,
        "updated_at": moment,
    }


async def _queue_within(conn: AsyncConnection, row: dict[str, Any] | None) -> int | None:
    if row is None:
        return None
    statement = insert_unless_keyed(conn.dialect.name)
    return (await conn.execute(statement, row)).scalar_one_or_none()


def _shown_state(task: Task) -> str:
    return f"closed ({task.describe_state()})" if task.closed_as else f"open ({task.state})"


def _note_text(task: Task) -> str:
    return f"{task.text()}\n\n{task.origin_link}" if task.origin_link else task.text()
