"""A request's body read up to a cap, for every route that takes one from outside (the
webhook, the federation): a body over the cap is refused as soon as that is known, never read
in full."""

from __future__ import annotations

from aiohttp import web


async def read_at_most(request: web.Request, limit: int) -> bytes | None:
    """The body, or None as soon as it is known to be over ``limit``."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
