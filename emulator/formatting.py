"""Telegram's text rules: length limits, HTML parse mode, keyboards, entities, origins.

Bots most often break on Telegram over exactly these rules (an unescaped ``<`` in HTML,
a 65-byte callback_data, a 5000-character reply), so the emulator checks them the same
way instead of accepting anything.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from emulator.errors import ApiError, bad_request
from emulator.models import now

MAX_TEXT = 4096
MAX_CAPTION = 1024
MAX_CALLBACK_DATA = 64

_SIMPLE_TAGS = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
}
# As Telegram's own parser (tdlib's find_bot_commands) finds them: not inside a word, a path or
# a tag, so "/next:" and "(/note)" are commands and "a/b" is not.
_COMMAND_RE = re.compile(r"(?<![\w/<>])/[A-Za-z0-9_]{1,64}(?:@[A-Za-z0-9_]{3,32})?(?![\w/<>])")


_STRAY_LT = re.compile(r"<(?!/?[A-Za-z])")  # a '<' that starts no tag


def utf16_len(text: str) -> int:
    """Entity offsets and lengths are counted in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


class _HtmlEntities(HTMLParser):
    """Turns Telegram-flavoured HTML into plain text plus ``MessageEntity`` dicts."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.source = source
        self.parts: list[str] = []
        self._text_pos = 0
        self.stack: list[tuple[str, int, dict[str, Any]]] = []
        self.entities: list[dict[str, Any]] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)
        self._text_pos += utf16_len(data)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        entity = self._entity_for(tag, dict(attrs))
        self.stack.append((tag, self._text_pos, entity))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1][0] != tag:
            expected = f'"</{self.stack[-1][0]}>"' if self.stack else "no end tag"
            raise self._error(
                f"Unmatched end tag at byte offset {self._byte_pos()}, "
                f'expected {expected}, found "</{tag}>"'
            )
        _, start, entity = self.stack.pop()
        if self._text_pos > start and not entity.pop("_inside_pre", False):
            self.entities.append({**entity, "offset": start, "length": self._text_pos - start})

    def parse(self) -> tuple[str, list[dict[str, Any]]]:
        """Feed the whole source and return (plain text, entities sorted by offset)."""
        stray = _STRAY_LT.search(self.source)
        if stray:  # Python's parser would keep it as text; Telegram refuses it
            prefix = len(self.source[: stray.start()].encode())
            raise self._error(f"Unexpected '<' at byte offset {prefix}: write &lt;")
        self.feed(self.source)
        self.close()
        if self.stack:
            tag = self.stack[-1][0]
            raise self._error(f'Can\'t find end tag corresponding to start tag "{tag}"')
        self.entities.sort(key=lambda e: (e["offset"], -e["length"]))
        return "".join(self.parts), self.entities

    def _entity_for(self, tag: str, attrs: dict[str, str | None]) -> dict[str, Any]:
        if tag in _SIMPLE_TAGS:
            return self._simple_entity(tag, attrs)
        if tag == "span" and attrs.get("class") == "tg-spoiler":
            return {"type": "spoiler"}
        if tag == "a" and attrs.get("href"):
            return _link_entity(attrs["href"] or "")
        if tag == "tg-emoji" and attrs.get("emoji-id"):
            return {"type": "custom_emoji", "custom_emoji_id": attrs["emoji-id"]}
        raise self._error(f'Unsupported start tag "{tag}" at byte offset {self._byte_pos()}')

    def _simple_entity(self, tag: str, attrs: dict[str, str | None]) -> dict[str, Any]:
        kind = _SIMPLE_TAGS[tag]
        if kind == "blockquote" and "expandable" in attrs:
            return {"type": "expandable_blockquote"}
        language = (attrs.get("class") or "").removeprefix("language-")
        if tag == "code" and self.stack and self.stack[-1][0] == "pre":
            if language:
                self.stack[-1][2]["language"] = language
            return {"type": kind, "_inside_pre": True}  # Telegram folds it into "pre"
        return {"type": kind}

    def _byte_pos(self) -> int:
        line, column = self.getpos()
        lines = self.source.split("\n")
        prefix = "\n".join(lines[: line - 1] + [lines[line - 1][:column]])
        return len(prefix.encode())

    @staticmethod
    def _error(detail: str) -> ApiError:
        return bad_request(f"can't parse entities: {detail}")


def _link_entity(href: str) -> dict[str, Any]:
    match = re.fullmatch(r"tg://user\?id=(\d+)", href)
    if match:
        return {
            "type": "text_mention",
            "user": {"id": int(match.group(1)), "is_bot": False, "first_name": ""},
        }
    return {"type": "text_link", "url": href}


def parse_text(text: str, parse_mode: str | None) -> tuple[str, list[dict[str, Any]] | None]:
    """Apply ``parse_mode``; only HTML is parsed, Markdown modes pass through verbatim."""
    if (parse_mode or "").upper() != "HTML":
        return text, None
    plain, entities = _HtmlEntities(text).parse()
    return plain, entities or None


def check_message_text(text: str | None) -> None:
    """Telegram's refusals for message text, after parse_mode is applied."""
    if text is None or not text.strip():
        raise bad_request("message text is empty")
    if len(text) > MAX_TEXT:
        raise bad_request("message is too long")


