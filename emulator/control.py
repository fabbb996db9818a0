"""JSON control API under ``/_emulator/``: the person's (and the tests') side of Telegram.

Every request must carry the control key (``?key=`` or ``X-Emulator-Key``), because
whoever holds it can impersonate the bot's owner to the bot.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from emulator.errors import ApiError, bad_request
from emulator.forum import require_forum
from emulator.inject import (
    inject_callback,
    inject_edit,
    inject_message,
    inject_raw,
    inject_topic,
)
from emulator.keys import CONTROL_KEY, RUNTIME_KEY, STATE_KEY, TOKEN_KEY
from emulator.models import FORUM_BOT_RIGHTS, BotState, Chat, FloodConfig, Outage
from emulator.state import EmulatorState

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_WAIT = 30.0


def _authorized(request: web.Request) -> bool:
    supplied = request.headers.get("X-Emulator-Key") or request.query.get("key") or ""
    return hmac.compare_digest(supplied.encode(), request.app[CONTROL_KEY].encode())


def guarded(handler: Handler) -> Handler:
    """Refuse requests without the control key; render ApiError as Telegram-shaped JSON."""

    async def wrapper(request: web.Request) -> web.StreamResponse:
        if not _authorized(request):
            return web.json_response(
                {"ok": False, "error_code": 403, "description": "Forbidden: bad control key"},
                status=403,
            )
        try:
            return await handler(request)
        except ApiError as error:
            return web.json_response(error.to_payload(), status=error.code)
        except (KeyError, TypeError, ValueError) as error:
            return web.json_response(
                bad_request(f"invalid request: {error}").to_payload(), status=400
            )

    return wrapper


def _state(request: web.Request) -> EmulatorState:
    return request.app[STATE_KEY]


def _bot(request: web.Request) -> BotState:
    return request.app[STATE_KEY].register_bot(request.app[TOKEN_KEY])


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise bad_request("body must be JSON") from None
    if not isinstance(body, dict):
        raise bad_request("body must be a JSON object")
    return body


# -- user actions --------------------------------------------------------------------------


async def post_message(request: web.Request) -> web.Response:
    update = inject_message(_state(request), _bot(request), await _body(request))
    return web.json_response({"update_id": update["update_id"], "message": update["message"]})


async def post_edit(request: web.Request) -> web.Response:
    update = inject_edit(_state(request), _bot(request), await _body(request))
    return web.json_response(
        {"update_id": update["update_id"], "edited_message": update["edited_message"]}
    )


async def post_callback(request: web.Request) -> web.Response:
    return web.json_response(inject_callback(_state(request), _bot(request), await _body(request)))


async def get_callback_answer(request: web.Request) -> web.Response:
    answers = _bot(request).callback_answers
    callback_id = request.match_info["callback_id"]
    if callback_id not in answers:
        raise ApiError(404, "Not Found: unknown callback query")
    return web.json_response(answers[callback_id])  # JSON null until the bot answers


async def post_update(request: web.Request) -> web.Response:
    update = inject_raw(_state(request), _bot(request), await _body(request))
    return web.json_response({"update_id": update.get("update_id")})


async def post_block(request: web.Request) -> web.Response:
    """Simulate the user blocking (or unblocking) the bot in their private chat."""
    body = await _body(request)
    chat = _state(request).chat(int(body["chat_id"]))
    if chat is None:
        raise ApiError(404, "Not Found: chat not found")
    chat.blocked_bot = bool(body.get("blocked", True))
    return web.json_response({"chat_id": chat.chat_id, "blocked": chat.blocked_bot})


# -- chats and forum topics ----------------------------------------------------------------


def _chat_view(chat: Chat) -> dict[str, Any]:
    return {"chat": chat.info, "version": chat.version, "bot_rights": chat.bot_rights}


def _known_chat(request: web.Request) -> Chat:
    chat = _state(request).chat(int(request.match_info["chat_id"]))
    if chat is None:
        raise ApiError(404, "Not Found: chat not found")
    return chat


async def get_chats(request: web.Request) -> web.Response:
    """Every chat the emulator holds, so the chat page can offer them."""
    chats = [_chat_view(chat) for chat in _state(request).chats.values()]
    return web.json_response({"chats": chats})


async def post_forum(request: web.Request) -> web.Response:
    """Create a forum supergroup ``{"chat_id": -100…, "title": …, "username": …}``, the bot
    its administrator with the rights to manage topics."""
    body = await _body(request)
    chat_id, title = int(body["chat_id"]), str(body.get("title") or "Forum")
    username = body.get("username")
    chat = _state(request).forum_chat(chat_id, title, None if username is None else str(username))
    return web.json_response(_chat_view(chat))


async def post_bot_rights(request: web.Request) -> web.Response:
    """Grant or take the bot's administrator rights in a chat: ``{"can_manage_topics": false}``.
    The emulator checks these rights only; any other is refused so a typo cannot pass."""
    body = await _body(request)
    unknown = sorted(set(body) - set(FORUM_BOT_RIGHTS))
    if unknown or not all(isinstance(value, bool) for value in body.values()):
        raise bad_request(f"rights are true or false, of {sorted(FORUM_BOT_RIGHTS)}: {unknown}")
    chat = _known_chat(request)
    chat.bot_rights = {**(chat.bot_rights or {}), **body}
    _state(request).touch(chat)
    return web.json_response(_chat_view(chat))


async def get_topics(request: web.Request) -> web.Response:
    """A forum's live topics, in the order they were created."""
    chat = _known_chat(request)
    require_forum(chat)
    topics = [topic.to_view() for topic in chat.topics.values()]
    return web.json_response({"chat_id": chat.chat_id, "topics": topics})


