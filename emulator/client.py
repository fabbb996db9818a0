"""Async client for the control API: the user's side of the emulator, for tests.

Talks HTTP like the chat page does, so tests exercise the same path a person would.
Each call opens a short-lived session unless one is passed in, so a forgotten
``close()`` never leaks connections.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp


class EmulatorClientError(RuntimeError):
    """The control API refused a request; ``status`` and ``payload`` say why."""

    def __init__(self, status: int, payload: Any) -> None:
        super().__init__(f"emulator control API answered {status}: {payload}")
        self.status = status
        self.payload = payload


class EmulatorClient:
    """Drive a running emulator at ``base_url`` (its root, e.g. ``http://h:p/emulator``)."""

    def __init__(
        self, base_url: str, key: str, *, session: aiohttp.ClientSession | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"X-Emulator-Key": key}
        self._session = session

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        wait: float = 0.0,
    ) -> Any:
        timeout = aiohttp.ClientTimeout(total=wait + 15)
        url = f"{self.base_url}/_emulator/{path}"
        if self._session is not None:
            return await _send(self._session, method, url, self._headers, json, params, timeout)
        async with aiohttp.ClientSession() as session:
            return await _send(session, method, url, self._headers, json, params, timeout)

    # -- user actions ------------------------------------------------------------------

    async def send_message(
        self,
        text: str | None = None,
        user: dict[str, Any] | None = None,
        chat_id: int | None = None,
        forward_origin: dict[str, Any] | None = None,
        reply_to_message_id: int | None = None,
        *,
        photo: dict[str, Any] | None = None,
        document: dict[str, Any] | None = None,
        voice: dict[str, Any] | None = None,
        audio: dict[str, Any] | None = None,
        caption: str | None = None,
        media_group_id: str | None = None,
        message_thread_id: int | None = None,
    ) -> dict[str, Any]:
        """Write as ``user`` (default DEFAULT_USER); returns ``{"update_id", "message"}``.

        ``photo`` or ``document`` (e.g. ``{"file_name": "a.jpg"}``) sends a file, with
        ``caption`` (or ``text``) as its caption or none at all; messages sharing a
        ``media_group_id`` make one album. ``voice`` or ``audio`` (e.g. ``{"duration": 42,
        "data": "<base64 of the recording>"}``) sends a recording the bot can download.
        ``message_thread_id`` writes in that topic of the forum ``chat_id``.
        """
        body = _without_none(
            text=text,
            user=user,
            chat_id=chat_id,
            forward_origin=forward_origin,
            reply_to_message_id=reply_to_message_id,
            photo=photo,
            document=document,
            voice=voice,
            audio=audio,
            caption=caption,
            media_group_id=media_group_id,
            message_thread_id=message_thread_id,
        )
        return await self._request("POST", "messages", json=body)

    async def inject_message(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a full ``/_emulator/messages`` body (group ``chat``, ``document``, ...)."""
        return await self._request("POST", "messages", json=body)

    async def edit_message(
        self, chat_id: int, message_id: int, text: str, user: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        body = _without_none(chat_id=chat_id, message_id=message_id, text=text, user=user)
        return await self._request("POST", "edits", json=body)

    async def tap(
        self, chat_id: int, message_id: int, data: str, user: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Tap an inline button; returns ``{"update_id", "callback_query_id", ...}``."""
        body = _without_none(chat_id=chat_id, message_id=message_id, data=data, user=user)
        return await self._request("POST", "callbacks", json=body)

    async def callback_answer(self, callback_query_id: str) -> dict[str, Any] | None:
        """The bot's answerCallbackQuery (text, show_alert, ...), or None if not yet."""
        return await self._request("GET", f"callbacks/{callback_query_id}")

    async def inject_update(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self._request("POST", "updates", json=raw)

    async def block(self, chat_id: int, blocked: bool = True) -> dict[str, Any]:
        """Make the user block (or unblock) the bot: sends then fail with 403."""
        return await self._request("POST", "block", json={"chat_id": chat_id, "blocked": blocked})

    # -- chats and forum topics ----------------------------------------------------------

    async def chats(self) -> list[dict[str, Any]]:
        """Every chat: ``{"chat": <Bot API Chat>, "version", "bot_rights"}`` each."""
        return (await self._request("GET", "chats"))["chats"]

    async def create_forum(
        self, chat_id: int, title: str, *, username: str | None = None
    ) -> dict[str, Any]:
        """Make ``chat_id`` (negative) a forum supergroup whose administrator the bot is, with
        the rights to manage topics and delete messages; returns the chat as ``chats`` does."""
        body = _without_none(chat_id=chat_id, title=title, username=username)
        return await self._request("POST", "forums", json=body)

    async def set_bot_rights(self, chat_id: int, **rights: bool) -> dict[str, Any]:
        """Grant or take the bot's administrator rights in a chat, e.g.
        ``set_bot_rights(chat_id, can_manage_topics=False)``; returns the chat as ``chats``."""
        return await self._request("POST", f"chats/{chat_id}/bot_rights", json=rights)

    async def topics(self, chat_id: int) -> list[dict[str, Any]]:
        """The forum's live topics (ForumTopic objects plus ``is_closed``), oldest first."""
        return (await self._request("GET", f"chats/{chat_id}/topics"))["topics"]

    async def create_topic(
        self,
        chat_id: int,
        name: str,
        *,
        icon_color: int | None = None,
        icon_custom_emoji_id: str | None = None,
        user: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Open a topic as ``user``; returns ``{"update_id", "topic", "message"}``, the message
        being the ``forum_topic_created`` service message the bot receives."""
        body = _without_none(
            name=name, icon_color=icon_color, icon_custom_emoji_id=icon_custom_emoji_id, user=user
        )
        return await self._request("POST", f"chats/{chat_id}/topics", json=body)

    # -- transcript --------------------------------------------------------------------

    async def chat(
        self,
        chat_id: int,
        after: int = 0,
        version: int | None = None,
        wait: float = 0.0,
        *,
        message_thread_id: int | None = None,
    ) -> dict[str, Any]:
        """Raw transcript call: ``{"chat_id", "version", "messages"}``, optionally long-polled;
        with ``message_thread_id``, only that forum topic's messages."""
        params: dict[str, Any] = {"after": after, "wait": wait}
        if version is not None:
            params["version"] = version
        if message_thread_id is not None:
            params["message_thread_id"] = message_thread_id
        return await self._request("GET", f"chats/{chat_id}/messages", params=params, wait=wait)

    async def messages(
        self, chat_id: int, after: int = 0, *, message_thread_id: int | None = None
    ) -> list[dict[str, Any]]:
        """Messages with id > ``after``, user's and bot's, in order (deleted ones flagged);
        with ``message_thread_id``, only that forum topic's."""
        return (await self.chat(chat_id, after, message_thread_id=message_thread_id))["messages"]

    async def wait_for_bot_messages(
        self,
        chat_id: int,
        count: int,
        after: int = 0,
        timeout: float = 10.0,  # noqa: ASYNC109
        *,
        message_thread_id: int | None = None,
    ) -> list[dict[str, Any]]:
        """Return once ``count`` bot messages with id > ``after`` exist (deleted included),
        counting only those in forum topic ``message_thread_id`` when it is given.

        Raises ``asyncio.TimeoutError`` after ``timeout`` seconds; waits by long-polling
        the chat's version, so it reacts as soon as the bot sends.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        version: int | None = None
        while True:
            remaining = deadline - loop.time()
            wait = min(max(remaining, 0.0), 25.0) if version is not None else 0.0
            data = await self.chat(
                chat_id, after, version, wait, message_thread_id=message_thread_id
            )
            found = [m for m in data["messages"] if m["from_bot"]]
            if len(found) >= count:
                return found
            if deadline - loop.time() <= 0:
                raise TimeoutError(
                    f"{len(found)} of {count} bot messages in chat {chat_id} after {timeout}s"
                )
            version = data["version"]

    async def file_content(self, file_id: str) -> bytes:
        """Bytes of a document or photo the bot uploaded."""
        return await self._request("GET", f"files/{file_id}")

    # -- configuration -----------------------------------------------------------------

    async def set_flood(
        self, enabled: bool, per_chat_per_second: float = 1, global_per_second: float = 30
    ) -> dict[str, Any]:
        body = {
            "enabled": enabled,
            "per_chat_per_second": per_chat_per_second,
            "global_per_second": global_per_second,
        }
        return await self._request("POST", "flood", json=body)

    async def outage(
        self,
        status: int,
        *methods: str,
        count: int | None = None,
        text_contains: str | None = None,
    ) -> dict[str, Any]:
        """Answer the bot's calls (of ``methods``, or all; with ``text_contains``, only those
        whose text or caption holds it) with ``status``; 0 ends it."""
        body = {
            "status": status,
            "methods": list(methods),
            "count": count,
            "text_contains": text_contains,
        }
        return await self._request("POST", "outage", json=body)

    async def stats(self) -> dict[str, int]:
        return await self._request("GET", "stats")

    async def bot_info(self) -> dict[str, Any]:
        """The bot's identity, command menus and webhook as the emulator holds them."""
        return await self._request("GET", "bot")


async def _send(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    headers: dict[str, str],
    json: Any,
    params: dict[str, Any] | None,
    client_timeout: aiohttp.ClientTimeout,
) -> Any:
    async with session.request(
        method, url, json=json, params=params, headers=headers, timeout=client_timeout
    ) as response:
        if response.content_type != "application/json":
            if response.status >= 400:
                raise EmulatorClientError(response.status, await response.text())
            return await response.read()
        payload = await response.json()
        if response.status >= 400:
            raise EmulatorClientError(response.status, payload)
        return payload


def _without_none(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}
