"""Pure in-memory state of the emulated Telegram: bots, chats, messages, update queues.

No aiohttp here: the HTTP layers (``botapi``, ``control``) translate requests into
calls on :class:`EmulatorState`, which enforces Telegram's bookkeeping rules — per-chat
message ids counting from 1, update ids that only grow, ``offset`` confirmation, rate
limits — and wakes long polls through :class:`~emulator.models.Signal`.
"""

from __future__ import annotations

import math
import re
import time
import zlib
from collections import deque
from typing import Any

from emulator.errors import ApiError, bad_request
from emulator.models import (
    FORUM_BOT_RIGHTS,
    BotState,
    Chat,
    FloodConfig,
    Signal,
    Stats,
    StoredMessage,
    WebhookConfig,
    now,
)

DEFAULT_USER: dict[str, Any] = {
    "id": 1000001,
    "is_bot": False,
    "first_name": "You",
    "username": "owner",
    "language_code": "en",
}

_TOKEN_RE = re.compile(r"^(\d+):[A-Za-z0-9_-]+$")


def bot_id_from_token(token: str) -> int:
    """Telegram tokens start with the bot's user id; other tokens get a stable id."""
    match = _TOKEN_RE.match(token)
    if match:
        return int(match.group(1))
    return 7_000_000_000 + zlib.crc32(token.encode()) % 1_000_000_000


def is_token_shaped(token: str) -> bool:
    """Whether Telegram would treat the string as a token at all (else it answers 404)."""
    return bool(_TOKEN_RE.match(token))


def normalize_user(user: dict[str, Any] | None) -> dict[str, Any]:
    """Fill the fields Telegram always sends for a human user."""
    if not user:
        return dict(DEFAULT_USER)
    merged = {"is_bot": False, "first_name": f"User {user.get('id', '')}".strip()}
    merged.update(user)
    merged["id"] = int(merged["id"])
    return merged