def check_caption(caption: str | None) -> None:
    if caption is not None and len(caption) > MAX_CAPTION:
        raise bad_request("message caption is too long")


def normalize_markup(markup: Any) -> dict[str, Any] | None:
    """Validate ``reply_markup``; only inline keyboards are attached to the message."""
    if markup is None:
        return None
    if not isinstance(markup, dict):
        raise bad_request("can't parse reply keyboard markup JSON object")
    keyboard = markup.get("inline_keyboard")
    if keyboard is None:
        return None
    if not isinstance(keyboard, list) or not all(isinstance(row, list) for row in keyboard):
        raise bad_request("can't parse inline keyboard markup JSON object")
    for row in keyboard:
        for button in row:
            _check_button(button)
    rows = [row for row in keyboard if row]
    return {"inline_keyboard": rows} if rows else None


def _check_button(button: Any) -> None:
    if not isinstance(button, dict) or not isinstance(button.get("text"), str):
        raise bad_request(
            'can\'t parse inline keyboard button: Field "text" must be of type String'
        )
    data = button.get("callback_data")
    if data is not None and not 1 <= len(str(data).encode()) <= MAX_CALLBACK_DATA:
        raise bad_request("BUTTON_DATA_INVALID")
    if len(button) == 1:
        raise bad_request(
            "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
        )


_URL_RE = re.compile(r"\bhttps?://[^\s<>\"]+[^\s<>\".,;:!?)\]'»]")
_VERBATIM = {"code", "pre", "text_link"}  # Telegram finds nothing inside these


def with_detected(text: str, entities: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """``entities`` plus what Telegram finds by itself in any message, a bot's too: the
    ``/commands`` a tap sends and the links, outside code and links already made."""
    given = list(entities or [])
    taken = [(e["offset"], e["offset"] + e["length"]) for e in given if e["type"] in _VERBATIM]
    found = []
    for kind, pattern in (("bot_command", _COMMAND_RE), ("url", _URL_RE)):
        for match in pattern.finditer(text):
            start = utf16_len(text[: match.start()])
            end = start + utf16_len(match.group())
            if not any(start < stop and begin < end for begin, stop in taken):
                found.append({"type": kind, "offset": start, "length": end - start})
    merged = sorted(given + found, key=lambda e: (e["offset"], -e["length"]))
    return merged or None


def command_entities(text: str) -> list[dict[str, Any]] | None:
    """The ``bot_command`` entities Telegram adds to user text like ``/start``."""
    found = [
        {
            "type": "bot_command",
            "offset": utf16_len(text[: match.start()]),
            "length": utf16_len(match.group()),
        }
        for match in _COMMAND_RE.finditer(text)
    ]
    return found or None


def normalize_origin(origin: dict[str, Any]) -> dict[str, Any]:
    """Complete a Bot API 7 ``MessageOrigin``; refuses shapes PTB could not parse."""
    kind = origin.get("type")
    result = {**origin, "date": int(origin.get("date") or now())}
    if kind == "user":
        result["sender_user"] = _origin_user(origin.get("sender_user"))
    elif kind == "hidden_user":
        if not origin.get("sender_user_name"):
            raise bad_request("hidden_user origin needs sender_user_name")
    elif kind == "channel":
        result["chat"] = _origin_chat(origin.get("chat"), "channel")
        result["message_id"] = int(origin.get("message_id") or 1)
    elif kind == "chat":
        result["sender_chat"] = _origin_chat(origin.get("sender_chat"), "supergroup")
    else:
        raise bad_request(f"unknown forward_origin type {kind!r}")
    return result


def _origin_user(user: Any) -> dict[str, Any]:
    if not isinstance(user, dict) or "id" not in user:
        raise bad_request("user origin needs sender_user with an id")
    return {"is_bot": False, "first_name": f"User {user['id']}", **user, "id": int(user["id"])}


def _origin_chat(chat: Any, default_type: str) -> dict[str, Any]:
    if not isinstance(chat, dict):
        raise bad_request(f"{default_type} origin needs a chat object")
    chat_id = int(chat.get("id") or -1001000000000)
    return {"type": default_type, "title": f"Chat {chat_id}", **chat, "id": chat_id}
