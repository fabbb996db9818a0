"""The human-facing chat page: one self-contained HTML file, served as-is.

The page carries no secrets; it reads the control key from its own URL, so serving it
needs no key, while everything it does goes through the guarded control API.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from aiohttp import web

PAGE_PATH = Path(__file__).parent / "static" / "chat.html"

_HEADERS = {
    "Cache-Control": "no-store",
    # The key rides in the URL; never leak it to other origins via Referer.
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data: blob:; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


@cache
def _page_html() -> str:
    return PAGE_PATH.read_text(encoding="utf-8")


async def chat_page(request: web.Request) -> web.Response:
    return web.Response(text=_page_html(), content_type="text/html", headers=_HEADERS)


async def root_redirect(request: web.Request) -> web.Response:
    """``/`` → the chat page, keeping ``?key=`` and working under a mount prefix."""
    target = request.app.router["emulator_chat"].url_for()
    if request.query_string:
        target = target.with_query(request.query_string)
    raise web.HTTPFound(str(target))


def page_routes() -> list[web.RouteDef]:
    return [
        web.get("/chat", chat_page, name="emulator_chat"),
        web.get("/", root_redirect),
    ]
