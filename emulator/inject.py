"""What a human does in a Telegram client, turned into state changes and bot updates.

Used by the control API (and so by the chat page and tests): writing, editing,
forwarding and tapping buttons all produce the exact update JSON Telegram would send.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from typing import Any

from emulator import forum
from emulator.errors import ApiError, bad_request
from emulator.formatting import (
    MAX_TEXT,
    check_caption,
    command_entities,
    normalize_origin,
)
from emulator.models import BotState, Chat, StoredMessage, now
from emulator.params import Params
from emulator.state import EmulatorState

# The sides (longest edge, in pixels) of the sizes Telegram keeps of a sent photo.
PHOTO_SIDES = (90, 320, 800, 1280)


def _chat_for(state: EmulatorState, user: dict[str, Any], body: dict[str, Any]) -> Chat:
    """The private chat with ``user`` unless the body names another chat."""
    chat_id = body.get("chat_id")
    if chat_id is None or int(chat_id) == user["id"]:
        return state.private_chat(user)
    return state.group_chat(int(chat_id), body.get("chat"))


def _user_content(state: EmulatorState, body: dict[str, Any]) -> dict[str, Any]:
    """Text (with Telegram's bot_command entities), or a photo, document, voice note or audio
    file with an optional caption; a message of an album carries its ``media_group_id``."""
    fields = _user_sound(state, body) or _user_media(body)
    if body.get("media_group_id") is not None:
        if not fields or "voice" in fields:
            raise bad_request("only a photo or a document can be part of an album")
        fields["media_group_id"] = str(body["media_group_id"])
    if fields:
        caption = body.get("caption") or body.get("text")
        if caption is not None and not isinstance(caption, str):
            raise bad_request("caption must be text")
        check_caption(caption)
        return {
            **fields,
            "caption": caption or None,
            "caption_entities": command_entities(caption) if caption else None,
        }
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise bad_request("message text is empty")
    if len(text) > MAX_TEXT:
        raise bad_request("message is too long")
    return {"text": text, "entities": command_entities(text)}


def _user_media(body: dict[str, Any]) -> dict[str, Any]:
    document, photo = body.get("document"), body.get("photo")
    if document is not None and photo is not None:
        raise bad_request("a message holds a photo or a document, not both")
    if isinstance(document, dict):
        return {"document": _user_document(document)}
    if isinstance(photo, dict):
        return {"photo": _user_photo(photo)}
    if document is not None or photo is not None:
        raise bad_request('photo and document must be objects, e.g. {"file_name": "a.jpg"}')
    return {}


# A recording's bytes when the test gives none: the bot downloads them like any others.
DEFAULT_RECORDING = b"OggS\x00\x02emulated voice note"
SOUND_FOLDERS = {"voice": "voice", "audio": "music"}  # getFile's file_path, as on Telegram


def _user_sound(state: EmulatorState, body: dict[str, Any]) -> dict[str, Any]:
    """A voice note or an audio file, e.g. ``{"voice": {"duration": 42, "data": "<base64>"}}``;
    its bytes are kept so the bot can fetch them with getFile."""
    present = [kind for kind in SOUND_FOLDERS if body.get(kind) is not None]
    if not present:
        return {}
    if len(present) > 1 or body.get("document") is not None or body.get("photo") is not None:
        raise bad_request("a message holds one file")
    kind = present[0]
    sound = body[kind]
    if not isinstance(sound, dict):
        raise bad_request(f'{kind} must be an object, e.g. {{"duration": 42}}')
    try:
        content = base64.b64decode(sound["data"], validate=True) if "data" in sound else None
    except (binascii.Error, TypeError):
        raise bad_request(f"{kind}.data must be base64") from None
    content = DEFAULT_RECORDING if content is None else content
    prefix = "AwACAgIAAxV" if kind == "voice" else "CQACAgIAAxA"
    file_id, unique_id = state.keep_user_file(content, SOUND_FOLDERS[kind], prefix)
    mime = "audio/ogg" if kind == "voice" else "audio/mpeg"
    item = {
        "file_id": file_id,
        "file_unique_id": unique_id,
        "duration": int(sound.get("duration") or 1),
        "mime_type": str(sound.get("mime_type") or mime),
        "file_size": len(content),
    }
    if kind == "audio":
        item["file_name"] = str(sound.get("file_name") or "audio.mp3")
    return {kind: item}


def _user_document(document: dict[str, Any]) -> dict[str, Any]:
    name = str(document.get("file_name") or "file.bin")
    file_id = f"BQACAgIAAxUser{zlib.crc32(name.encode()):010d}"
    return {
        "file_id": file_id,
        "file_unique_id": f"AgADUser{zlib.crc32(file_id.encode()):010d}",
        "file_name": name,
        "mime_type": str(document.get("mime_type") or "application/octet-stream"),
        "file_size": int(document.get("file_size") or 0),
    }


def _user_photo(photo: dict[str, Any]) -> list[dict[str, Any]]:
    """The sizes Telegram makes of one sent picture, smallest first (``message.photo[-1]`` is
    the original). ``file_name`` only tells pictures apart: Telegram keeps no name for a photo,
    and the same name gives the same file ids, as sending the same picture again would."""
    name = str(photo.get("file_name") or "photo.jpg")
    width, height = int(photo.get("width") or 1280), int(photo.get("height") or 960)
    size = int(photo.get("file_size") or 0)
    sizes = []
    for side in PHOTO_SIDES:
        scale = min(1.0, side / max(width, height))
        file_id = f"AgACAgIAAxUser{zlib.crc32(f'{name}:{side}'.encode()):010d}"
        sizes.append(
            {
                "file_id": file_id,
                "file_unique_id": f"AQADUser{zlib.crc32(file_id.encode()):010d}",
                "width": max(1, round(width * scale)),
                "height": max(1, round(height * scale)),
                "file_size": round(size * scale * scale),
            }
        )
        if scale == 1.0:
            break
    return sizes


def inject_message(state: EmulatorState, bot: BotState, body: dict[str, Any]) -> dict[str, Any]:
    """A user writes (or forwards) a message; returns the queued ``message`` update."""
    user = state.remember_user(body.get("user") or {})
    chat = _chat_for(state, user, body)
    fields = _user_content(state, body)
    if body.get("forward_origin"):
        fields["forward_origin"] = normalize_origin(dict(body["forward_origin"]))
    if body.get("reply_to_message_id"):
        fields["reply_to"] = state.existing_message(
            chat, int(body["reply_to_message_id"]), "message to be replied not found"
        )
    thread_id = Params(body).int("message_thread_id")  # read as the Bot API reads it
    fields.update(forum.place(chat, thread_id, fields.get("reply_to"), user))
    message = state.add_message(chat, user, **fields)
    return state.enqueue_update(bot, {"message": message.to_api()})


def inject_topic(
    state: EmulatorState, bot: BotState, chat_id: int, body: dict[str, Any]
) -> dict[str, Any]:
    """A user opens a topic in a forum: the bot gets its ``forum_topic_created`` message."""
    user = state.remember_user(body.get("user") or {})
    chat = _existing_chat(state, {"chat_id": chat_id})
    forum.require_forum(chat)
    params = Params(body)
    name = forum.topic_name(params.str("name"))
    color = forum.icon_color(params.int("icon_color"))
    emoji = params.str("icon_custom_emoji_id") or None
    topic, message = forum.create_topic(state, chat, user, name, color, emoji)
    update = state.enqueue_update(bot, {"message": message.to_api()})
    return {
        "update_id": update["update_id"],
        "topic": topic.to_view(),
        "message": update["message"],
    }


def inject_edit(state: EmulatorState, bot: BotState, body: dict[str, Any]) -> dict[str, Any]:
    """A user edits their earlier message; returns the ``edited_message`` update."""
    chat = _existing_chat(state, body)
    message = state.existing_message(chat, int(body["message_id"]), "message to edit not found")
    if message.from_bot:
        raise bad_request("message can't be edited")
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise bad_request("message text is empty")
    if message.text is None:  # a photo or a document: the edit changes its caption
        check_caption(text)
        message.caption, message.caption_entities = text, command_entities(text)
    else:
        message.text, message.entities = text, command_entities(text)
    message.edit_date = now()
    state.touch(chat)
    return state.enqueue_update(bot, {"edited_message": message.to_api()})


def inject_callback(state: EmulatorState, bot: BotState, body: dict[str, Any]) -> dict[str, Any]:
    """A user taps an inline button on a bot message; returns update and query ids."""
    user = state.remember_user(body.get("user") or {})
    chat = _existing_chat(state, body)
    message = state.existing_message(chat, int(body["message_id"]), "message not found")
    if not message.from_bot:
        raise bad_request("only the bot's messages have inline buttons")
    data = str(body.get("data") or "")
    callback_id = state.new_callback_id(bot)
    query = {
        "id": callback_id,
        "from": user,
        "message": message.to_api(),
        "chat_instance": str(zlib.crc32(f"{bot.user['id']}:{chat.chat_id}".encode())),
        "data": data,
    }
    update = state.enqueue_update(bot, {"callback_query": query})
    return {
        "update_id": update["update_id"],
        "callback_query_id": callback_id,
        "matched_button": _has_button(message, data),
    }


def _existing_chat(state: EmulatorState, body: dict[str, Any]) -> Chat:
    chat_id = body.get("chat_id")
    chat = state.chat(int(chat_id)) if chat_id is not None else None
    if chat is None:
        raise ApiError(404, "Not Found: chat not found")
    return chat


def _has_button(message: StoredMessage, data: str) -> bool:
    """Whether a real client could send this data (it is on the current keyboard)."""
    rows = (message.reply_markup or {}).get("inline_keyboard", [])
    return any(button.get("callback_data") == data for row in rows for button in row)


def inject_raw(state: EmulatorState, bot: BotState, body: dict[str, Any]) -> dict[str, Any]:
    """Queue an arbitrary update verbatim so tests can feed malformed or novel types."""
    return state.enqueue_update(bot, dict(body))
