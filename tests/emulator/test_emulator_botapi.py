"""The Bot API side, exercised with the real python-telegram-bot over HTTP."""

from __future__ import annotations

import asyncio
import base64
import datetime as dtm

import aiohttp
import pytest
import telegram
from conftest import TOKEN
from telegram import InlineKeyboardButton, InlineKeyboardMarkup
from telegram.error import BadRequest, Conflict, Forbidden, InvalidToken, RetryAfter

from emulator import DEFAULT_USER
from emulator.client import EmulatorClientError

CHAT = DEFAULT_USER["id"]


def keyboard(*data: str) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup([[InlineKeyboardButton(d, callback_data=d) for d in data]])


async def test_get_me(bot: telegram.Bot) -> None:
    me = await bot.get_me()
    assert me.is_bot and me.id == 123456789
    assert me.username == "aegis_emulator_bot"


async def test_wrong_token_is_unauthorized(emulator) -> None:
    wrong = emulator.make_bot("123456789:AAHsomethingElseEntirelyXXXXXXXXXXXX")
    with pytest.raises(InvalidToken):
        await wrong.get_me()


async def test_unknown_method_and_malformed_token_shapes(emulator) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{emulator.url}/bot{TOKEN}/frobnicate", json={}) as resp:
            assert resp.status == 404
            assert await resp.json() == {
                "ok": False,
                "error_code": 404,
                "description": "Not Found: method not found",
            }
        async with http.get(f"{emulator.url}/botnot-a-token/getMe") as resp:
            assert resp.status == 404
            assert (await resp.json())["ok"] is False


async def test_params_as_json_form_and_query(emulator) -> None:
    await emulator.client.send_message("hi")
    base = f"{emulator.url}/bot{TOKEN}"
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/sendMessage", json={"chat_id": CHAT, "text": "j"}) as r:
            assert (await r.json())["result"]["text"] == "j"
        async with http.post(f"{base}/sendMessage", data={"chat_id": str(CHAT), "text": "f"}) as r:
            assert (await r.json())["result"]["message_id"] == 3
        async with http.get(f"{base}/sendMessage", params={"chat_id": CHAT, "text": "q"}) as r:
            body = await r.json()
    assert body["ok"] and isinstance(body["result"]["date"], int)


async def test_send_message_with_keyboard_counts_ids_per_chat(emulator, bot) -> None:
    await emulator.client.send_message("/start")
    sent = await bot.send_message(CHAT, "Pick one", reply_markup=keyboard("a", "b"))
    assert sent.message_id == 2
    assert sent.reply_markup.inline_keyboard[0][1].callback_data == "b"
    assert isinstance(sent.date, dtm.datetime)
    other = await emulator.client.send_message("hey", user={"id": 42, "first_name": "Ann"})
    assert other["message"]["message_id"] == 1
    view = await emulator.client.messages(CHAT)
    assert [m["from_bot"] for m in view] == [False, True]
    assert view[1]["reply_markup"]["inline_keyboard"][0][0]["text"] == "a"


async def test_reply_parameters(emulator, bot) -> None:
    await emulator.client.send_message("question")
    sent = await bot.send_message(CHAT, "answer", reply_to_message_id=1)
    assert sent.reply_to_message.text == "question"
    with pytest.raises(BadRequest, match="(?i)message to be replied not found"):
        await bot.send_message(CHAT, "x", reply_to_message_id=99)


async def test_unknown_chat_and_empty_text(emulator, bot) -> None:
    with pytest.raises(BadRequest, match="(?i)chat not found"):
        await bot.send_message(555, "hello?")
    await emulator.client.send_message("hi")
    with pytest.raises(BadRequest, match="(?i)message text is empty"):
        await bot.send_message(CHAT, "   ")


async def test_text_and_callback_data_limits(emulator, bot) -> None:
    await emulator.client.send_message("hi")
    await bot.send_message(CHAT, "x" * 4096)
    with pytest.raises(BadRequest, match="(?i)message is too long"):
        await bot.send_message(CHAT, "x" * 4097)
    await bot.send_message(CHAT, "ok", reply_markup=keyboard("é" * 32))
    with pytest.raises(BadRequest, match="(?i)button_data_invalid"):
        await bot.send_message(CHAT, "no", reply_markup=keyboard("é" * 32 + "x"))


