"""What an update must look like to be recorded, and what is made of its text on the way in.

Everything refused here is refused before a row is written (the webhook answers 400, long
polling skips it with a line in the log): an update no database can hold, or of a shape
Telegram never sends, which would otherwise be recorded and then crash its handler (issue 21).

- ``update_id`` and every other integer fit a signed 64-bit column (BigInteger on both
  databases); Telegram's own ids fit in 52 bits, so nothing real is refused.
- Nesting past ``MAX_DEPTH``: Telegram's deepest update (a reply inside a message, its entities,
  a keyboard) is about a dozen levels; the limit stops a body that would exhaust the stack.
- No NaN or infinity: not JSON, and Postgres refuses them.
- A message, an edit, a post, a button tap and a member change carry the fields Telegram always
  sends and every handler relies on, of the right types (``chat`` an object with an integer id
  and a type, ``from`` a user with an id, ``is_bot`` and a first name, a tap's
  ``chat_instance``, ...): what PTB needs to build the update at all.

NUL and lone surrogates are not refused: each becomes U+FFFD, the replacement character, in
keys and strings alike. Postgres text and JSON cannot hold U+0000, and a lone surrogate is not
encodable in the UTF-8 both databases store, so neither can be kept as it came on both
databases. Refusing would lose the owner's message (and Telegram would offer it again for a
day); replacing keeps it, and the mark shows where a character could not be kept.
"""

from __future__ import annotations

import math
import re
from typing import Any

from bot.errors import TransportError

MAX_DEPTH = 64
INT_RANGE = range(-(2**63), 2**63)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_MESSAGES = ("message", "edited_message", "channel_post", "edited_channel_post")
_MEMBERS = ("my_chat_member", "chat_member", "chat_join_request")


def checked_update(payload: Any) -> dict[str, Any]:
    """The update as it will be recorded, or TransportError saying why it cannot be."""
    if not isinstance(payload, dict):
        raise TransportError("an update must be a JSON object")
    update_id = payload.get("update_id")
    if not _is_int(update_id) or not 0 <= update_id < 2**63:
        raise TransportError("an update needs an update_id from 0 to 2^63 - 1")
    cleaned = _storable(payload, 0)
    _check_shape(cleaned)
    return cleaned


def _storable(value: Any, depth: int) -> Any:
    """``value`` with NUL and lone surrogates replaced, checked for depth and number ranges."""
    if depth > MAX_DEPTH:
        raise TransportError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_storable(key, depth): _storable(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_storable(item, depth + 1) for item in value]
    if _is_int(value) and value not in INT_RANGE:
        raise TransportError("an integer does not fit in 64 bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise TransportError("a number is not finite")
    return value


def _check_shape(update: dict[str, Any]) -> None:
    for kind in _MESSAGES:
        if kind in update:
            _message(update[kind], kind)
    if "callback_query" in update:
        _callback_query(update["callback_query"])
    for kind in _MEMBERS:
        if kind in update:
            body = _object(update[kind], kind)
            _chat(body.get("chat"), f"{kind}.chat")
            _user(body.get("from"), f"{kind}.from")


def _message(body: Any, where: str, *, replied: bool = False) -> None:
    body = _object(body, where)
    _field(body, "message_id", int, where)
    _field(body, "date", int, where)
    _chat(body.get("chat"), f"{where}.chat")
    for name in ("from", "sender_chat"):
        if name in body:
            check = _user if name == "from" else _chat
            check(body[name], f"{where}.{name}")
    for name in ("text", "caption"):
        if name in body:
            _field(body, name, str, where)
    for name in ("entities", "caption_entities"):
        if name in body:
            _entities(body[name], f"{where}.{name}")
    if "reply_to_message" in body and not replied:  # Telegram nests replies one level only
        _message(body["reply_to_message"], f"{where}.reply_to_message", replied=True)
    if "forward_origin" in body:
        _field(_object(body["forward_origin"], f"{where}.forward_origin"), "type", str, where)


def _callback_query(body: Any) -> None:
    body = _object(body, "callback_query")
    _field(body, "id", str, "callback_query")
    _field(body, "chat_instance", str, "callback_query")
    _user(body.get("from"), "callback_query.from")
    if "data" in body:
        _field(body, "data", str, "callback_query")
    if "message" in body:  # an old message may come back "inaccessible": chat, id, date 0
        message = _object(body["message"], "callback_query.message")
        _field(message, "message_id", int, "callback_query.message")
        _chat(message.get("chat"), "callback_query.message.chat")


def _chat(body: Any, where: str) -> None:
    body = _object(body, where)
    _field(body, "id", int, where)
    _field(body, "type", str, where)


def _user(body: Any, where: str) -> None:
    body = _object(body, where)
    _field(body, "id", int, where)
    _field(body, "is_bot", bool, where)
    _field(body, "first_name", str, where)
    for name in ("last_name", "username", "language_code"):
        if name in body:
            _field(body, name, str, where)


def _entities(value: Any, where: str) -> None:
    if not isinstance(value, list):
        raise TransportError(f"{where} must be a list")
    for entity in value:
        entity = _object(entity, where)
        _field(entity, "type", str, where)
        _field(entity, "offset", int, where)
        _field(entity, "length", int, where)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TransportError(f"{where} must be an object")
    return value


def _field(body: dict[str, Any], name: str, kind: type, where: str) -> None:
    value = body.get(name)
    valid = _is_int(value) if kind is int else isinstance(value, kind)
    if not valid:
        raise TransportError(f"{where}.{name} must be {_NAMES[kind]}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_NAMES = {int: "an integer", str: "a string", bool: "true or false"}
