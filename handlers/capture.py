"""A Telegram message as a :class:`bot.tasks.capture.Capture`: its text, its files, where it came
from.

Nothing of the message is dropped on the way: a message without text keeps its files (by
Telegram file id), hidden links (``text_link`` entities) are kept as links, and an origin
Telegram does not describe is kept as ``unknown``.
"""

from __future__ import annotations

from typing import Any

from telegram import (
    Message,
    MessageEntity,
    MessageOrigin,
    MessageOriginChannel,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUser,
)

from bot.tasks.audio import AUDIO_KINDS
from bot.tasks.capture import Capture, Origin

FILE_KINDS = ("document", "video", "audio", "voice", "video_note", "animation", "sticker")


def capture_of(message: Message) -> Capture:
    text = message.text or message.caption or ""
    if message.poll is not None:
        options = "\n".join(f"- {option.text}" for option in message.poll.options)
        text = f"{message.poll.question}\n{options}"
    return Capture(
        chat_id=message.chat_id,
        message_id=message.message_id,
        user_id=message.from_user.id if message.from_user else 0,
        text=text,
        origin=origin_of(message),
        attachments=tuple(_attachments(message)),
        album=message.media_group_id,
    )


def origin_of(message: Message) -> Origin:
    forwarded = message.forward_origin
    if forwarded is None:
        user = message.from_user
        return Origin(
            "self",
            name=user.full_name if user else None,
            user_id=user.id if user else None,
            chat_id=message.chat_id,
            message_id=message.message_id,
            at=message.date,
        )
    return _forward_origin(forwarded)


def _forward_origin(origin: MessageOrigin) -> Origin:
    if isinstance(origin, MessageOriginUser):
        user = origin.sender_user
        return Origin("user", name=user.full_name, user_id=user.id, at=origin.date)
    if isinstance(origin, MessageOriginHiddenUser):
        return Origin("hidden_user", name=origin.sender_user_name, at=origin.date)
    if isinstance(origin, MessageOriginChannel):
        chat = origin.chat
        link = f"https://t.me/{chat.username}/{origin.message_id}" if chat.username else None
        return Origin(
            "channel",
            name=chat.title,
            chat_id=chat.id,
            message_id=origin.message_id,
            at=origin.date,
            link=link,
        )
    if isinstance(origin, MessageOriginChat):
        chat = origin.sender_chat
        return Origin("chat", name=chat.title, chat_id=chat.id, at=origin.date)
    return Origin("unknown", at=getattr(origin, "date", None))


def _attachments(message: Message) -> list[dict[str, Any]]:
    found = []
    if message.photo:
        largest = message.photo[-1]
        found.append(_file("photo", largest, message.message_id))
    for kind in FILE_KINDS:
        item = getattr(message, kind, None)
        if item is not None:
            found.append(_file(kind, item, message.message_id))
    if message.location is not None:
        place = f"{message.location.latitude},{message.location.longitude}"
        found.append({"kind": "location", "detail": place, "message_id": message.message_id})
    if message.contact is not None:
        contact = message.contact
        detail = " ".join(p for p in (contact.first_name, contact.last_name or "") if p)
        detail += f" {contact.phone_number}"
        found.append({"kind": "contact", "detail": detail, "message_id": message.message_id})
    entities = (message.entities or ()) + (message.caption_entities or ())
    for entity in entities:
        if entity.type == MessageEntity.TEXT_LINK and entity.url:
            found.append({"kind": "link", "url": entity.url, "message_id": message.message_id})
    return found


def _file(kind: str, item: Any, message_id: int) -> dict[str, Any]:
    kept = {
        "kind": kind,
        "file_id": item.file_id,
        "file_unique_id": item.file_unique_id,
        "file_name": getattr(item, "file_name", None),
        "message_id": message_id,
    }
    if kind in AUDIO_KINDS:  # what a transcription needs to know before it downloads
        kept.update(
            duration=_seconds(item.duration), mime_type=item.mime_type, file_size=item.file_size
        )
    return kept


def _seconds(duration: Any) -> int:
    """PTB gives a duration as a timedelta (PTB_TIMEDELTA, which aegis sets) or seconds."""
    return int(duration.total_seconds() if hasattr(duration, "total_seconds") else duration or 0)