async def test_html_parse_mode(emulator, bot) -> None:
    await emulator.client.send_message("hi")
    sent = await bot.send_message(CHAT, "<b>bold</b> &lt;tag&gt;", parse_mode="HTML")
    assert sent.text == "bold <tag>"
    assert sent.entities[0].type == "bold" and sent.entities[0].length == 4
    with pytest.raises(BadRequest, match="(?i)can't parse entities"):
        await bot.send_message(CHAT, "<foo>unsupported</foo>", parse_mode="HTML")
    with pytest.raises(BadRequest, match="(?i)can't parse entities"):
        await bot.send_message(CHAT, "<b>unclosed", parse_mode="HTML")


async def test_edit_message_text_rules(emulator, bot) -> None:
    await emulator.client.send_message("hi")
    sent = await bot.send_message(CHAT, "v1", reply_markup=keyboard("a"))
    edited = await bot.edit_message_text("v2", CHAT, sent.message_id, reply_markup=keyboard("a"))
    assert edited.text == "v2" and edited.edit_date is not None
    with pytest.raises(BadRequest, match="(?i)message is not modified"):
        await bot.edit_message_text("v2", CHAT, sent.message_id, reply_markup=keyboard("a"))
    with pytest.raises(BadRequest, match="(?i)message to edit not found"):
        await bot.edit_message_text("v3", CHAT, 99)
    without_markup = await bot.edit_message_text("v3", CHAT, sent.message_id)
    assert without_markup.reply_markup is None  # Telegram drops the keyboard too
    view = (await emulator.client.messages(CHAT))[-1]
    assert view["edited"] and view["text"] == "v3"


async def test_edit_reply_markup_and_delete(emulator, bot) -> None:
    await emulator.client.send_message("hi")
    sent = await bot.send_message(CHAT, "menu", reply_markup=keyboard("a"))
    await bot.edit_message_reply_markup(CHAT, sent.message_id, reply_markup=keyboard("b"))
    with pytest.raises(BadRequest, match="(?i)not modified"):
        await bot.edit_message_reply_markup(CHAT, sent.message_id, reply_markup=keyboard("b"))
    assert await bot.delete_message(CHAT, sent.message_id) is True
    with pytest.raises(BadRequest, match="(?i)message to delete not found"):
        await bot.delete_message(CHAT, sent.message_id)
    assert (await emulator.client.messages(CHAT))[-1]["deleted"] is True


async def test_send_document(emulator, bot) -> None:
    await emulator.client.send_message("export please")
    payload = b"col1,col2\n1,2\n"
    sent = await bot.send_document(
        CHAT, telegram.InputFile(payload, filename="export.csv"), caption="Your export"
    )
    assert sent.document.file_name == "export.csv"
    assert sent.document.file_size == len(payload) and sent.caption == "Your export"
    view = (await emulator.client.messages(CHAT))[-1]
    assert view["document"]["filename"] == "export.csv"
    assert view["document"]["caption"] == "Your export"
    assert await emulator.client.file_content(sent.document.file_id) == payload
    downloaded = await (await bot.get_file(sent.document.file_id)).download_as_bytearray()
    assert bytes(downloaded) == payload


async def test_a_users_voice_note_and_audio_file_download_as_on_telegram(emulator, bot) -> None:
    """A voice note or an audio file a user sends is fetched the way Telegram has it: getFile
    gives a ``file_path``, then ``GET /file/bot<token>/<file_path>`` gives the bytes."""
    recording = b"OggS\x00\x02 hello"
    body = {"voice": {"duration": 42, "data": base64.b64encode(recording).decode()}}
    sent = (await emulator.client.inject_message(body))["message"]
    audio_body = {"audio": {"duration": 61, "file_name": "memo.mp3"}, "caption": "the memo"}
    music = (await emulator.client.inject_message(audio_body))["message"]

    [voice_update, audio_update] = await bot.get_updates(timeout=0)
    voice = voice_update.message.voice
    assert voice.file_id == sent["voice"]["file_id"] and voice.file_size == len(recording)
    assert voice.duration == dtm.timedelta(seconds=42) and voice.mime_type == "audio/ogg"
    file = await bot.get_file(voice.file_id)
    assert file.file_path.endswith(f"/voice/{voice.file_id}")  # PTB prefixes the file URL
    assert bytes(await file.download_as_bytearray()) == recording

    audio = audio_update.message.audio
    assert audio.file_name == "memo.mp3" and audio_update.message.caption == "the memo"
    assert music["audio"]["file_id"] == audio.file_id
    assert await (await bot.get_file(audio.file_id)).download_as_bytearray()
    # The same bytes sent again are the same file, as on Telegram.
    again = (await emulator.client.inject_message(body))["message"]
    assert again["voice"]["file_unique_id"] == sent["voice"]["file_unique_id"]


