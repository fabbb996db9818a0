"""The one error type the emulator raises for a refused Bot API or control request.

It lives apart from aiohttp so that the pure state layer can refuse operations with
exactly the status and description Telegram would use, and the HTTP layers only
translate it into a response.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request Telegram would refuse: HTTP status plus Telegram's description."""

    def __init__(self, code: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.code = code
        self.description = description
        self.retry_after = retry_after

    def to_payload(self) -> dict[str, Any]:
        """Render the error in the exact JSON shape of the Bot API."""
        payload: dict[str, Any] = {
            "ok": False,
            "error_code": self.code,
            "description": self.description,
        }
        if self.retry_after is not None:
            payload["parameters"] = {"retry_after": self.retry_after}
        return payload


def bad_request(detail: str) -> ApiError:
    """Shorthand for Telegram's most common refusal, ``400 Bad Request: ...``."""
    return ApiError(400, f"Bad Request: {detail}")


def not_found(detail: str = "method not found") -> ApiError:
    """Telegram answers 404 for unknown methods and malformed tokens."""
    return ApiError(404, f"Not Found: {detail}" if detail else "Not Found")
