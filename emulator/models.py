"""Plain data records held by :class:`emulator.state.EmulatorState`.

They are deliberately dumb containers plus the rendering of themselves into Bot API
JSON, so the state module can stay about rules (ids, queues, limits) only.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


def now() -> int:
    """Telegram dates are integer unix seconds."""
    return int(time.time())


class Signal:
    """A broadcast wake-up usable from synchronous code.

    ``asyncio.Condition.notify`` needs the lock held, which sync state methods cannot
    take; swapping a fresh ``Event`` on every notify gives the same effect without it.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        """Wake every current waiter; later waiters wait for the next notify."""
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, seconds: float) -> bool:
        """Wait for the next notify; False when ``seconds`` pass first."""
        event = self._event
        try:
            await asyncio.wait_for(event.wait(), timeout=max(seconds, 0))
        except TimeoutError:
            return False
        return True


@dataclass
class StoredMessage:
    """A message in a chat as it is now (after edits and deletion)."""

    message_id: int
    chat: dict[str, Any]
    sender: dict[str, Any]
    from_bot: bool
    date: int
    text: str | None = None
    entities: list[dict[str, Any]] | None = None
    caption: str | None = None
    caption_entities: list[dict[str, Any]] | None = None
    reply_markup: dict[str, Any] | None = None
    document: dict[str, Any] | None = None
    photo: list[dict[str, Any]] | None = None
    voice: dict[str, Any] | None = None  # a voice message (an OGG/Opus recording)
    audio: dict[str, Any] | None = None  # an audio file
    forward_origin: dict[str, Any] | None = None
    media_group_id: str | None = None  # the album a user's photo or document belongs to
    message_thread_id: int | None = None  # its forum topic; None in General and outside forums
    service: dict[str, Any] | None = None  # a service message's one field (forum_topic_created…)
    reply_to: StoredMessage | None = None
    edit_date: int | None = None
    deleted: bool = False

    def to_api(self, *, with_reply: bool = True) -> dict[str, Any]:
        """The Bot API ``Message`` object, leaving out fields that are unset."""
        data: dict[str, Any] = {
            "message_id": self.message_id,
            "from": self.sender,
            "chat": self.chat,
            "date": self.date,
        }
        optional = {
            "text": self.text,
            "entities": self.entities,
            "caption": self.caption,
            "caption_entities": self.caption_entities,
            "document": self.document,
            "photo": self.photo,
            "voice": self.voice,
            "audio": self.audio,
            "forward_origin": self.forward_origin,
            "media_group_id": self.media_group_id,
            "edit_date": self.edit_date,
            "reply_markup": self.reply_markup,
        }
        data.update({key: value for key, value in optional.items() if value})
        data.update(self.service or {})  # forum_topic_closed is an empty object: keep it
        if self.message_thread_id is not None:
            data["message_thread_id"] = self.message_thread_id
            data["is_topic_message"] = True
        if with_reply and self.reply_to is not None:
            data["reply_to_message"] = self.reply_to.to_api(with_reply=False)
        return data

    def to_view(self) -> dict[str, Any]:
        """The flattened shape the control API and the chat page consume."""
        return {
            "message_id": self.message_id,
            "from_bot": self.from_bot,
            "from": self.sender,
            "text": self.text,
            "caption": self.caption,
            "entities": self.entities or [],
            "reply_markup": self.reply_markup,
            "document": self.document_view(),
            "photo": self.photo[-1] if self.photo else None,
            "voice": self.voice,
            "audio": self.audio,
            "forward_origin": self.forward_origin,
            "media_group_id": self.media_group_id,
            "message_thread_id": self.message_thread_id,
            "service": self.service,
            "reply_to_message_id": self.reply_to.message_id if self.reply_to else None,
            "edited": self.edit_date is not None,
            "deleted": self.deleted,
            "date": self.date,
        }

    def document_view(self) -> dict[str, Any] | None:
        """Filename, size and caption of an attached document, if any."""
        if self.document is None:
            return None
        return {
            "filename": self.document.get("file_name"),
            "size": self.document.get("file_size"),
            "caption": self.caption,
            "file_id": self.document.get("file_id"),
            "mime_type": self.document.get("mime_type"),
        }


