"""Bot API methods that create, change or remove messages, and answer button taps.

Each method validates in Telegram's order — chat, content, markup, reply target — and
only then consults flood control, so a refused request never consumes rate budget.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from emulator import forum
from emulator.calls import Call, Method
from emulator.errors import ApiError, bad_request
from emulator.formatting import (
    check_caption,
    check_message_text,
    normalize_markup,
    parse_text,
    with_detected,
)
from emulator.models import Chat, StoredMessage, now
from emulator.params import Upload

NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are exactly "
    "the same as a current content and reply markup of the message"
)


def _target_chat(call: Call) -> Chat:
    """The chat a send goes to; a user who blocked the bot refuses like on Telegram."""
    chat = call.state.resolve_chat(call.params.raw("chat_id"))
    if chat.blocked_bot:
        raise ApiError(403, "Forbidden: bot was blocked by the user")
    return chat


def _reply_target(call: Call, chat: Chat) -> StoredMessage | None:
    """Resolve ``reply_parameters`` or the legacy ``reply_to_message_id``."""
    params = call.params
    reply = params.json("reply_parameters")
    if not isinstance(reply, dict):
        reply = {
            "message_id": params.int("reply_to_message_id"),
            "allow_sending_without_reply": params.bool("allow_sending_without_reply"),
        }
    if not reply.get("message_id"):
        return None
    source = chat
    if reply.get("chat_id") is not None:
        source = call.state.resolve_chat(reply["chat_id"])
    target = source.find(_message_id(reply["message_id"]))
    if target is None or target.deleted:
        if reply.get("allow_sending_without_reply"):
            return None
        raise bad_request("message to be replied not found")
    return target


def _message_id(value: Any) -> int:
    """A message id inside a structured parameter, refused in Telegram's words if it is none."""
    if isinstance(value, bool):
        raise bad_request("invalid reply parameters specified")
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise bad_request("invalid reply parameters specified") from None


def _record_bot_message(call: Call, chat: Chat, **fields: Any) -> dict[str, Any]:
    """Store a send in its forum topic (every send method takes ``message_thread_id``)."""
    thread_id = call.params.int("message_thread_id")
    fields.update(forum.place(chat, thread_id, fields.get("reply_to"), call.bot.user))
    call.state.check_flood(call.bot, chat.chat_id)
    message = call.state.add_message(chat, call.bot.user, **fields)
    call.state.stats.messages_sent_by_bot += 1
    return message.to_api()


async def send_message(call: Call) -> dict[str, Any]:
    params = call.params
    chat = _target_chat(call)
    text, entities = parse_text(params.str("text") or "", params.str("parse_mode"))
    check_message_text(text)
    if entities is None and params.has("entities"):
        entities = params.json("entities")
    entities = with_detected(text, entities)
    markup = normalize_markup(params.json("reply_markup"))
    reply_to = _reply_target(call, chat)
    return _record_bot_message(
        call, chat, text=text, entities=entities, reply_markup=markup, reply_to=reply_to
    )


# -- files -------------------------------------------------------------------------------


def _caption(call: Call) -> tuple[str | None, list[dict[str, Any]] | None]:
    raw = call.params.str("caption")
    if not raw:
        return None, None
    caption, entities = parse_text(raw, call.params.str("parse_mode"))
    check_caption(caption)
    return caption, with_detected(caption, entities)


def _file_record(call: Call, field: str) -> dict[str, Any]:
    """Describe the uploaded (or referenced) file the way Telegram's file objects do."""
    upload = call.params.uploads.get(field)
    if upload is None:
        return _referenced_file(call, field)
    file_id, unique_id = call.state.store_file(upload.content)
    return {
        "file_id": file_id,
        "file_unique_id": unique_id,
        "file_name": upload.filename,
        "mime_type": upload.content_type,
        "file_size": len(upload.content),
    }


def _referenced_file(call: Call, field: str) -> dict[str, Any]:
    """A file_id seen before is reused; anything else (a URL) becomes an empty file."""
    reference = call.params.str(field)
    if not reference:
        raise bad_request(f"there is no {field} in the request")
    content = call.state.files.get(reference)
    if content is None:
        content = b""
        file_id, unique_id = call.state.store_file(content)
    else:
        file_id, unique_id = reference, f"AgAD{zlib.crc32(reference.encode()):010d}"
    name = reference.rstrip("/").rsplit("/", 1)[-1] or field
    return {
        "file_id": file_id,
        "file_unique_id": unique_id,
        "file_name": name,
        "mime_type": "application/octet-stream",
        "file_size": len(content),
    }