async def test_get_file_refuses_a_file_over_twenty_megabytes(emulator, bot) -> None:
    big = b"\0" * (20 * 1024 * 1024 + 1)
    sent = await emulator.client.inject_message(
        {"voice": {"duration": 3600, "data": base64.b64encode(big).decode()}}
    )
    with pytest.raises(BadRequest, match="(?i)file is too big"):
        await bot.get_file(sent["message"]["voice"]["file_id"])


async def test_a_voice_note_needs_an_object_and_base64(emulator) -> None:
    for body, problem in (
        ({"voice": "hello"}, "voice must be an object"),
        ({"voice": {"data": "not base64!"}}, "voice.data must be base64"),
        ({"voice": {}, "document": {"file_name": "a.pdf"}}, "one file"),
    ):
        with pytest.raises(EmulatorClientError) as refused:
            await emulator.client.inject_message(body)
        assert problem in refused.value.payload["description"]


async def test_callback_answer_round_trip(emulator, bot) -> None:
    await emulator.client.send_message("hi")
    sent = await bot.send_message(CHAT, "menu", reply_markup=keyboard("go"))
    tap = await emulator.client.tap(CHAT, sent.message_id, "go")
    assert tap["matched_button"] is True
    assert await emulator.client.callback_answer(tap["callback_query_id"]) is None
    (update,) = await bot.get_updates(offset=tap["update_id"])
    query = update.callback_query
    assert query.data == "go" and query.message.message_id == sent.message_id
    assert await query.answer("Done!", show_alert=True)
    answer = await emulator.client.callback_answer(query.id)
    assert answer["text"] == "Done!" and answer["show_alert"] is True
    with pytest.raises(BadRequest, match="(?i)query is too old"):
        await query.answer("again")


async def test_get_updates_offset_and_long_poll(emulator, bot) -> None:
    first = await emulator.client.send_message("one")
    updates = await bot.get_updates(timeout=0)
    assert [u.update_id for u in updates] == [first["update_id"]]
    assert len(await bot.get_updates(timeout=0)) == 1  # not confirmed yet
    waiting = asyncio.create_task(bot.get_updates(offset=first["update_id"] + 1, timeout=10))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    started = asyncio.get_running_loop().time()
    await emulator.client.send_message("two")
    (update,) = await asyncio.wait_for(waiting, 3)
    assert asyncio.get_running_loop().time() - started < 2
    assert update.message.text == "two"
    assert update.message.chat.id == CHAT and update.message.from_user.first_name == "You"


async def test_get_updates_limit_and_timeout_expiry(emulator, bot) -> None:
    for text in ("a", "b", "c"):
        await emulator.client.send_message(text)
    assert [u.message.text for u in await bot.get_updates(limit=2)] == ["a", "b"]
    last = (await bot.get_updates())[-1].update_id
    assert await bot.get_updates(offset=last + 1, timeout=0.5) == ()


async def test_commands_get_entities(emulator, bot) -> None:
    await emulator.client.send_message("/start deep")
    (update,) = await bot.get_updates()
    assert update.message.entities[0].type == "bot_command"
    assert update.message.entities[0].length == len("/start")


async def test_a_bots_text_gets_the_commands_and_links_telegram_finds_in_it(emulator, bot) -> None:
    """As on Telegram, a bot's /commands can be tapped and its links opened, but nothing is
    found inside code or inside a link already made."""
    await emulator.client.send_message("hi")
    text = (
        "Try /next: or (/help), see https://example.org/a?b=1. "
        "<code>/not_this https://nor.this</code> a/b <a href='https://x.org'>/nor_this</a>"
    )
    sent = await bot.send_message(CHAT, text, parse_mode="HTML")
    found = [(e.type, sent.parse_entity(e)) for e in sent.entities]
    assert found == [
        ("bot_command", "/next"),
        ("bot_command", "/help"),
        ("url", "https://example.org/a?b=1"),
        ("code", "/not_this https://nor.this"),
        ("text_link", "/nor_this"),
    ]
    edited = await bot.edit_message_text("now /start", CHAT, sent.message_id)
    assert [(e.type, edited.parse_entity(e)) for e in edited.entities] == [
        ("bot_command", "/start")
    ]


