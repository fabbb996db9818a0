"""The Bot's HTTP client (aiohttp under PTB): what it sends, and how it fails, against a real
server on this machine. A silent server is a timeout, an absent one a network error, and
neither error's text holds the bot token, which is part of every URL."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, InputFile
from telegram.error import NetworkError, TimedOut

from aegis.botapi.http import AiohttpRequest
from tests.helpers.stack import free_port

TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
USER = {"id": 123456789, "is_bot": True, "first_name": "aegis", "username": "aegis_bot"}
CHAT = {"id": 42, "type": "private", "first_name": "Ada"}


@contextlib.asynccontextmanager
async def bot_api(
    seen: list, *, answer_after: float = 0.0, proxy_logins: list | None = None
) -> AsyncIterator[str]:
    """A Bot API stand-in that keeps what each call carried, answering after ``answer_after``;
    ``proxy_logins`` gets each call's Proxy-Authorization header (it can stand in for a proxy)."""
    proxy_logins = [] if proxy_logins is None else proxy_logins

    async def call(request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            body = {name: getattr(value, "filename", value) for name, value in form.items()}
        else:
            body = await request.json()
        seen.append((method, request.content_type, body))
        proxy_logins.append(request.headers.get("Proxy-Authorization"))
        await asyncio.sleep(answer_after)
        result = USER if method == "getMe" else {"message_id": 7, "date": 0, "chat": CHAT}
        return web.json_response({"ok": True, "result": result})

    app = web.Application()
    app.router.add_post("/bot{token}/{method}", call)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/bot"
    finally:
        await runner.cleanup()


def bot(base_url: str, **timeouts) -> Bot:
    return Bot(
        TOKEN,
        base_url=base_url,
        request=AiohttpRequest(**timeouts),
        get_updates_request=AiohttpRequest(**timeouts),
    )


async def test_a_call_without_a_file_goes_as_one_json_document():
    seen: list = []
    async with bot_api(seen) as url:
        async with bot(url) as client:
            markup = InlineKeyboardMarkup([[InlineKeyboardButton("Next", callback_data="n")]])
            message = await client.send_message(42, "hello", reply_markup=markup)
    assert message.message_id == 7
    method, content_type, body = seen[-1]
    assert (method, content_type) == ("sendMessage", "application/json")
    assert body["chat_id"] == "42" and body["text"] == "hello"
    keyboard = json.loads(body["reply_markup"])
    assert keyboard == {"inline_keyboard": [[{"text": "Next", "callback_data": "n"}]]}


async def test_a_file_goes_as_multipart_with_its_name_and_fields():
    seen: list = []
    async with bot_api(seen) as url:
        async with bot(url) as client:
            document = InputFile(b"the report", filename="отчёт final.txt")
            await client.send_document(42, document, caption="weekly")
    method, content_type, body = seen[-1]
    assert (method, content_type) == ("sendDocument", "multipart/form-data")
    assert body["caption"] == "weekly" and body["chat_id"] == "42"
    assert body["document"] == "отчёт final.txt"  # as named, not %-escaped


async def test_a_server_that_does_not_answer_in_time_is_a_timeout():
    async with bot_api([], answer_after=2.0) as url:
        client = bot(url, read_timeout=0.2)
        with pytest.raises(TimedOut) as raised:
            await client.get_me()
        await client.shutdown()
    assert TOKEN not in str(raised.value)


async def test_no_server_is_a_network_error_whose_text_holds_no_token():
    client = bot(f"http://127.0.0.1:{free_port()}/bot", connect_timeout=1.0)
    with pytest.raises(NetworkError) as raised:
        await client.get_me()
    await client.shutdown()
    assert not isinstance(raised.value, TimedOut)
    assert "aiohttp." in str(raised.value)
    assert TOKEN not in str(raised.value) and TOKEN.split(":")[1] not in str(raised.value)


async def test_the_client_works_again_after_a_shutdown():
    seen: list = []
    async with bot_api(seen) as url:
        request = AiohttpRequest()
        client = Bot(TOKEN, base_url=url, request=request, get_updates_request=AiohttpRequest())
        assert (await client.get_me()).username == "aegis_bot"
        await request.shutdown()
        assert (await client.get_me()).username == "aegis_bot"
        await request.shutdown()
    assert [method for method, _, _ in seen] == ["getMe", "getMe"]


async def test_an_http_proxy_from_the_environment_carries_the_calls(monkeypatch):
    seen: list = []
    async with bot_api(seen) as proxy_url:  # the stand-in answers whatever reaches it
        proxy = proxy_url.removesuffix("/bot")
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        # A host nobody can resolve: only the proxy can have answered.
        async with bot("http://api.telegram.invalid/bot") as client:
            assert (await client.get_me()).username == "aegis_bot"
    assert [method for method, _, _ in seen] == ["getMe", "getMe"]  # initialize, then ours


async def test_no_proxy_keeps_a_host_off_the_proxy(monkeypatch):
    seen: list = []
    async with bot_api(seen) as url:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")  # nothing there
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with bot(url) as client:
            assert (await client.get_me()).username == "aegis_bot"


async def test_a_proxy_aegis_cannot_use_is_refused_in_words_not_bypassed(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "socks5://user:secret@127.0.0.1:1080")
    monkeypatch.delenv("NO_PROXY", raising=False)
    client = bot("https://api.telegram.invalid/bot")
    with pytest.raises(NetworkError, match="only http:// proxies") as raised:
        await client.get_me()
    await client.shutdown()
    assert "secret" not in str(raised.value)


async def test_a_proxy_login_goes_as_a_header_and_never_into_an_error(monkeypatch):
    seen: list = []
    logins: list = []
    async with bot_api(seen, proxy_logins=logins) as proxy_url:
        monkeypatch.setenv("HTTP_PROXY", proxy_url.replace("http://", "http://ada:s3cret@"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        async with bot("http://api.telegram.invalid/bot") as client:
            await client.get_me()
    assert logins[-1] == "Basic " + base64.b64encode(b"ada:s3cret").decode()

    monkeypatch.setenv("HTTP_PROXY", f"http://ada:s3cret@127.0.0.1:{free_port()}")  # not there
    client = bot("http://api.telegram.invalid/bot", connect_timeout=1.0)
    with pytest.raises(NetworkError) as raised:
        await client.get_me()
    await client.shutdown()
    assert "s3cret" not in str(raised.value)


async def test_a_file_name_with_a_control_character_still_goes():
    seen: list = []
    async with bot_api(seen) as url:
        async with bot(url) as client:
            await client.send_document(42, InputFile(b"x", filename="two\nlines.txt"))
    assert seen[-1][2]["document"] == "two_lines.txt"
