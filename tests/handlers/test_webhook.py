"""The webhook: the emulator delivers to it like Telegram does; a request without the secret,
too large, or not an update is refused before anything is recorded; a duplicate is dropped."""

from __future__ import annotations

import json

import aiohttp
import pytest
from sqlalchemy import func, select

from aegis.web import SECRET_HEADER, WEB, WEBHOOK_PATH
from bot.store.tables import updates
from tests.helpers.stack import OWNER_CHAT, eventually, running_stack
from tests.helpers.transport import (
    drained,
    owner_marker,
    raw_message,
    update_row,
    update_status,
    webhook_registered,
    webhook_settings,
    worker_ready,
)

MAX_BYTES = 256 * 1024  # room for JSON nested 100,000 deep, which must be a 400, not a 413


@pytest.fixture
async def hooked(tmp_path, database_url, redis_server_url, redis_namespace):
    """A stack that registers a webhook with the emulator instead of long polling."""
    settings = webhook_settings(
        tmp_path / "data", database_url, redis_server_url, webhook_max_bytes=MAX_BYTES
    )
    async with running_stack(settings, namespace=redis_namespace) as running:
        await webhook_registered(running)
        await worker_ready(running)
        yield running


async def _post(stack, body: bytes, secret: str | None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers[SECRET_HEADER] = secret
    url = stack.settings.web_url + WEBHOOK_PATH
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=body, headers=headers) as response:
            return response.status, await response.text()


def _secret(stack) -> str:
    return stack.app[WEB].webhook_secret


async def _recorded(stack) -> int:
    async with stack.store.read() as conn:
        return (await conn.execute(select(func.count()).select_from(updates))).scalar()


def _update(update_id: int, text: str = "/start") -> bytes:
    return json.dumps({"update_id": update_id, "message": raw_message(text)}).encode()


async def test_the_emulator_delivers_by_webhook_and_the_bot_answers(hooked):
    hook = (await hooked.emulator.bot_info())["webhook"]
    assert hook["url"] == hooked.settings.public_url + WEBHOOK_PATH
    assert hook["secret_token"] == _secret(hooked)

    sent = await hooked.emulator.send_message("/start")
    [reply] = await hooked.emulator.wait_for_bot_messages(OWNER_CHAT, 1)
    assert reply["text"].startswith("Hello! I am aegis.")
    assert (await hooked.emulator.stats())["webhook_deliveries"] >= 1
    await eventually(lambda: _is_handled(hooked, sent["update_id"]))


async def _is_handled(stack, update_id: int) -> bool:
    return await update_status(stack.store, update_id) == "handled"


@pytest.mark.parametrize("given", ["none", "empty", "wrong", "one-char-off"])
async def test_a_post_without_the_right_secret_is_forbidden_and_not_recorded(hooked, given):
    right = _secret(hooked)
    secret = {"none": None, "empty": "", "wrong": "wrong-secret", "one-char-off": right[:-1] + "~"}
    before = await _recorded(hooked)
    status, _ = await _post(hooked, _update(5_000_001), secret[given])
    assert status == 403
    assert await _recorded(hooked) == before
    assert await update_row(hooked.store, 5_000_001) is None


async def test_a_body_over_the_limit_is_refused_and_not_recorded(hooked):
    before = await _recorded(hooked)
    body = _update(5_000_002, "x" * MAX_BYTES)
    assert len(body) > MAX_BYTES
    status, _ = await _post(hooked, body, _secret(hooked))
    assert status == 413
    assert await _recorded(hooked) == before


@pytest.mark.parametrize(
    "body",
    [
        b'{"update_id": 5000003, "message": "\xff\xfe"}',
        b"update_id=5000003",
        b"[5000003]",
        b'{"message": {"text": "hi"}}',
        b'{"update_id": "5000003"}',
        b'{"update_id": -1}',
    ],
    ids=["not-utf8", "not-json", "json-array", "no-update-id", "string-id", "negative-id"],
)
async def test_a_body_that_is_not_an_update_is_a_bad_request(hooked, body):
    before = await _recorded(hooked)
    status, text = await _post(hooked, body, _secret(hooked))
    assert status == 400
    assert "not an update" in text
    assert await _recorded(hooked) == before


def _message_with(**fields) -> dict:
    return {**raw_message("odd"), **fields}


@pytest.mark.parametrize(
    "payload",
    [
        {"update_id": 2**63, "message": raw_message("hi")},
        {"update_id": 10**30, "message": raw_message("hi")},
        {"update_id": 5000005.0, "message": raw_message("hi")},
        {"update_id": 5000005, "message": _message_with(chat=None)},
        {"update_id": 5000005, "message": _message_with(chat={"id": "1", "type": "private"})},
        {"update_id": 5000005, "message": _message_with(**{"from": "someone"})},
        {"update_id": 5000005, "message": _message_with(chat={"id": 2**63, "type": "private"})},
        {"update_id": 5000005, "message": _message_with(text=["a", "list"])},
        {"update_id": 5000005, "callback_query": {"id": "1", "from": [1]}},
    ],
    ids=[
        "id-2^63",
        "id-10^30",
        "float-id",
        "no-chat",
        "chat-id-string",
        "from-string",
        "chat-id-2^63",
        "text-a-list",
        "tap-from-a-list",
    ],
)
async def test_an_update_of_a_shape_telegram_never_sends_is_a_bad_request(hooked, payload):
    before = await _recorded(hooked)
    status, text = await _post(hooked, json.dumps(payload).encode(), _secret(hooked))
    assert (status, "not an update" in text) == (400, True)
    assert await _recorded(hooked) == before


@pytest.mark.parametrize("depth", [100, 1_000, 100_000])
async def test_json_nested_past_the_limit_is_a_bad_request(hooked, depth):
    body = b'{"update_id": 5000006, "x": ' + b"[" * depth + b"]" * depth + b"}"
    before = await _recorded(hooked)
    status, text = await _post(hooked, body, _secret(hooked))
    assert (status, "not an update" in text) == (400, True)
    assert await _recorded(hooked) == before


async def test_nul_and_a_lone_surrogate_arrive_as_replacement_characters(hooked):
    opened = await owner_marker(hooked)
    body = json.dumps({"update_id": 5_000_007, "message": raw_message("a\u0000b\ud800c")})
    assert await _post(hooked, body.encode(), _secret(hooked)) == (200, "")
    await hooked.emulator.wait_for_bot_messages(OWNER_CHAT, 1, opened["message_id"])
    await eventually(lambda: _is_handled(hooked, 5_000_007))
    row = await update_row(hooked.store, 5_000_007)
    assert row.payload["message"]["text"] == "a\ufffdb\ufffdc"


async def test_an_update_posted_twice_is_handled_once(hooked):
    opened = await owner_marker(hooked)  # the emulator knows the owner's chat from now on
    body = _update(5_000_004)
    assert await _post(hooked, body, _secret(hooked)) == (200, "")
    assert await _post(hooked, body, _secret(hooked)) == (200, "")

    [reply] = await hooked.emulator.wait_for_bot_messages(OWNER_CHAT, 1, opened["message_id"])
    assert reply["text"].startswith("Hello! I am aegis.")
    await eventually(lambda: _is_handled(hooked, 5_000_004))
    sent = await drained(hooked)
    assert [row.idempotency_key for row in sent].count("reply:5000004") == 1
    assert len(await hooked.bot_messages(after=opened["message_id"])) == 1
    row = await update_row(hooked.store, 5_000_004)
    assert (row.kind, row.sender_id, row.attempts) == ("message", OWNER_CHAT, 0)
