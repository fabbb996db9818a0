"""The Bot API surface at ``/bot{token}/{method}``: dispatch plus update delivery methods.

Message-level methods live in :mod:`emulator.botapi_messages`; this module resolves the
token, parses parameters, calls the method and renders Telegram's response envelope.
"""

from __future__ import annotations

import asyncio
import hmac
import re
from typing import Any

from aiohttp import web

from emulator.botapi_forum import FORUM_METHODS
from emulator.botapi_messages import MESSAGE_METHODS
from emulator.calls import Call, Method
from emulator.errors import ApiError, bad_request, not_found
from emulator.keys import RUNTIME_KEY, STATE_KEY, TOKEN_KEY
from emulator.models import WebhookConfig
from emulator.params import Params, read_params
from emulator.state import is_token_shaped

WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)
POLL_CONFLICT = (
    "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running"
)
MAX_DOWNLOAD = 20 * 1024 * 1024  # getFile's limit: https://core.telegram.org/bots/api#getfile
_SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


async def handle_bot_call(request: web.Request) -> web.Response:
    """Entry point for every ``/bot{token}/{method}`` request (GET or POST)."""
    try:
        try:
            call = await _make_call(request)
        except ConnectionResetError:  # the bot hung up before its request arrived whole
            return web.Response(status=400, text="the request was cut off")
        name = request.match_info["method"]
        method = _method_table().get(name.lower())
        if method is None:
            raise not_found()
        _refuse_in_outage(call, name)
        result = await method(call)
    except ApiError as error:
        return web.json_response(error.to_payload(), status=error.code)
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        # A parameter of the wrong shape that no check above caught: Telegram answers such a
        # request with a 400 in its own shape, never a 500 (issue 21).
        refused = bad_request(f"invalid parameters: {type(error).__name__}")
        return web.json_response(refused.to_payload(), status=400)
    return web.json_response({"ok": True, "result": result})


async def _make_call(request: web.Request) -> Call:
    state = request.app[STATE_KEY]
    token = request.match_info["token"]
    bot = state.bot(token) if _same(token, request.app[TOKEN_KEY]) else None
    if bot is None:
        raise ApiError(401, "Unauthorized") if is_token_shaped(token) else not_found("")
    params = await read_params(request)
    return Call(state, bot, params, request.app[RUNTIME_KEY].closing)


def _refuse_in_outage(call: Call, method: str) -> None:
    """A configured outage (``POST /_emulator/outage``) answers instead of the method."""
    outage = call.bot.outage
    text = call.params.str("text") or call.params.str("caption") or ""
    if outage is not None and outage.hits(method, text):
        outage.refused += 1
        description = {502: "Bad Gateway", 429: "Too Many Requests: retry after 1"}
        retry_after = 1 if outage.status == 429 else None
        raise ApiError(
            outage.status, description.get(outage.status, "Internal Server Error"), retry_after
        )


def _method_table() -> dict[str, Method]:
    """Method names are case-insensitive on Telegram, so the table is keyed lowercase."""
    methods = {**_OWN_METHODS, **MESSAGE_METHODS, **FORUM_METHODS}
    return {name.lower(): method for name, method in methods.items()}


# -- identity and lifecycle --------------------------------------------------------------


async def get_me(call: Call) -> dict[str, Any]:
    return {
        **call.bot.user,
        "can_join_groups": True,
        "can_read_all_group_messages": False,
        "supports_inline_queries": False,
        "can_connect_to_business": False,
        "has_main_web_app": False,
    }


async def accept(call: Call) -> bool:
    """Methods that only change how the bot looks in clients; the emulator just agrees."""
    return True


async def get_chat(call: Call) -> dict[str, Any]:
    chat = call.state.resolve_chat(call.params.raw("chat_id"))
    return {
        **chat.info,
        "accent_color_id": 0,
        "max_reaction_count": 11,
        "accepted_gift_types": {
            "unlimited_gifts": False,
            "limited_gifts": False,
            "unique_gifts": False,
            "premium_subscription": False,
            "gifts_from_channels": False,  # PTB 22.6 on (Bot API 9.3) refuses a chat without it
        },
    }


async def get_file(call: Call) -> dict[str, Any]:
    """Files the bot uploaded, and the voice notes and audio users sent, can be fetched
    through ``/file/bot{token}/{file_path}``. Like Telegram, a file over 20 MB is refused:
    the Bot API downloads no more than that."""
    file_id = call.params.str("file_id") or ""
    content = call.state.files.get(file_id)
    if content is None:
        raise bad_request("invalid file_id")
    if len(content) > MAX_DOWNLOAD:
        raise bad_request("file is too big")
    folder = call.state.file_folders.get(file_id, "documents")
    return {
        "file_id": file_id,
        "file_unique_id": f"AgAD{file_id[-16:]}",
        "file_size": len(content),
        "file_path": f"{folder}/{file_id}",
    }


async def handle_file_download(request: web.Request) -> web.Response:
    """The download side of getFile, at Telegram's ``/file/bot{token}/{file_path}``."""
    if not _same(request.match_info["token"], request.app[TOKEN_KEY]):
        return web.json_response(ApiError(401, "Unauthorized").to_payload(), status=401)
    file_id = request.match_info["file_path"].rsplit("/", 1)[-1]
    content = request.app[STATE_KEY].files.get(file_id)
    if content is None:
        return web.json_response(not_found("").to_payload(), status=404)
    return web.Response(body=content, content_type="application/octet-stream")


