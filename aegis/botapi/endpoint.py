"""The Bot API endpoint aegis talks to: Telegram's own, any server at AEGIS_TELEGRAM_API_URL,
or, with no token, the built-in emulator served by ``aegis web`` under ``/emulator``."""

from __future__ import annotations

import logging
import secrets

from telegram import Bot
from telegram.error import BadRequest

from aegis.botapi.http import AiohttpRequest
from bot.config.secrets import SecretFiles
from bot.config.settings import Settings
from emulator import DEFAULT_USER

EMULATOR_PREFIX = "/emulator"
logger = logging.getLogger(__name__)


class AegisBot(Bot):
    """PTB's Bot, except that answering a tap Telegram no longer holds is not an error.

    Telegram forgets a tap some seconds after it is made: one handled late (after an outage, a
    webhook delivered again) or one it never sent gets "query is too old or query id is invalid".
    The answer only stops the spinner in the client; the tap's work is what matters, and a
    handler that answers before its work would otherwise fail the whole update there.
    """

    __slots__ = ()

    async def answer_callback_query(self, callback_query_id, *args, **kwargs) -> bool:
        try:
            return await super().answer_callback_query(callback_query_id, *args, **kwargs)
        except BadRequest as exc:
            if "query is too old" not in exc.message.lower():
                raise
            logger.info("tap %s not answered: %s", callback_query_id, exc.message)
            return False


def emulator_token(settings: Settings) -> str:
    """The emulated bot's token, made once per data dir in Telegram's ``<id>:<secret>`` shape."""
    files = SecretFiles(settings.data_dir)
    token = files.get("emulator-token")
    if token is None:
        bot_id = secrets.randbelow(9 * 10**9) + 10**9
        token = files.put("emulator-token", f"{bot_id}:{secrets.token_urlsafe(26)}", exclusive=True)
    return token


def emulator_key(settings: Settings) -> str:
    """The key of the emulator's control API and chat page."""
    return SecretFiles(settings.data_dir).get_or_create("emulator-key", nbytes=18)


def bot_token(settings: Settings) -> str:
    if settings.telegram_token is not None:
        return settings.telegram_token.get_secret_value()
    return emulator_token(settings)


def bot_base_url(settings: Settings) -> str:
    if settings.telegram_token is None:
        return f"{settings.web_url}{EMULATOR_PREFIX}/bot"
    return settings.telegram_api_url or "https://api.telegram.org/bot"


def bot_file_url(settings: Settings) -> str:
    """Where getFile's ``file_path`` is downloaded from: ``/file/bot<token>/<file_path>`` beside
    the methods' ``/bot<token>/`` (Telegram's own layout, and a local Bot API server's)."""
    if settings.telegram_token is None:
        return f"{settings.web_url}{EMULATOR_PREFIX}/file/bot"
    base = settings.telegram_api_url
    if base and base.rstrip("/").endswith("/bot"):
        return base.rstrip("/")[: -len("/bot")] + "/file/bot"
    return "https://api.telegram.org/file/bot"


def chat_page_url(settings: Settings) -> str:
    return f"{settings.web_url}{EMULATOR_PREFIX}/chat?key={emulator_key(settings)}"


def make_bot(settings: Settings, *, read_timeout: float = 10.0) -> Bot:
    request = AiohttpRequest(
        connection_pool_size=32, read_timeout=read_timeout, connect_timeout=5.0, pool_timeout=5.0
    )
    # getUpdates has a client of its own, so a long poll never waits for a pooled connection.
    polling = AiohttpRequest(connection_pool_size=1, read_timeout=read_timeout)
    return AegisBot(
        bot_token(settings),
        base_url=bot_base_url(settings),
        base_file_url=bot_file_url(settings),
        request=request,
        get_updates_request=polling,
    )


def owner_chats(settings: Settings) -> list[int]:
    """Where scheduled work reports: the owners' private chats (a private chat's id is the
    user's id), else the emulator's owner when there is no bot token; possibly none."""
    if settings.owner_ids:
        return sorted(settings.owner_ids)
    return [DEFAULT_USER["id"]] if settings.uses_emulator else []
