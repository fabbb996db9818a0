"""Voice notes: a recording captured as a task is given its words once a transcription
server has them, or kept as a recording when it cannot.

The task exists from the moment the note arrives (captured with a placeholder title by
bot/tasks/tasks.py), so nothing that happens afterwards can lose the note. A transcription
moves only forward, from ``pending`` to ``done`` or ``failed``, each step under the task's row
lock: a job run twice (redelivered, or two jobs for one note) applies its words once, and the
owner is told once. Each try is counted on the task before it is made, so the bound on tries
holds however often a job is redelivered. The job that transcribes is jobs/voice/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.store.database import Store
from bot.store.tables import tasks
from bot.tasks.audio import TRANSCRIPTION, Transcription, audio_of, audio_title, status_of
from bot.tasks.capture import Capture
from bot.tasks.task import Task
from bot.tasks.tasks import search_text_of
from bot.timeutil import now

ERROR_CHARS = 300


@dataclass(frozen=True)
class VoiceNote:
    """A task captured from a recording, and where its transcription stands."""

    task: Task
    recording: dict[str, Any]

    @property
    def status(self) -> Transcription:
        return status_of(self.recording) or Transcription.DONE

    @property
    def tries(self) -> int:
        return int(self.recording[TRANSCRIPTION].get("tries", 0))

    @property
    def error(self) -> str | None:
        return self.recording[TRANSCRIPTION].get("error")

    @property
    def file_size(self) -> int | None:
        return self.recording.get("file_size")

    @property
    def upload_name(self) -> str:
        """The file name the server is sent: Telegram records voice as OGG/Opus, and OpenAI's
        endpoint knows the format by the name's ending (.oga is not among the ones it takes)."""
        if self.recording["kind"] == "voice":
            return "voice.ogg"
        return self.recording.get("file_name") or "audio.mp3"

    @property
    def words(self) -> int:
        return len(self.task.body.split())


class VoiceNotes:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def get(self, task_id: int) -> VoiceNote | None:
        """The task's recording to transcribe; None when it has none."""
        async with self.store.read() as conn:
            row = (await conn.execute(select(tasks).where(tasks.c.id == task_id))).first()
        return _note(Task.from_row(row)) if row else None

    async def begin_try(self, task_id: int) -> VoiceNote | None:
        """Count one more try of a pending transcription (a note already done or failed is
        returned as it is); None when the task has no recording to transcribe."""
        async with self.store.write() as conn:
            note = await _locked_note(conn, task_id)
            if note is None or note.status is not Transcription.PENDING:
                return note
            return await _save(conn, note, {"tries": note.tries + 1})

    async def transcribed(self, task_id: int, transcript: str) -> VoiceNote | None:
        """Give the task the recording's words: its title from the first line (a caption the
        note came with stays the title), the whole text in its body. Only a pending note
        changes; any other is returned as it is."""
        async with self.store.write() as conn:
            note = await _locked_note(conn, task_id)
            if note is None or note.status is not Transcription.PENDING:
                return note
            task, words = note.task, transcript.strip()
            body = "\n\n".join(part for part in (task.body, words) if part)
            if task.body.strip():
                title = task.title
            else:
                done = {**note.recording, TRANSCRIPTION: {"status": Transcription.DONE}}
                title = Capture.title_of(words) or f"{audio_title(done)}, no words heard"
            return await _save(conn, note, {"status": Transcription.DONE}, title=title, body=body)

    async def failed(self, task_id: int, why: str) -> VoiceNote | None:
        """Keep the task as a recording and remember why it has no words. Only a pending
        note changes; any other is returned as it is."""
        async with self.store.write() as conn:
            note = await _locked_note(conn, task_id)
            if note is None or note.status is not Transcription.PENDING:
                return note
            state = {"status": Transcription.FAILED, "error": why[:ERROR_CHARS]}
            return await _save(conn, note, state, keep_title=bool(note.task.body.strip()))


def _note(task: Task) -> VoiceNote | None:
    recording = audio_of(task.attachments)
    if recording is None or status_of(recording) is None:
        return None
    return VoiceNote(task, recording)


async def _locked_note(conn: AsyncConnection, task_id: int) -> VoiceNote | None:
    # Locked until the transaction ends (Postgres; a SQLite write holds the whole file).
    query = select(tasks).where(tasks.c.id == task_id).with_for_update()
    row = (await conn.execute(query)).first()
    return _note(Task.from_row(row)) if row else None


async def _save(
    conn: AsyncConnection,
    note: VoiceNote,
    change: dict[str, Any],
    *,
    title: str | None = None,
    body: str | None = None,
    keep_title: bool = True,
) -> VoiceNote:
    """Write the recording's new transcription state (and the task's new words)."""
    task = note.task
    state = {**note.recording[TRANSCRIPTION], **change}
    recording = {**note.recording, TRANSCRIPTION: state}
    attachments = [recording if a is note.recording else a for a in task.attachments]
    if title is None:
        origin = task.origin_name if task.origin_kind != "self" else None
        title = task.title if keep_title else audio_title(recording, origin)
    body = task.body if body is None else body
    values = {
        "title": title,
        "body": body,
        "attachments": attachments,
        "search_text": search_text_of(title, body, attachments, task.origin_name),
        "updated_at": now(),
    }
    row = (
        await conn.execute(
            update(tasks).where(tasks.c.id == task.id).values(**values).returning(tasks)
        )
    ).one()
    return VoiceNote(Task.from_row(row), recording)
