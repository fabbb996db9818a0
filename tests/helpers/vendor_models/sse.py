"""Server-sent events, as the three wire formats stream them."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    return response


async def send(response: web.StreamResponse, data: Any, event: str | None = None) -> None:
    """One event; ``data`` is JSON-encoded unless it is a string (Chat's ``[DONE]``)."""
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    await response.write(f"{head}data: {payload}\n\n".encode())