async def post_topic(request: web.Request) -> web.Response:
    """A user opens a topic: ``{"name": …, "icon_color": …, "user": {…}}``."""
    body = await _body(request)
    chat_id = int(request.match_info["chat_id"])
    return web.json_response(inject_topic(_state(request), _bot(request), chat_id, body))


# -- transcript ----------------------------------------------------------------------------


def _chat_ready(chat: Chat | None, after: int, version: int | None) -> bool:
    if chat is None:
        return False
    if version is not None:
        return chat.version > version
    return bool(chat.messages) and chat.messages[-1].message_id > after


async def _wait_for_chat(
    request: web.Request, chat_id: int, after: int, version: int | None, wait: float
) -> None:
    """Long-poll until the chat has news (a newer message, or a newer version)."""
    state = _state(request)
    closing = request.app[RUNTIME_KEY].closing
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max(wait, 0.0), MAX_WAIT)
    while not _chat_ready(state.chat(chat_id), after, version) and not closing.is_set():
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        await state.chat_signal.wait(remaining)


async def get_chat_messages(request: web.Request) -> web.Response:
    chat_id = int(request.match_info["chat_id"])
    query = request.query
    after = int(query.get("after", 0))
    version = int(query["version"]) if "version" in query else None
    thread_id = int(query["message_thread_id"]) if "message_thread_id" in query else None
    await _wait_for_chat(request, chat_id, after, version, float(query.get("wait", 0)))
    chat = _state(request).chat(chat_id)
    messages = [
        m.to_view()
        for m in (chat.messages if chat else [])
        if m.message_id > after and (thread_id is None or m.message_thread_id == thread_id)
    ]
    payload = {"chat_id": chat_id, "version": chat.version if chat else 0, "messages": messages}
    return web.json_response(payload)


async def get_file(request: web.Request) -> web.Response:
    """The bytes of a file the bot uploaded, so tests and the page can inspect it."""
    content = _state(request).files.get(request.match_info["file_id"])
    if content is None:
        raise ApiError(404, "Not Found: file not found")
    return web.Response(body=content, content_type="application/octet-stream")


# -- configuration and introspection -------------------------------------------------------


async def post_flood(request: web.Request) -> web.Response:
    body = await _body(request)
    config = FloodConfig(
        enabled=bool(body.get("enabled", True)),
        per_chat_per_second=float(body.get("per_chat_per_second", 1)),
        global_per_second=float(body.get("global_per_second", 30)),
    )
    _state(request).configure_flood(_bot(request), config)
    return web.json_response(vars(config))


async def post_outage(request: web.Request) -> web.Response:
    """Answer the bot's calls with an error: ``{"status": 500, "methods": ["editMessageText"],
    "count": 3}``, with ``"text_contains": "…"`` only the calls whose text or caption holds it;
    ``{"status": 0}`` ends it. Returns how many calls the last one answered."""
    body = await _body(request)
    bot = _bot(request)
    ended = bot.outage.refused if bot.outage else 0
    status = int(body.get("status", 0))
    if status:
        methods = frozenset(str(name).lower() for name in body.get("methods") or ())
        count = body.get("count")
        marker = body.get("text_contains")
        bot.outage = Outage(
            status,
            methods,
            None if count is None else int(count),
            None if marker is None else str(marker),
        )
    else:
        bot.outage = None
    return web.json_response({"refused": ended})


async def get_stats(request: web.Request) -> web.Response:
    bot = _bot(request)
    stats = {**_state(request).stats.as_dict(), "pending_updates": len(bot.updates)}
    return web.json_response(stats)


async def get_bot(request: web.Request) -> web.Response:
    """The bot as the emulator sees it: identity, command menus, webhook."""
    bot = _bot(request)
    hook = vars(bot.webhook) if bot.webhook else None
    return web.json_response({"user": bot.user, "commands": bot.commands, "webhook": hook})


def control_routes() -> list[web.RouteDef]:
    """All control endpoints, each behind the control key."""
    return [
        web.post("/_emulator/messages", guarded(post_message)),
        web.post("/_emulator/edits", guarded(post_edit)),
        web.post("/_emulator/callbacks", guarded(post_callback)),
        web.get("/_emulator/callbacks/{callback_id}", guarded(get_callback_answer)),
        web.post("/_emulator/updates", guarded(post_update)),
        web.post("/_emulator/block", guarded(post_block)),
        web.get("/_emulator/chats", guarded(get_chats)),
        web.post("/_emulator/forums", guarded(post_forum)),
        web.post("/_emulator/chats/{chat_id}/bot_rights", guarded(post_bot_rights)),
        web.get("/_emulator/chats/{chat_id}/topics", guarded(get_topics)),
        web.post("/_emulator/chats/{chat_id}/topics", guarded(post_topic)),
        web.get("/_emulator/chats/{chat_id}/messages", guarded(get_chat_messages)),
        web.get("/_emulator/files/{file_id}", guarded(get_file)),
        web.post("/_emulator/flood", guarded(post_flood)),
        web.post("/_emulator/outage", guarded(post_outage)),
        web.get("/_emulator/stats", guarded(get_stats)),
        web.get("/_emulator/bot", guarded(get_bot)),
    ]
