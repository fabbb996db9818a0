"""Callback data for inline buttons, signed so a tap on a button the bot never sent is refused.

Format fixed by the design: ``<kind>:<id>:<choice>:<mac>`` where ``mac`` is the first 10
characters of url-safe base64 of HMAC-SHA256(callback_key, "<kind>:<id>:<choice>"). Telegram
caps callback data at 64 bytes, so a payload that would not fit is refused when signing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

MAX_CALLBACK_BYTES = 64
MAC_LENGTH = 10


@dataclass(frozen=True)
class CallbackData:
    kind: str
    id: str
    choice: str


class CallbackSigner:
    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("the callback key must be at least 32 bytes")
        self._key = key

    def sign(self, kind: str, id: str, choice: str) -> str:
        for part in (kind, id, choice):
            if not part or ":" in part:
                raise ValueError("callback fields must be non-empty and contain no ':'")
        body = f"{kind}:{id}:{choice}"
        data = f"{body}:{self._mac(body)}"
        if len(data.encode()) > MAX_CALLBACK_BYTES:
            raise ValueError(f"callback data over {MAX_CALLBACK_BYTES} bytes: {body!r}")
        return data

    def verify(self, data: str) -> CallbackData | None:
        """The fields if the mac verifies, else None (tampered, foreign or malformed)."""
        parts = data.split(":")
        if len(parts) != 4 or not all(parts):
            return None
        body, mac = ":".join(parts[:3]), parts[3]
        if not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            return None
        return CallbackData(*parts[:3])

    def _mac(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode()[:MAC_LENGTH]
