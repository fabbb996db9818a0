"""The recording a task was captured from (a voice note, an audio file) and where its
transcription stands, kept on the task's attachment itself.

The attachment keeps the recording by Telegram file id, as every captured file is kept; a
recording to transcribe also carries ``transcription``: its status, how many tries it took,
and why it failed. With no transcription server configured nothing is marked, and the note is
captured as any file is. The service that transcribes is bot/tasks/voice.py.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.tasks.capture import Capture

AUDIO_KINDS = ("voice", "audio")
TRANSCRIPTION = "transcription"  # the attachment's key for where its transcription stands


class Transcription(enum.StrEnum):
    PENDING = "pending"  # captured; a job will (or will again) try to transcribe it
    DONE = "done"  # the task holds its words
    FAILED = "failed"  # kept as a recording; the owner was told why


def audio_of(attachments: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The recording among a task's attachments, if it has one."""
    return next((a for a in attachments if a.get("kind") in AUDIO_KINDS), None)


def status_of(attachment: dict[str, Any] | None) -> Transcription | None:
    """Where the recording's transcription stands; None: it is not to be transcribed."""
    state = (attachment or {}).get(TRANSCRIPTION)
    return Transcription(state["status"]) if state else None


def awaiting_transcription(attachments: Iterable[dict[str, Any]]) -> bool:
    """True while a task's words are still to come (triage waits for them)."""
    return status_of(audio_of(attachments)) is Transcription.PENDING


def for_transcription(capture: Capture) -> Capture:
    """The capture with its recording marked to be transcribed (unchanged when it has none)."""
    attachments = list(capture.attachments)
    for index, attachment in enumerate(attachments):
        if attachment.get("kind") in AUDIO_KINDS:
            pending = {"status": Transcription.PENDING.value, "tries": 0}
            attachments[index] = {**attachment, TRANSCRIPTION: pending}
            return replace(capture, attachments=tuple(attachments))
    return capture


def audio_title(attachment: dict[str, Any], origin_name: str | None = None) -> str:
    """A recording's title while it has no words: "Voice note (0:42) from Ann, transcribing…"."""
    what = "Voice note" if attachment["kind"] == "voice" else "Audio"
    if attachment["kind"] == "audio" and attachment.get("file_name"):
        what += f" {attachment['file_name']}"
    if attachment.get("duration"):
        what += f" ({duration_text(attachment['duration'])})"
    if origin_name:
        what += f" from {origin_name}"
    status = status_of(attachment)
    if status is Transcription.PENDING:
        return f"{what}, transcribing…"
    if status is Transcription.FAILED:
        return f"{what}, not transcribed"
    return what


def duration_text(seconds: int) -> str:
    """0:42, 12:05, 1:02:03."""
    minutes, second = divmod(int(seconds), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}:{minute:02d}:{second:02d}" if hours else f"{minute}:{second:02d}"
