"""Voice notes end to end, on SQLite and Postgres: the owner sends a recording through the
emulator, the real bot captures it, a real worker downloads it through the Bot API (getFile,
then the file URL) and posts it to a fake transcription server over HTTP that answers, times
out, fails with 500, refuses the key, or returns 100 KB of text.

Checked each time: the note is a task from the start, it is never lost (the recording stays
by file id), never doubled (one task, one answer, however often the job runs), and the owner
is told once, in words that never hold the key.
"""

from __future__ import annotations

import base64
import logging

import pytest
from sqlalchemy import func, select

from bot.store.tables import outbox, runs, tasks
from handlers.gate import REFUSAL
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack
from tests.helpers.task_chat import buttons, say, task_rows
from tests.helpers.transcription import FakeTranscriptionServer, answer, status
from tests.helpers.transport import stranger

KEY_ENV = "VOICE_TEST_TRANSCRIBE_KEY"
KEY = "sk-test-7f3a9c1e5b2d4f6a8c0e"
RECORDING = b"OggS\x00\x02 a recording of the owner saying something"
WHERE = "\nWhere does it go? Or leave it in the inbox for now."
TRIAGE_BUTTONS = ["@next", "@someday", "@waiting", "@reference", "Drop"]
TRIES = 3


@pytest.fixture
async def server():
    async with FakeTranscriptionServer().running() as running:
        yield running


@pytest.fixture
async def voice_stack(
    tmp_path, database_url, redis_server_url, redis_namespace, server, monkeypatch
):
    """The whole of aegis with voice on: the fake server, its key in the environment, a one
    second ceiling, three tries and short waits between them."""
    monkeypatch.setenv(KEY_ENV, KEY)
    settings = make_settings(
        tmp_path / "data",
        database_url,
        redis_server_url,
        transcribe_url=server.url,
        transcribe_key_env=KEY_ENV,
        transcribe_timeout_seconds=1.0,
        transcribe_tries=TRIES,
        transcribe_retry_seconds=0.05,
    )
    async with running_stack(settings, namespace=redis_namespace) as running:
        yield running


def voice(seconds: int = 42, content: bytes = RECORDING) -> dict:
    return {"duration": seconds, "data": base64.b64encode(content).decode()}


async def send_voice(stack, **options) -> tuple[dict, dict, dict]:
    """Send a voice note as the owner; the message, the bot's answer to it at once, and the one
    telling how the transcription ended."""
    sent = await stack.send(None, voice=options.pop("recording", voice()), **options)
    now, outcome = await stack.emulator.wait_for_bot_messages(
        OWNER_CHAT, 2, after=sent["message_id"], timeout=20
    )
    return sent, now, outcome


async def voice_runs(stack, count: int) -> list:
    """The transcription job's runs, once ``count`` of them have finished."""

    async def finished():
        async with stack.store.read() as conn:
            query = select(runs).where(runs.c.job == "transcribe_voice").order_by(runs.c.id)
            rows = (await conn.execute(query)).all()
        return rows if len(rows) >= count else None

    return list(await eventually(finished, timeout=20))


async def bot_texts(stack) -> list[str]:
    return [m["text"] or m["caption"] or "" for m in await stack.bot_messages(OWNER_CHAT)]


async def the_recording(stack, row) -> dict:
    [kept] = row.attachments
    assert kept["kind"] == "voice" and kept["file_id"]
    return kept


async def test_a_voice_note_becomes_a_task_with_its_words(voice_stack, server):
    server.then(answer("Call the bank about the mortgage.\nAnd ask about the fees."))
    sent, now, outcome = await send_voice(voice_stack)

    assert now["text"] == "Captured as task 1: Voice note (0:42), transcribing…"
    assert outcome["text"] == "Captured as task 1: Call the bank about the mortgage." + WHERE
    assert outcome["reply_to_message_id"] == sent["message_id"]
    assert list(buttons(outcome)) == TRIAGE_BUTTONS
    assert buttons(now) == {}  # triage is offered once the words are there

    [row] = await task_rows(voice_stack)
    assert row.title == "Call the bank about the mortgage."
    assert row.body == "Call the bank about the mortgage.\nAnd ask about the fees."
    kept = await the_recording(voice_stack, row)
    assert kept["file_id"] == sent["voice"]["file_id"]  # the audio stays, by file id
    assert kept["transcription"] == {"status": "done", "tries": 1}

    [received] = server.requests
    assert received.audio == RECORDING  # downloaded through getFile and the file URL
    assert (received.model, received.filename) == ("whisper-1", "voice.ogg")
    assert received.authorization == f"Bearer {KEY}"
    found = await say(voice_stack, "/find mortgage")
    assert "Call the bank about the mortgage." in found[1]["text"]


async def test_a_server_error_is_retried_and_the_note_still_gets_its_words(voice_stack, server):
    server.then(status(500), answer("Water the plants"))
    _, now, outcome = await send_voice(voice_stack, recording=voice(7))

    assert now["text"] == "Captured as task 1: Voice note (0:07), transcribing…"
    assert outcome["text"] == "Captured as task 1: Water the plants" + WHERE
    assert len(server.requests) == 2
    [row] = await task_rows(voice_stack)
    assert (await the_recording(voice_stack, row))["transcription"]["tries"] == 2
    first, second = await voice_runs(voice_stack, 2)
    assert (first.status, second.status) == ("retrying", "completed")
    assert second.summary == {"notes_transcribed": 1}


