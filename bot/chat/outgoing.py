"""A message on its way out, as data: its kinds and states, the row as a value, and how a text
too long for one Telegram message is split into parts (bot/chat/outbox.py sends them)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.chat.text import MESSAGE_LIMIT

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
    """Split at line boundaries into parts of at most ``limit`` characters, none blank."""
    if len(text) <= limit and text.strip():
        return [text]
    parts: list[str] = []
    current = ""
    for line in text.splitlines(keepends=True):
        while len(line) > limit:
            cut = _cut_point(line, limit)
            parts, current = _flush(parts, current), ""
            # A cut can fall inside a long run of spaces; Telegram refuses a blank message.
            parts = _flush(parts, line[:cut])
            line = line[cut:]
        if len(current) + len(line) > limit:
            parts, current = _flush(parts, current), ""
        current += line
    return _flush(parts, current) or [text[:limit]]


def _cut_point(line: str, limit: int) -> int:
    space = line.rfind(" ", limit // 2, limit)
    return space + 1 if space > 0 else limit


def _flush(parts: list[str], current: str) -> list[str]:
    if current.strip():
        parts.append(current.rstrip("\n"))
    return parts