async def send_document(call: Call) -> dict[str, Any]:
    chat = _target_chat(call)
    document = _file_record(call, "document")
    caption, entities = _caption(call)
    return _record_bot_message(
        call,
        chat,
        document=document,
        caption=caption,
        caption_entities=entities,
        reply_markup=normalize_markup(call.params.json("reply_markup")),
        reply_to=_reply_target(call, chat),
    )


def _image_size(upload: Upload | None) -> tuple[int, int]:
    """Read width/height from a PNG header; other formats get a plausible square."""
    data = upload.content if upload else b""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return width, height
    return 512, 512


async def send_photo(call: Call) -> dict[str, Any]:
    chat = _target_chat(call)
    record = _file_record(call, "photo")
    width, height = _image_size(call.params.uploads.get("photo"))
    photo = {key: record[key] for key in ("file_id", "file_unique_id", "file_size")}
    caption, entities = _caption(call)
    return _record_bot_message(
        call,
        chat,
        photo=[{**photo, "width": width, "height": height}],
        caption=caption,
        caption_entities=entities,
        reply_markup=normalize_markup(call.params.json("reply_markup")),
        reply_to=_reply_target(call, chat),
    )


# -- edits and deletion ------------------------------------------------------------------


def _editable(call: Call) -> tuple[Chat, StoredMessage]:
    """The bot's own live message named by chat_id/message_id, or Telegram's refusal."""
    if call.params.has("inline_message_id"):
        raise bad_request("message to edit not found")
    chat = call.state.resolve_chat(call.params.raw("chat_id"))
    message_id = call.params.int("message_id")
    if message_id is None:
        raise bad_request("message identifier is not specified")
    message = call.state.existing_message(chat, message_id, "message to edit not found")
    if not message.from_bot:
        raise bad_request("message can't be edited")
    return chat, message


def _apply_edit(call: Call, chat: Chat, message: StoredMessage, **changes: Any) -> Any:
    """Refuse no-op edits with Telegram's exact wording, else apply and stamp edit_date."""
    if all(getattr(message, name) == value for name, value in changes.items()):
        raise bad_request(NOT_MODIFIED)
    call.state.check_flood(call.bot, chat.chat_id)
    for name, value in changes.items():
        setattr(message, name, value)
    message.edit_date = now()
    call.state.touch(chat)
    return message.to_api()


async def edit_message_text(call: Call) -> Any:
    chat, message = _editable(call)
    if message.text is None:
        raise bad_request("there is no text in the message to edit")
    params = call.params
    text, entities = parse_text(params.str("text") or "", params.str("parse_mode"))
    check_message_text(text)
    if entities is None and params.has("entities"):
        entities = params.json("entities")
    entities = with_detected(text, entities)
    markup = normalize_markup(params.json("reply_markup"))
    return _apply_edit(call, chat, message, text=text, entities=entities, reply_markup=markup)


async def edit_message_caption(call: Call) -> Any:
    chat, message = _editable(call)
    if message.text is not None:
        raise bad_request("there is no caption in the message to edit")
    caption, entities = _caption(call)
    markup = normalize_markup(call.params.json("reply_markup"))
    return _apply_edit(
        call, chat, message, caption=caption, caption_entities=entities, reply_markup=markup
    )


async def edit_message_reply_markup(call: Call) -> Any:
    chat, message = _editable(call)
    markup = normalize_markup(call.params.json("reply_markup"))
    return _apply_edit(call, chat, message, reply_markup=markup)


async def delete_message(call: Call) -> bool:
    chat = call.state.resolve_chat(call.params.raw("chat_id"))
    message_id = call.params.int("message_id") or 0
    message = call.state.existing_message(chat, message_id, "message to delete not found")
    if message.service and "forum_topic_created" in message.service:
        raise bad_request("message can't be deleted")  # a topic goes with deleteForumTopic
    message.deleted = True
    call.state.touch(chat)
    return True


async def answer_callback_query(call: Call) -> bool:
    params = call.params
    text = params.str("text")
    if text is not None and len(text) > 200:
        raise bad_request("MESSAGE_TOO_LONG")
    answer = {
        "text": text,
        "show_alert": params.bool("show_alert"),
        "url": params.str("url"),
        "cache_time": params.int("cache_time") or 0,
    }
    call.state.answer_callback(call.bot, params.str("callback_query_id") or "", answer)
    return True


MESSAGE_METHODS: dict[str, Method] = {
    "sendMessage": send_message,
    "sendDocument": send_document,
    "sendPhoto": send_photo,
    "editMessageText": edit_message_text,
    "editMessageCaption": edit_message_caption,
    "editMessageReplyMarkup": edit_message_reply_markup,
    "deleteMessage": delete_message,
    "answerCallbackQuery": answer_callback_query,
}
