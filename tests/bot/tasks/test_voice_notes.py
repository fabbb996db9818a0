"""Voice notes in the core, against SQLite and Postgres: a recording to transcribe is a task
from the start, its transcription only moves forward (pending to done or failed, once), each
try is counted before it is made, and triage waits for the words."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from bot.store.tables import tasks
from bot.tasks.audio import (
    Transcription,
    audio_title,
    awaiting_transcription,
    duration_text,
    for_transcription,
)
from bot.tasks.capture import Capture, Origin
from bot.tasks.inbox import TRANSCRIPTION_WAIT, Inbox, TriageStep
from bot.tasks.task import State
from bot.tasks.tasks import Tasks
from bot.tasks.triage import Conditions, RuleTriager, TriageRule
from bot.tasks.voice import VoiceNotes
from tests.helpers.interactions import ALICE, CHAT, RecordingEnqueue, make_interactions

EVERYTHING = TriageRule("all", Conditions(keywords=("bank", "voice")), State.NEXT, ())


def recording(kind: str = "voice", **extra) -> dict:
    return {"kind": kind, "file_id": "F1", "file_unique_id": "U1", "duration": 42, **extra}


def voice_capture(message_id: int = 1, caption: str = "", **origin) -> Capture:
    return for_transcription(
        Capture(
            chat_id=CHAT,
            message_id=message_id,
            user_id=ALICE,
            text=caption,
            origin=Origin(**{"kind": "self", **origin}),
            attachments=(recording(message_id=message_id),),
        )
    )


@pytest.fixture
def tasks_(store) -> Tasks:
    return Tasks(store)


async def test_a_note_is_a_task_at_once_with_a_placeholder_title(tasks_, store):
    captured = await tasks_.capture(voice_capture())
    assert captured.new and captured.task.title == "Voice note (0:42), transcribing…"
    assert awaiting_transcription(captured.task.attachments)
    note = await VoiceNotes(store).get(captured.task.id)
    assert (note.status, note.tries, note.upload_name) == (Transcription.PENDING, 0, "voice.ogg")


async def test_words_are_applied_once_and_a_late_failure_changes_nothing(tasks_, store):
    notes = VoiceNotes(store)
    task_id = (await tasks_.capture(voice_capture())).task.id
    assert (await notes.begin_try(task_id)).tries == 1
    done = await notes.transcribed(task_id, "  Call the bank\nabout the loan  ")
    assert (done.task.title, done.task.body) == ("Call the bank", "Call the bank\nabout the loan")
    assert done.status is Transcription.DONE

    again = await notes.transcribed(task_id, "other words")
    late = await notes.failed(task_id, "timeout")
    assert again.task.body == late.task.body == "Call the bank\nabout the loan"
    assert late.status is Transcription.DONE and late.error is None
    assert (await notes.begin_try(task_id)).tries == 1  # a finished note counts no more tries
    assert (await tasks_.find("loan")).total == 1  # found by its words


async def test_a_failed_note_keeps_its_recording_and_says_why(tasks_, store):
    notes = VoiceNotes(store)
    task_id = (await tasks_.capture(voice_capture(name="Ann", kind="user"))).task.id
    failed = await notes.failed(task_id, "the server answered HTTP 500; tried 5 times")
    assert failed.task.title == "Voice note (0:42) from Ann, not transcribed"
    assert failed.error == "the server answered HTTP 500; tried 5 times"
    assert failed.recording["file_id"] == "F1"
    assert (await notes.transcribed(task_id, "too late")).task.body == ""


async def test_a_caption_stays_the_title_and_silence_says_so(tasks_, store):
    notes = VoiceNotes(store)
    captioned = (await tasks_.capture(voice_capture(1, "For the bank"))).task.id
    done = await notes.transcribed(captioned, "Ask about the fees")
    assert (done.task.title, done.task.body) == (
        "For the bank",
        "For the bank\n\nAsk about the fees",
    )
    silent = (await tasks_.capture(voice_capture(2))).task.id
    assert (await notes.transcribed(silent, " ")).task.title == "Voice note (0:42), no words heard"


async def test_concurrent_tries_are_each_counted(tasks_, store):
    notes = VoiceNotes(store)
    task_id = (await tasks_.capture(voice_capture())).task.id
    await asyncio.gather(*(notes.begin_try(task_id) for _ in range(5)))
    assert (await notes.get(task_id)).tries == 5


async def test_a_task_without_a_recording_to_transcribe_is_no_voice_note(tasks_, store):
    plain = Capture(
        chat_id=CHAT, message_id=9, user_id=ALICE, text="buy milk", origin=Origin("self")
    )
    assert for_transcription(plain) is plain
    task_id = (await tasks_.capture(plain)).task.id
    assert await VoiceNotes(store).begin_try(task_id) is None
    assert await VoiceNotes(store).begin_try(999) is None


async def test_triage_waits_for_the_words(tasks_, store):
    interactions = make_interactions(store, RecordingEnqueue())
    inbox = Inbox(store, tasks_, interactions, [RuleTriager([EVERYTHING])])
    task_id = (await tasks_.capture(voice_capture())).task.id
    assert (await inbox.triage(task_id)).step is TriageStep.SKIPPED
    await VoiceNotes(store).transcribed(task_id, "Call the bank")
    assert (await inbox.triage(task_id)).step is TriageStep.TRIAGED

    # A note whose words never came (its job lost) is not waited for forever.
    stuck = (await tasks_.capture(voice_capture(2))).task.id
    long_ago = datetime.now(UTC) - TRANSCRIPTION_WAIT - timedelta(minutes=1)
    async with store.write() as conn:
        await conn.execute(update(tasks).where(tasks.c.id == stuck).values(created_at=long_ago))
    assert (await inbox.triage(stuck)).step is TriageStep.TRIAGED


def test_titles_of_recordings():
    assert duration_text(5) == "0:05" and duration_text(725) == "12:05"
    assert duration_text(3723) == "1:02:03"
    audio = recording("audio", file_name="memo.mp3", transcription={"status": "pending"})
    assert audio_title(audio) == "Audio memo.mp3 (0:42), transcribing…"
    assert audio_title(recording(duration=0)) == "Voice note"