async def test_timeouts_end_in_a_recording_kept_and_the_owner_told_once(voice_stack, server):
    server.then(server.hang())
    sent, now, outcome = await send_voice(voice_stack)

    assert outcome["text"] == (
        "Task 1 keeps your voice note as a recording: it could not be transcribed (the "
        f"transcription server at 127.0.0.1:{server.port} did not answer within 1 second; "
        f"tried {TRIES} times)." + WHERE
    )
    assert len(server.requests) == TRIES
    [row] = await task_rows(voice_stack)
    assert row.title == "Voice note (0:42), not transcribed"
    kept = await the_recording(voice_stack, row)
    assert kept["file_id"] == sent["voice"]["file_id"]
    assert kept["transcription"]["status"] == "failed"

    # The job again (redelivered, or asked for twice): nothing more is tried or said.
    await voice_stack.services.enqueue("transcribe_voice", row.id)
    runs_ = await voice_runs(voice_stack, TRIES + 1)
    assert runs_[-1].summary == {"already_transcribed": 1}
    assert len(server.requests) == TRIES
    assert len(await bot_texts(voice_stack)) == 2


async def test_a_refused_key_is_not_retried_and_never_shown(voice_stack, server, caplog):
    caplog.set_level(logging.INFO)
    server.then(status(401))
    _, _, outcome = await send_voice(voice_stack)

    assert outcome["text"] == (
        "Task 1 keeps your voice note as a recording: it could not be transcribed (the "
        f"transcription server at 127.0.0.1:{server.port} refused the key in {KEY_ENV} (named "
        "by AEGIS_TRANSCRIBE_KEY_ENV) (HTTP 401))." + WHERE
    )
    [run] = await voice_runs(voice_stack, 1)
    assert run.summary == {"transcriptions_failed": 1}
    assert len(server.requests) == 1
    assert all(KEY not in text for text in await bot_texts(voice_stack))
    assert KEY not in caplog.text
    async with voice_stack.store.read() as conn:
        kept = [str(r) for r in (await conn.execute(select(tasks))).all()]
        kept += [str(r) for r in (await conn.execute(select(runs))).all()]
    assert all(KEY not in row for row in kept)


async def test_a_hundred_kilobytes_of_words_are_kept_whole(voice_stack, server):
    words = " ".join(f"word{i}" for i in range(14_000))
    assert len(words) > 100_000
    server.then(answer(words))
    _, _, outcome = await send_voice(voice_stack)

    assert outcome["text"].startswith("Captured as task 1: word0 word1 word2")
    assert outcome["text"].endswith("(14,000 words; /task 1 shows them all.)")
    assert len(outcome["text"]) < 4096
    [row] = await task_rows(voice_stack)
    assert row.body == words
    _, shown = await say(voice_stack, "/task 1")  # too long for messages: sent as a file
    assert shown["document"] is not None


async def test_the_same_note_twice_is_one_task_and_one_answer(voice_stack, server):
    server.then(answer("Book the dentist"))
    ann = {"type": "user", "sender_user": {"id": 42, "is_bot": False, "first_name": "Ann"}}
    ann["date"] = 1_700_000_000
    _, now, outcome = await send_voice(voice_stack, forward_origin=ann)
    assert now["text"] == "Captured as task 1: Voice note (0:42) from Ann, transcribing…"
    assert outcome["text"] == "Captured as task 1: Book the dentist" + WHERE

    _, again = await say(voice_stack, voice=voice(), forward_origin=ann)
    assert again["text"] == "Already captured as task 1 (inbox): Book the dentist"
    await voice_stack.services.enqueue("transcribe_voice", 1)
    await voice_stack.services.enqueue("transcribe_voice", 1)
    await voice_runs(voice_stack, 3)

    assert len(await task_rows(voice_stack)) == 1
    assert len(server.requests) == 1
    async with voice_stack.store.read() as conn:
        told = select(func.count()).where(outbox.c.idempotency_key == "voice:1")
        assert (await conn.execute(told)).scalar_one() == 1
    texts = await bot_texts(voice_stack)
    assert texts.count("Captured as task 1: Book the dentist" + WHERE) == 1


async def test_status_says_where_voice_notes_go(voice_stack, server):
    _, shown = await say(voice_stack, "/status")
    assert f"Voice: on (127.0.0.1:{server.port})" in shown["text"].splitlines()


async def test_a_strangers_voice_note_is_refused_and_never_transcribed(voice_stack, server):
    server.then(answer("should never be asked"))
    mallory = stranger()
    sent = await voice_stack.send(None, voice=voice(), user=mallory)
    [refusal] = await voice_stack.emulator.wait_for_bot_messages(
        mallory["id"], 1, after=sent["message_id"]
    )
    assert refusal["text"] == REFUSAL
    assert await task_rows(voice_stack) == []
    assert server.requests == []


async def test_with_no_server_a_voice_note_is_captured_as_before(stack):
    _, reply = await say(stack, voice=voice())
    assert reply["text"] == "Captured as task 1: Voice" + WHERE
    [row] = await task_rows(stack)
    [kept] = row.attachments
    assert (kept["kind"], kept["duration"]) == ("voice", 42)
    assert "transcription" not in kept
    _, shown = await say(stack, "/status")
    assert "Voice: off (set AEGIS_TRANSCRIBE_URL)" in shown["text"].splitlines()
