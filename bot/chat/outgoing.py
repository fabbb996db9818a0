"""A message on its way out, as data: its kinds and states, the row as a value, and how a text
(Telegram HTML, bot/chat/text.py) too long for one Telegram message is split into parts
(bot/chat/outbox.py sends them)."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.chat.text import MESSAGE_LIMIT, plain

OUTGOING = "outgoing"  # the data dir's folder of files to send, one folder per content hash


class OutboxStatus(enum.StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"


OWED = (OutboxStatus.PENDING, OutboxStatus.SENDING)  # still to be sent


class OutboxKind(enum.StrEnum):
    TEXT = "text"
    DOCUMENT = "document"  # a text too long for messages, sent as a .txt file
    FILE = "file"  # a copy under the data dir's outgoing/; parts[0] is "<sha256>/<file name>"
    EDIT = "edit"  # replaces the text and buttons of the message an earlier row sent


@dataclass
class OutgoingMessage:
    id: int
    chat_id: int
    kind: OutboxKind
    parts: list[str]
    reply_markup: dict[str, Any] | None
    reply_to_message_id: int | None
    parts_sent: int
    telegram_message_ids: list[int]
    attempts: int
    lease_until: datetime | None = None  # the lease this delivery holds: its claim on the row
    caption: str | None = None
    edit_of: int | None = None
    reply_to_outbox: int | None = None  # reply to what that earlier row sent
    idempotency_key: str | None = None
    last_error: str | None = None  # why the last try did not send it, if one did not
    thread_id: int | None = None  # the forum topic it goes to (bot/chat/topics.py)

    @classmethod
    def from_row(cls, row: Any) -> OutgoingMessage:
        return cls(
            id=row.id,
            chat_id=row.chat_id,
            kind=OutboxKind(row.kind),
            parts=list(row.parts),
            reply_markup=row.reply_markup,
            reply_to_message_id=row.reply_to_message_id,
            parts_sent=row.parts_sent,
            telegram_message_ids=list(row.telegram_message_ids),
            attempts=row.attempts,
            lease_until=row.lease_until,
            caption=row.caption,
            edit_of=row.edit_of,
            reply_to_outbox=row.reply_to_outbox,
            idempotency_key=row.idempotency_key,
            last_error=row.last_error,
            thread_id=row.thread_id,
        )


def outgoing_path(data_dir: Path, stored: str) -> Path:
    """Where the copy a FILE row sends is kept."""
    return data_dir / OUTGOING / stored


def split_text(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split the HTML ``text`` at line boundaries into parts that each show at most ``limit``
    characters, none blank. A tag open across a cut is closed at the end of one part and opened
    again at the start of the next, so each part is HTML Telegram can parse on its own."""
    if len(text) <= limit and plain(text).strip():  # what shows is never longer than the HTML
        return [text]
    pieces: list[str] = []  # cut first, blank or not, so no tag is lost with a blank piece
    current, size = "", 0
    for line in text.splitlines(keepends=True):
        shown = len(plain(line))
        while shown > limit:
            cut = _cut_point(line, limit)
            pieces += [current, line[:cut]]
            current, size, line = "", 0, line[cut:]
            shown = len(plain(line))
        if size + shown > limit:
            pieces.append(current)
            current, size = "", 0
        current, size = current + line, size + shown
    pieces.append(current)
    # A cut can fall inside a long run of spaces; Telegram refuses a blank message.
    parts = [part.rstrip("\n") for part in _balanced(pieces) if plain(part).strip()]
    return parts or [text[:limit]]


_TOKEN = re.compile(r"<[^>]*>|&#?\w+;|[^<&]")


def _cut_point(line: str, limit: int) -> int:
    """Where to cut ``line`` so the first piece shows at most ``limit`` characters: after the
    last space in its second half, else at the limit; never inside a tag or an ``&…;``."""
    shown, position, space = 0, 0, 0
    for token in _TOKEN.finditer(line):
        if not token.group().startswith("<"):
            if shown == limit:
                break
            shown += 1
            if token.group() == " " and shown > limit // 2:
                space = token.end()
        position = token.end()
    return space or position


_OPEN_OR_CLOSE = re.compile(r"<(/?)([a-zA-Z-]+)[^>]*>")


def _balanced(parts: list[str]) -> list[str]:
    """Each part with the tags open at its start opened again, and those open at its end closed."""
    balanced, still_open = [], []  # the opening tags in force, outermost first
    for part in parts:
        before = "".join(still_open)
        for tag in _OPEN_OR_CLOSE.finditer(part):
            if tag.group(1):
                if still_open:
                    still_open.pop()
            else:
                still_open.append(tag.group())
        closing = "".join(f"</{_OPEN_OR_CLOSE.match(t).group(2)}>" for t in reversed(still_open))
        balanced.append(before + part + closing)
    return balanced
