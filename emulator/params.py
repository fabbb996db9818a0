"""Reading Bot API parameters the three ways clients send them.

PTB posts form fields whose non-string values are JSON-encoded, uploads as multipart,
and other clients send a JSON body; Telegram accepts all three plus the query string,
so every accessor here accepts both an already-typed value and its string form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, web

from emulator.errors import bad_request


@dataclass
class Upload:
    """A file part of a multipart request."""

    filename: str
    content: bytes
    content_type: str


@dataclass
class Params:
    """The merged parameters of one Bot API call."""

    values: dict[str, Any] = field(default_factory=dict)
    uploads: dict[str, Upload] = field(default_factory=dict)

    def raw(self, name: str) -> Any:
        return self.values.get(name)

    def has(self, name: str) -> bool:
        return self.values.get(name) not in (None, "")

    def str(self, name: str) -> str | None:
        value = self.values.get(name)
        return None if value is None else str(value)

    def int(self, name: str) -> int | None:
        value = self.values.get(name)
        if value is None or value == "":
            return None
        try:
            return int(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity
            raise bad_request(f"invalid {name} specified") from None

    def float(self, name: str) -> float | None:
        value = self.values.get(name)
        if value is None or value == "":
            return None
        try:
            return float(value)
        except (TypeError, ValueError):
            raise bad_request(f"invalid {name} specified") from None

    def bool(self, name: str) -> bool:
        value = self.values.get(name)
        if isinstance(value, str):
            return value.strip().lower() in ("true", "1", "yes")
        return bool(value)

    def json(self, name: str) -> Any:
        """A structured parameter (markup, reply parameters), JSON-decoded if sent as text."""
        value = self.values.get(name)
        if not isinstance(value, str):
            return value
        if not value:
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise bad_request(f"can't parse {name} JSON object") from None


async def read_params(request: web.Request) -> Params:
    """Merge the query string with a JSON, urlencoded or multipart body."""
    params = Params(values=dict(request.query))
    if not request.can_read_body:
        return params
    content_type = request.content_type
    if content_type == "application/json":
        await _read_json(request, params)
    elif content_type.startswith("multipart/"):
        await _read_multipart(request, params)
    else:
        params.values.update(await request.post())
    return params


async def _read_json(request: web.Request, params: Params) -> None:
    try:
        body = await request.json()
    except json.JSONDecodeError:
        raise bad_request("can't parse JSON") from None
    if not isinstance(body, dict):
        raise bad_request("JSON body must be an object")
    params.values.update(body)


async def _read_multipart(request: web.Request, params: Params) -> None:
    """Stream multipart parts so uploads are not capped by the app's body size limit."""
    reader = await request.multipart()
    async for part in reader:
        if not isinstance(part, BodyPartReader) or part.name is None:
            continue
        content = await part.read()
        if part.filename is not None:
            content_type = part.headers.get("Content-Type", "application/octet-stream")
            params.uploads[part.name] = Upload(part.filename, bytes(content), content_type)
        else:
            params.values[part.name] = bytes(content).decode("utf-8", "replace")