# What a bot added to run a forum is given: it may create, edit, close and delete topics.
FORUM_BOT_RIGHTS = {"can_manage_topics": True, "can_delete_messages": True}


@dataclass
class ForumTopic:
    """A topic of a forum; its id is the id of the service message that created it."""

    message_thread_id: int
    name: str
    icon_color: int
    creator_id: int  # its creator may edit, close and delete it without admin rights
    icon_custom_emoji_id: str | None = None
    closed: bool = False

    def to_api(self) -> dict[str, Any]:
        """The Bot API ``ForumTopic`` object."""
        data: dict[str, Any] = {
            "message_thread_id": self.message_thread_id,
            "name": self.name,
            "icon_color": self.icon_color,
        }
        if self.icon_custom_emoji_id:
            data["icon_custom_emoji_id"] = self.icon_custom_emoji_id
        return data

    def to_view(self) -> dict[str, Any]:
        return {**self.to_api(), "is_closed": self.closed}


@dataclass
class Chat:
    """A chat and its transcript; ``version`` bumps on any visible change."""

    info: dict[str, Any]
    messages: list[StoredMessage] = field(default_factory=list)
    next_message_id: int = 1
    version: int = 0
    blocked_bot: bool = False
    topics: dict[int, ForumTopic] = field(default_factory=dict)  # a forum's live topics
    bot_rights: dict[str, bool] | None = None  # None: the bot is no administrator here

    @property
    def chat_id(self) -> int:
        return int(self.info["id"])

    @property
    def is_forum(self) -> bool:
        return bool(self.info.get("is_forum"))

    def find(self, message_id: int) -> StoredMessage | None:
        """The message with that id, deleted or not (ids are dense, so index first)."""
        index = message_id - 1
        if 0 <= index < len(self.messages) and self.messages[index].message_id == message_id:
            return self.messages[index]
        return next((m for m in self.messages if m.message_id == message_id), None)


@dataclass
class FloodConfig:
    """Rate limits a bot is held to when flood mode is enabled."""

    enabled: bool = False
    per_chat_per_second: float = 1.0
    global_per_second: float = 30.0


@dataclass
class Outage:
    """Bot API calls answered with an error instead of being served, as on a bad day at
    Telegram: the next ``count`` calls (None: until cleared) of ``methods`` (empty: every one),
    only those whose text or caption holds ``text_contains`` when it is set (one message that
    Telegram keeps failing on, while the rest go through)."""

    status: int
    methods: frozenset[str] = frozenset()  # lowercase method names
    count: int | None = None
    text_contains: str | None = None
    refused: int = 0  # how many calls it has answered so far

    def hits(self, method: str, text: str = "") -> bool:
        if self.methods and method.lower() not in self.methods:
            return False
        if self.text_contains is not None and self.text_contains not in text:
            return False
        return self.count is None or self.refused < self.count


@dataclass
class WebhookConfig:
    """What ``setWebhook`` configured, plus Telegram's delivery bookkeeping."""

    url: str
    secret_token: str | None = None
    max_connections: int = 40
    allowed_updates: list[str] | None = None
    last_error_date: int | None = None
    last_error_message: str | None = None


@dataclass
class BotState:
    """Everything the emulator knows about one bot, keyed by its token."""

    token: str
    user: dict[str, Any]
    updates: deque[dict[str, Any]] = field(default_factory=deque)
    next_update_id: int = 1
    webhook: WebhookConfig | None = None
    commands: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    flood: FloodConfig = field(default_factory=FloodConfig)
    outage: Outage | None = None
    chat_sends: dict[int, deque[float]] = field(default_factory=dict)
    global_sends: deque[float] = field(default_factory=deque)
    callback_answers: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    poll_generation: int = 0
    signal: Signal = field(default_factory=Signal)


@dataclass
class Stats:
    """Counters tests read through ``GET /_emulator/stats``."""

    updates_injected: int = 0
    updates_delivered: int = 0
    messages_sent_by_bot: int = 0
    rate_limited: int = 0
    webhook_deliveries: int = 0
    webhook_failures: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))