async def send_chat_action(call: Call) -> bool:
    call.state.resolve_chat(call.params.raw("chat_id"))
    return True


# -- getUpdates --------------------------------------------------------------------------


async def get_updates(call: Call) -> list[dict[str, Any]]:
    """Long-poll like Telegram: confirm by offset, wait up to ``timeout`` for news."""
    bot, params = call.bot, call.params
    if bot.webhook is not None:
        raise ApiError(409, WEBHOOK_CONFLICT)
    call.state.confirm_updates(bot, params.int("offset"))
    limit = min(max(params.int("limit") or 100, 1), 100)
    bot.poll_generation += 1
    bot.signal.notify()  # an older long poll must now end with 409, as on Telegram
    await _wait_for_updates(call, bot.poll_generation, params.float("timeout") or 0.0)
    return call.state.pending_updates(bot, limit)


async def _wait_for_updates(call: Call, generation: int, poll_seconds: float) -> None:
    """Sleep until an update arrives, the poll time passes, or a newer poll takes over."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max(poll_seconds, 0.0), 50.0)
    bot = call.bot
    while not bot.updates and not call.closing.is_set():
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        await bot.signal.wait(remaining)
        if bot.poll_generation != generation:
            raise ApiError(409, POLL_CONFLICT)
        if bot.webhook is not None:
            raise ApiError(409, WEBHOOK_CONFLICT)


# -- webhooks ----------------------------------------------------------------------------


async def set_webhook(call: Call) -> bool:
    """Switch to webhook delivery; an empty url means "remove", as on Telegram."""
    params = call.params
    url = params.str("url") or ""
    if not url:
        return await delete_webhook(call)
    if not url.startswith(("http://", "https://")):
        raise bad_request("bad webhook: An HTTPS URL must be provided for webhook")
    secret = params.str("secret_token")
    if secret is not None and not _SECRET_RE.match(secret):
        raise bad_request("secret token contains unallowed characters")
    if params.bool("drop_pending_updates"):
        call.state.drop_pending(call.bot)
    config = WebhookConfig(
        url=url,
        secret_token=secret,
        max_connections=params.int("max_connections") or 40,
        allowed_updates=params.json("allowed_updates"),
    )
    call.state.set_webhook(call.bot, config)
    return True


async def delete_webhook(call: Call) -> bool:
    if call.params.bool("drop_pending_updates"):
        call.state.drop_pending(call.bot)
    call.state.set_webhook(call.bot, None)
    return True


async def get_webhook_info(call: Call) -> dict[str, Any]:
    bot = call.bot
    info: dict[str, Any] = {
        "url": "",
        "has_custom_certificate": False,
        "pending_update_count": len(bot.updates),
    }
    hook = bot.webhook
    if hook is not None:
        info["url"] = hook.url
        info["max_connections"] = hook.max_connections
        if hook.allowed_updates is not None:
            info["allowed_updates"] = hook.allowed_updates
        if hook.last_error_date is not None:
            info["last_error_date"] = hook.last_error_date
            info["last_error_message"] = hook.last_error_message
    return info


# -- commands ----------------------------------------------------------------------------


def _commands_key(params: Params) -> str:
    """Commands are stored per (scope, language), like Telegram's command menus."""
    scope = params.json("scope") or {"type": "default"}
    if not isinstance(scope, dict):
        raise bad_request("can't parse BotCommandScope JSON object")
    parts = [scope.get("type", "default"), scope.get("chat_id"), scope.get("user_id")]
    return "|".join(str(part or "") for part in parts) + "|" + (params.str("language_code") or "")


async def set_my_commands(call: Call) -> bool:
    commands = call.params.json("commands")
    if not isinstance(commands, list) or len(commands) > 100:
        raise bad_request("can't parse commands JSON object")
    for command in commands:
        _check_command(command)
    call.bot.commands[_commands_key(call.params)] = [
        {"command": c["command"], "description": c["description"]} for c in commands
    ]
    return True


def _check_command(command: Any) -> None:
    name = command.get("command") if isinstance(command, dict) else None
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9_]{1,32}", name):
        raise bad_request("BOT_COMMAND_INVALID")
    description = command.get("description")
    if not isinstance(description, str) or not 1 <= len(description) <= 256:
        raise bad_request("command description must be non-empty")


async def get_my_commands(call: Call) -> list[dict[str, Any]]:
    return call.bot.commands.get(_commands_key(call.params), [])


async def delete_my_commands(call: Call) -> bool:
    call.bot.commands.pop(_commands_key(call.params), None)
    return True


_OWN_METHODS: dict[str, Method] = {
    "getMe": get_me,
    "logOut": accept,
    "close": accept,
    "getChat": get_chat,
    "getFile": get_file,
    "sendChatAction": send_chat_action,
    "setMyDescription": accept,
    "setMyShortDescription": accept,
    "setMyName": accept,
    "setChatMenuButton": accept,
    "getUpdates": get_updates,
    "setWebhook": set_webhook,
    "deleteWebhook": delete_webhook,
    "getWebhookInfo": get_webhook_info,
    "setMyCommands": set_my_commands,
    "getMyCommands": get_my_commands,
    "deleteMyCommands": delete_my_commands,
}


def _same(given: str, token: str) -> bool:
    """Constant-time, like every secret comparison in aegis."""
    return hmac.compare_digest(given.encode(), token.encode())
