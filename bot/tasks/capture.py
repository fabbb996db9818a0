"""A message to capture, as data (the handler builds it from a Telegram message), and the key
that makes capturing it idempotent.

The key names the message itself, not the update that brought it:

- written here: the chat and message id (a redelivered update carries the same ones);
- forwarded from a channel: the channel and its message id;
- forwarded from a user, a hidden user or a group: who wrote it, when, and a hash of its
  content (Telegram gives no original message id for these, and forwarding the same message
  again carries the same three);
- one message of an album (``media_group_id``): the album, so all its parts make one task.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.chat.text import clip
from bot.tasks.audio import AUDIO_KINDS, audio_title, status_of

TITLE_CHARS = 80


@dataclass(frozen=True)
class Origin:
    """Who wrote the message and where, as far as Telegram tells."""

    kind: str  # "self" (written to the bot), "user", "hidden_user", "chat", "channel"
    name: str | None = None
    user_id: int | None = None
    chat_id: int | None = None
    message_id: int | None = None
    at: datetime | None = None
    link: str | None = None  # a public t.me link, for a public channel's post


@dataclass(frozen=True)
class Capture:
    chat_id: int
    message_id: int
    user_id: int
    text: str
    origin: Origin
    attachments: tuple[dict[str, Any], ...] = ()
    album: str | None = None  # Telegram's media_group_id
    assignee: str | None = None  # written in an agent's forum topic: that agent's task

    @property
    def key(self) -> str:
        if self.album is not None:
            return f"album:{self.chat_id}:{self.album}"
        origin = self.origin
        if origin.kind == "self":
            return f"msg:{self.chat_id}:{self.message_id}"
        if origin.kind == "channel" and origin.chat_id is not None and origin.message_id:
            return f"channel:{origin.chat_id}:{origin.message_id}"
        who = origin.user_id if origin.user_id is not None else origin.chat_id
        if who is None:
            who = hashlib.sha256((origin.name or "").encode()).hexdigest()[:16]
        when = int(origin.at.timestamp()) if origin.at else 0
        return f"fwd:{origin.kind}:{who}:{when}:{self._content_hash()}"

    def _content_hash(self) -> str:
        content = [self.text, *(a.get("file_unique_id", "") for a in self.attachments)]
        return hashlib.sha256("\x00".join(content).encode()).hexdigest()[:24]

    def title(self) -> str:
        return self.title_of(self.text) or self._describe_without_text()

    @staticmethod
    def title_of(text: str) -> str:
        """The first line with words in it, cut to fit a list."""
        for line in text.splitlines():
            line = " ".join(line.split())
            if line:
                return clip(line, TITLE_CHARS)
        return ""

    def _describe_without_text(self) -> str:
        files = [a for a in self.attachments if a["kind"] != "link"]
        origin = self.origin.name if self.origin.kind != "self" else None
        if files and files[0]["kind"] in AUDIO_KINDS and status_of(files[0]) is not None:
            return audio_title(files[0], origin)  # a recording to transcribe
        what = files[0]["kind"] if files else "message"
        name = files[0].get("file_name") if files else None
        described = f"{what.capitalize()} {name}" if name else what.capitalize()
        if self.origin.kind != "self" and self.origin.name:
            described += f" from {self.origin.name}"
        return described[:TITLE_CHARS]