# PTB 22 warns that RetryAfter.retry_after will become a timedelta; either form is fine here.
@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
async def test_flood_mode_raises_retry_after(emulator, bot) -> None:
    await emulator.client.send_message("hi")
    await emulator.client.set_flood(True, per_chat_per_second=1, global_per_second=30)
    await bot.send_message(CHAT, "first")
    with pytest.raises(RetryAfter) as caught:
        await bot.send_message(CHAT, "second")
    retry = caught.value.retry_after
    seconds = retry.total_seconds() if isinstance(retry, dtm.timedelta) else retry
    assert seconds >= 1
    assert (await emulator.client.stats())["rate_limited"] == 1
    await emulator.client.set_flood(False)
    await bot.send_message(CHAT, "fine again")


async def test_flood_raw_shape(emulator) -> None:
    await emulator.client.send_message("hi")
    await emulator.client.set_flood(True, per_chat_per_second=1)
    url = f"{emulator.url}/bot{TOKEN}/sendMessage"
    async with aiohttp.ClientSession() as http:
        await http.post(url, json={"chat_id": CHAT, "text": "1"})
        async with http.post(url, json={"chat_id": CHAT, "text": "2"}) as resp:
            body = await resp.json()
    assert resp.status == 429 and body["error_code"] == 429
    assert body["description"].startswith("Too Many Requests: retry after ")
    assert body["parameters"]["retry_after"] >= 1


async def test_commands_menu(bot) -> None:
    await bot.set_my_commands([("start", "Start"), ("help", "Help")])
    assert [c.command for c in await bot.get_my_commands()] == ["start", "help"]
    with pytest.raises(BadRequest):
        await bot.set_my_commands([("Bad-Command", "x")])


async def test_blocked_user_is_forbidden(emulator, bot) -> None:
    await emulator.client.send_message("hi")
    await emulator.client.block(CHAT)
    with pytest.raises(Forbidden, match="(?i)blocked"):
        await bot.send_message(CHAT, "still there?")


async def test_get_updates_conflicts_with_webhook(bot) -> None:
    await bot.set_webhook("http://127.0.0.1:9/hook")
    with pytest.raises(Conflict, match="(?i)webhook is active"):
        await bot.get_updates()
    info = await bot.get_webhook_info()
    assert info.url == "http://127.0.0.1:9/hook"
    await bot.delete_webhook()
    assert await bot.get_updates() == ()


async def test_second_poller_terminates_first(emulator, bot) -> None:
    first = asyncio.create_task(bot.get_updates(timeout=5))
    await asyncio.sleep(0.2)
    async with emulator.make_bot() as second_instance:  # its own connection pool
        await second_instance.get_updates(timeout=0)
    with pytest.raises(Conflict, match="(?i)terminated by other getUpdates"):
        await asyncio.wait_for(first, 3)


@pytest.mark.parametrize(
    "malformed",
    [
        {"reply_to_message_id": "abc"},
        {"reply_to_message_id": [1]},
        {"reply_parameters": {"message_id": "abc"}},
        {"reply_parameters": '{"message_id": {"x": 1}}'},
        {"reply_parameters": {"message_id": True}},
    ],
    ids=["string-id", "list-id", "reply-parameters-string", "reply-parameters-object", "bool"],
)
async def test_a_malformed_parameter_is_a_bad_request_in_telegrams_shape(emulator, malformed):
    await emulator.client.send_message("hi")
    body = {"chat_id": CHAT, "text": "a reply", **malformed}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{emulator.url}/bot{TOKEN}/sendMessage", json=body) as resp:
            assert resp.status == 400
            payload = await resp.json()
    assert payload["ok"] is False and payload["error_code"] == 400
    assert payload["description"].startswith("Bad Request: ")


async def test_infinity_for_a_reply_id_is_a_bad_request(emulator) -> None:
    await emulator.client.send_message("hi")
    body = f'{{"chat_id": {CHAT}, "text": "x", "reply_to_message_id": Infinity}}'
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        url = f"{emulator.url}/bot{TOKEN}/sendMessage"
        async with http.post(url, data=body, headers=headers) as resp:
            assert resp.status == 400
            assert (await resp.json())["error_code"] == 400
