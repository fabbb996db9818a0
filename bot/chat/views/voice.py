"""How voice notes look in chat: the receipt while a note is being transcribed, the one that
tells how it ended (its words, or why it has none), and the /status line."""

from __future__ import annotations

from urllib.parse import urlsplit

from bot.chat.views.tasks import captured_text
from bot.tasks.audio import Transcription
from bot.tasks.task import Captured
from bot.tasks.voice import VoiceNote

WHERE = "Where does it go? Or leave it in the inbox for now."
LONG_WORDS = 60  # a transcript longer than this is pointed at, not shown


def transcribing_text(captured: Captured) -> str:
    """The answer to the voice message itself, before a job has the words."""
    if not captured.new:
        return captured_text(captured)
    return f"Captured as task {captured.task.id}: {captured.task.title}"


def outcome_text(note: VoiceNote) -> str:
    """What the owner is told, once, when the transcription has ended."""
    task = note.task
    if note.status is Transcription.FAILED:
        return (
            f"Task {task.id} keeps your voice note as a recording: it could not be "
            f"transcribed ({note.error}).\n{WHERE}"
        )
    text = captured_text(Captured(task, new=True))
    if note.words > LONG_WORDS:
        text += f"\n({note.words:,} words; /task {task.id} shows them all.)"
    return text


def status_line(transcribe_url: str | None) -> str:
    if transcribe_url is None:
        return "Voice: off (set AEGIS_TRANSCRIBE_URL)"
    return f"Voice: on ({urlsplit(transcribe_url).netloc})"
