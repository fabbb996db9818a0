"""Assembling the emulator into one aiohttp application (standalone or as a sub-app).

Mounted with ``parent.add_subapp("/emulator", app)`` the Bot API base URL becomes
``http://host:port/emulator/bot`` and the chat page ``/emulator/chat?key=...``.
"""

from __future__ import annotations

from aiohttp import web

from emulator.botapi import handle_bot_call, handle_file_download
from emulator.control import control_routes
from emulator.keys import CONTROL_KEY, RUNTIME_KEY, STATE_KEY, TOKEN_KEY, Runtime
from emulator.page import page_routes
from emulator.state import EmulatorState
from emulator.webhook import wake_long_polls, webhook_context

MAX_UPLOAD = 50 * 1024 * 1024  # Telegram's limit for bot uploads


def create_emulator_app(
    state: EmulatorState,
    *,
    token: str,
    control_key: str,
    bot_first_name: str = "Aegis",
    bot_username: str = "aegis_emulator_bot",
) -> web.Application:
    """Build the emulator app serving the bot identified by ``token``."""
    if not token or not control_key:
        raise ValueError("the emulator needs a bot token and a non-empty control key")
    state.register_bot(token, first_name=bot_first_name, username=bot_username)
    app = web.Application(client_max_size=MAX_UPLOAD)
    app[STATE_KEY] = state
    app[TOKEN_KEY] = token
    app[CONTROL_KEY] = control_key
    app[RUNTIME_KEY] = Runtime()
    app.add_routes(_bot_api_routes())
    app.add_routes(control_routes())
    app.add_routes(page_routes())
    app.cleanup_ctx.append(webhook_context)
    app.on_shutdown.append(wake_long_polls)
    return app


def _bot_api_routes() -> list[web.RouteDef]:
    return [
        web.get("/bot{token}/{method}", handle_bot_call, allow_head=False),
        web.post("/bot{token}/{method}", handle_bot_call),
        web.get("/file/bot{token}/{file_path:.+}", handle_file_download, allow_head=False),
    ]
