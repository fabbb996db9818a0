"""A task as data: its state labels, what closing it means, the row as a value, a page of a
list, and the rules for context labels. The service that captures and changes tasks is
bot/tasks/tasks.py.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.chat.text import clip
from bot.errors import TaskRefused
from bot.tasks.capture import Capture


class State(enum.StrEnum):
    INBOX = "inbox"
    NEXT = "@next"
    SOMEDAY = "@someday"
    WAITING = "@waiting"
    REFERENCE = "@reference"


class Closed(enum.StrEnum):
    DONE = "done"
    DROPPED = "dropped"
    FILED = "filed"  # a @reference item: its content is in the notes store


LABEL = re.compile(r"^[^\W_][\w-]{0,31}$")
MAX_LABELS = 10
NO_LABEL = "other"


@dataclass(frozen=True)
class Task:
    id: int
    title: str
    body: str
    state: State
    labels: tuple[str, ...]
    assignee: str | None
    attachments: tuple[dict[str, Any], ...]
    origin_kind: str
    origin_name: str | None
    origin_user_id: int | None
    origin_link: str | None
    chat_id: int | None
    message_id: int | None
    created_at: datetime
    updated_at: datetime
    triaged_by: str | None
    triage_interaction_id: int | None
    closed_at: datetime | None
    closed_as: Closed | None

    @classmethod
    def from_row(cls, row: Any) -> Task:
        return cls(
            id=row.id,
            title=row.title,
            body=row.body,
            state=State(row.state),
            labels=tuple(row.labels),
            assignee=row.assignee,
            attachments=tuple(row.attachments),
            origin_kind=row.origin_kind,
            origin_name=row.origin_name,
            origin_user_id=row.origin_user_id,
            origin_link=row.origin_link,
            chat_id=row.chat_id,
            message_id=row.message_id,
            created_at=row.created_at,
            updated_at=row.updated_at,
            triaged_by=row.triaged_by,
            triage_interaction_id=row.triage_interaction_id,
            closed_at=row.closed_at,
            closed_as=Closed(row.closed_as) if row.closed_as else None,
        )

    @property
    def is_open(self) -> bool:
        return self.closed_at is None

    def text(self) -> str:
        """What the task says: its body, headed by its title only when the title is not the
        body's own first line (a photo's "Photo from Ann")."""
        if not self.body.strip():
            return self.title
        if Capture.title_of(self.body) == self.title:
            return self.body
        return f"{self.title}\n\n{self.body}"

    def describe_state(self) -> str:
        return f"{self.state}, {self.closed_as}" if self.closed_as else str(self.state)


@dataclass(frozen=True)
class Captured:
    task: Task
    new: bool  # False: this message was captured before, as ``task``
    joined: bool = False  # one more message of an album that is already a task


@dataclass(frozen=True)
class Edit:
    """What an edit of a captured message did to its task."""

    task: Task
    applied: bool
    why_not: str | None = None


@dataclass(frozen=True)
class Page:
    tasks: list[Task]
    total: int  # all of them, or as many as were counted when ``counted_all`` is False
    number: int  # from 0
    size: int
    counted_all: bool = True

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))

    def shown_total(self) -> str:
        return str(self.total) if self.counted_all else f"{self.total}+"

    def shown_pages(self) -> str:
        return str(self.pages) if self.counted_all else f"{self.pages}+"

    @property
    def has_next(self) -> bool:
        return (self.number + 1) * self.size < self.total


def parse_label(raw: str) -> str:
    """A context label as kept: lower case, without a leading ``#``; refused when odd."""
    label = raw.strip().lstrip("#").casefold()
    if not LABEL.match(label):
        raise TaskRefused(
            f"{clip(raw, 40)!r} is not a label: use up to 32 letters, digits, - or _, "
            "starting with a letter or digit."
        )
    return label


def group_by_label(page: list[Task]) -> dict[str, list[Task]]:
    """Tasks under their first context label (``other`` for none), labels in name order."""
    groups: dict[str, list[Task]] = {}
    for task in page:
        groups.setdefault(task.labels[0] if task.labels else NO_LABEL, []).append(task)
    return dict(sorted(groups.items(), key=lambda item: (item[0] == NO_LABEL, item[0])))