class EmulatorState:
    """The whole emulated Telegram, shared by the Bot API, the control API and tests."""

    def __init__(self) -> None:
        self.bots: dict[str, BotState] = {}
        self.users: dict[int, dict[str, Any]] = {}
        self.chats: dict[int, Chat] = {}
        self.files: dict[str, bytes] = {}
        self.file_folders: dict[str, str] = {}  # getFile's folder of a file ("voice", "music")
        self.stats = Stats()
        self.chat_signal = Signal()
        self._callback_counter = 0
        self._file_counter = 0

    # -- bots -------------------------------------------------------------------------

    def register_bot(
        self, token: str, *, first_name: str = "Aegis", username: str = "aegis_emulator_bot"
    ) -> BotState:
        """Create the bot for ``token`` once; later calls return the same record."""
        if token not in self.bots:
            user = {
                "id": bot_id_from_token(token),
                "is_bot": True,
                "first_name": first_name,
                "username": username,
            }
            self.bots[token] = BotState(token=token, user=user)
        return self.bots[token]

    def bot(self, token: str) -> BotState | None:
        return self.bots.get(token)

    # -- chats and users --------------------------------------------------------------

    def remember_user(self, user: dict[str, Any]) -> dict[str, Any]:
        """Record a user (later sightings update the name) and return the normalized form."""
        normalized = normalize_user(user)
        self.users[normalized["id"]] = normalized
        return normalized

    def private_chat(self, user: dict[str, Any]) -> Chat:
        """The private chat with ``user``; its id equals the user's id, as on Telegram."""
        info = {"id": user["id"], "type": "private", "first_name": user.get("first_name", "")}
        for key in ("last_name", "username"):
            if user.get(key):
                info[key] = user[key]
        return self.ensure_chat(info)

    def ensure_chat(self, info: dict[str, Any]) -> Chat:
        """Create a chat from its Bot API ``Chat`` object, or return the existing one."""
        chat_id = int(info["id"])
        if chat_id not in self.chats:
            self.chats[chat_id] = Chat(info={**info, "id": chat_id})
        return self.chats[chat_id]

    def group_chat(self, chat_id: int, chat: dict[str, Any] | None = None) -> Chat:
        """A group the user writes in; unknown negative ids become a new group."""
        if chat_id in self.chats:
            return self.chats[chat_id]
        info = {"type": "group", "title": f"Group {chat_id}", **(chat or {}), "id": chat_id}
        if info.get("is_forum"):
            return self.forum_chat(chat_id, str(info["title"]), info.get("username"))
        return self.ensure_chat(info)

    def forum_chat(self, chat_id: int, title: str, username: str | None = None) -> Chat:
        """A forum supergroup, created (or a group turned into one), with the bot as the
        administrator who may manage its topics, as a bot added to run a forum is."""
        if chat_id >= 0:
            raise bad_request("a supergroup's id is negative, e.g. -1001234567890")
        info: dict[str, Any] = {
            "id": chat_id,
            "type": "supergroup",
            "title": title,
            "is_forum": True,
        }
        if username:
            info["username"] = username
        chat = self.ensure_chat(info)
        chat.info.update(info)  # in place, for a group seen before: its messages share the dict
        # Message 1 of a supergroup is its creation notice, which bots never see; and thread
        # id 1 names the General topic, so no topic may ever get it.
        chat.next_message_id = max(chat.next_message_id, 2)
        if chat.bot_rights is None:
            chat.bot_rights = dict(FORUM_BOT_RIGHTS)
        self.touch(chat)
        return chat

    def chat(self, chat_id: int) -> Chat | None:
        return self.chats.get(chat_id)

    def resolve_chat(self, chat_ref: Any) -> Chat:
        """Look up a chat by id or ``@username`` the way sendMessage does."""
        if isinstance(chat_ref, str) and chat_ref.startswith("@"):
            wanted = chat_ref[1:].lower()
            for chat in self.chats.values():
                if str(chat.info.get("username", "")).lower() == wanted:
                    return chat
            raise bad_request("chat not found")
        try:
            chat = self.chats.get(int(chat_ref))
        except (TypeError, ValueError):
            chat = None
        if chat is None:
            raise bad_request("chat not found")
        return chat

    def touch(self, chat: Chat) -> None:
        """Mark a visible change in ``chat`` and wake the chat page's long poll."""
        chat.version += 1
        self.chat_signal.notify()

    def add_message(self, chat: Chat, sender: dict[str, Any], **fields: Any) -> StoredMessage:
        """Append a message with the chat's next id (ids count per chat from 1)."""
        message = StoredMessage(
            message_id=chat.next_message_id,
            chat=chat.info,
            sender=sender,
            from_bot=bool(sender.get("is_bot")),
            date=now(),
            **fields,
        )
        chat.next_message_id += 1
        chat.messages.append(message)
        self.touch(chat)
        return message

    def existing_message(self, chat: Chat, message_id: int, missing: str) -> StoredMessage:
        """A live (not deleted) message, else Telegram's ``missing`` refusal."""
        message = chat.find(message_id)
        if message is None or message.deleted:
            raise bad_request(missing)
        return message

    def store_file(self, content: bytes) -> tuple[str, str]:
        """Keep uploaded bytes so tests can read them back; returns (file_id, unique_id)."""
        self._file_counter += 1
        unique_id = f"AgAD{self._file_counter:06d}"
        file_id = f"BQACAgIAAx{self._file_counter:08d}emulated"
        self.files[file_id] = content
        return file_id, unique_id

    def keep_user_file(self, content: bytes, folder: str, prefix: str) -> tuple[str, str]:
        """Keep what a user sent (a voice note, an audio file) so the bot can fetch it with
        getFile; returns (file_id, unique_id). The same bytes are the same file, as on
        Telegram, where sending a file again carries the same ids."""
        digest = zlib.crc32(content)
        file_id = f"{prefix}User{digest:010d}{len(content):08d}"
        self.files[file_id] = content
        self.file_folders[file_id] = folder
        return file_id, f"AgADUser{zlib.crc32(file_id.encode()):010d}"

    # -- updates ----------------------------------------------------------------------

    def enqueue_update(self, bot: BotState, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for the bot, assigning the next update_id when absent."""
        if "update_id" not in update:
            update = {"update_id": bot.next_update_id, **update}
        elif isinstance(update["update_id"], int):
            bot.next_update_id = max(bot.next_update_id, update["update_id"])
        bot.next_update_id += 1
        bot.updates.append(update)
        self.stats.updates_injected += 1
        bot.signal.notify()
        return update

    def confirm_updates(self, bot: BotState, offset: int | None) -> None:
        """Forget what ``offset`` confirms; a negative offset keeps only the last N."""
        if offset is None or offset == 0:
            return
        if offset < 0:
            while len(bot.updates) > -offset:
                bot.updates.popleft()
            return
        while bot.updates and _update_id(bot.updates[0]) < offset:
            bot.updates.popleft()

    def pending_updates(self, bot: BotState, limit: int) -> list[dict[str, Any]]:
        """The oldest ``limit`` unconfirmed updates, counting first-time hand-outs."""
        batch = list(bot.updates)[:limit]
        for update in batch:
            if not update.get("_emulator_delivered"):
                self.stats.updates_delivered += 1
        for update in batch:
            update["_emulator_delivered"] = True
        return [_public(update) for update in batch]

    def drop_pending(self, bot: BotState) -> None:
        bot.updates.clear()

    # -- webhook ----------------------------------------------------------------------

    def set_webhook(self, bot: BotState, config: WebhookConfig | None) -> None:
        """Switch between webhook (``config``) and getUpdates (``None``) delivery."""
        bot.webhook = config
        bot.signal.notify()

    def webhook_delivered(self, bot: BotState, update_id: int) -> None:
        """Drop the update the webhook receiver acknowledged (it is always the head)."""
        if bot.updates and _update_id(bot.updates[0]) == update_id:
            bot.updates.popleft()
        self.stats.updates_delivered += 1
        self.stats.webhook_deliveries += 1

    def webhook_failed(self, bot: BotState, message: str) -> None:
        self.stats.webhook_failures += 1
        if bot.webhook is not None:
            bot.webhook.last_error_date = now()
            bot.webhook.last_error_message = message

    # -- callbacks --------------------------------------------------------------------

    def new_callback_id(self, bot: BotState) -> str:
        """Callback query ids are opaque unique strings on Telegram too."""
        self._callback_counter += 1
        callback_id = f"{bot.user['id']}{self._callback_counter:010d}"
        bot.callback_answers[callback_id] = None
        return callback_id

    def answer_callback(self, bot: BotState, callback_id: str, answer: dict[str, Any]) -> None:
        """Store the bot's answer; unknown or already-answered ids are refused."""
        if bot.callback_answers.get(callback_id, "missing") is not None:
            raise bad_request(
                "query is too old and response timeout expired or query ID is invalid"
            )
        bot.callback_answers[callback_id] = answer

    # -- flood control ----------------------------------------------------------------

    def configure_flood(self, bot: BotState, config: FloodConfig) -> None:
        bot.flood = config
        bot.chat_sends.clear()
        bot.global_sends.clear()

    def check_flood(self, bot: BotState, chat_id: int) -> None:
        """Record a send, or refuse it with 429 when it would exceed the bot's rates."""
        if not bot.flood.enabled:
            return
        moment = time.monotonic()
        chat_log = bot.chat_sends.setdefault(chat_id, deque())
        wait = max(
            _window_wait(chat_log, bot.flood.per_chat_per_second, moment),
            _window_wait(bot.global_sends, bot.flood.global_per_second, moment),
        )
        if wait > 0:
            self.stats.rate_limited += 1
            retry_after = max(1, math.ceil(wait))
            raise ApiError(429, f"Too Many Requests: retry after {retry_after}", retry_after)
        chat_log.append(moment)
        bot.global_sends.append(moment)


def _window_wait(log: deque[float], per_second: float, moment: float) -> float:
    """Seconds until one more event fits into a sliding window of ``1/rate`` granularity.

    A rate below 1 per second (e.g. 20 per minute for groups) widens the window so the
    budget stays a whole number of messages.
    """
    window = max(1.0, 1.0 / per_second) if per_second > 0 else 1.0
    budget = max(1, round(per_second * window))
    while log and moment - log[0] >= window:
        log.popleft()
    if len(log) < budget:
        return 0.0
    return window - (moment - log[0])


def _update_id(update: dict[str, Any]) -> int:
    value = update.get("update_id")
    return value if isinstance(value, int) else 0


def _public(update: dict[str, Any]) -> dict[str, Any]:
    """The update without the emulator's private bookkeeping keys."""
    return {key: value for key, value in update.items() if not key.startswith("_emulator")}
