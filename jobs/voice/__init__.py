"""The transcription of a voice note captured as a task (bot/tasks/voice.py): download the
recording through the Bot API, post it to the transcription server (jobs/voice/transcriber.py), give
the task its words, and tell the owner once.

A try that finds the server down or slow is tried again, with a wait that doubles from
``AEGIS_TRANSCRIBE_RETRY_SECONDS``, until ``AEGIS_TRANSCRIBE_TRIES`` tries were made; then the
task stays a recording and the owner is told why. A refusal that trying again cannot change (a
key refused, a recording too big) ends it at the first try. Either way the note was a task
from the start. The tries are counted on the task, not in the message, so a redelivered job
cannot try more often than that; and the answer goes out under one key per task, so however
often the job runs, the owner reads one.
"""

from __future__ import annotations

import logging

import dramatiq
from telegram import Bot
from telegram.error import BadRequest, Forbidden, TelegramError

from bot.chat.views.tasks import triage_markup
from bot.chat.views.voice import outcome_text
from bot.config.settings import Settings
from bot.errors import TranscriptionRefused, TranscriptionUnavailable
from bot.tasks.audio import Transcription
from bot.tasks.task import State
from bot.tasks.voice import VoiceNote, VoiceNotes
from jobs.voice.transcriber import Transcriber
from jobs.worker.broker import require_broker
from jobs.worker.resources import Resources, resources

logger = logging.getLogger(__name__)
require_broker()
MAX_WAIT_MS = 15 * 60 * 1000


# Retried by Dramatiq only for what is not the server's doing (the database down, a bug):
# the server's own failures are counted on the task and retried below, with their own bound.
@dramatiq.actor(queue_name="default", max_retries=20, min_backoff=1000, max_backoff=300_000)
async def transcribe_voice(task_id: int) -> dict:
    res = await resources()
    notes = VoiceNotes(res.platform.store)
    note = await notes.begin_try(task_id)
    if note is None:
        return {"nothing_to_transcribe": 1}
    effect = "already_transcribed"
    if note.status is Transcription.PENDING:
        note, effect = await _try(res, notes, note)
    await _tell(res, note)
    return {effect: 1}


async def _try(res: Resources, notes: VoiceNotes, note: VoiceNote) -> tuple[VoiceNote, str]:
    """One try: the note as it ended, or a Retry raised for the next try."""
    settings = res.platform.settings
    task_id = note.task.id
    try:
        audio = await _download(res.bot, note, settings)
        transcript = await Transcriber.of(settings).transcribe(
            audio, note.upload_name, note.recording.get("mime_type") or "audio/ogg"
        )
    except TranscriptionRefused as exc:
        logger.warning("task %s not transcribed: %s", task_id, exc)
        return await notes.failed(task_id, str(exc)), "transcriptions_failed"
    except TranscriptionUnavailable as exc:
        if note.tries >= settings.transcribe_tries:
            logger.warning("task %s not transcribed after %d tries: %s", task_id, note.tries, exc)
            why = f"{exc}; tried {note.tries} times"
            return await notes.failed(task_id, why), "transcriptions_failed"
        wait_ms = _wait_ms(settings, note.tries)
        logger.info("task %s: %s; try %d in %d ms", task_id, exc, note.tries + 1, wait_ms)
        raise dramatiq.Retry(str(exc), delay=wait_ms) from None
    return await notes.transcribed(task_id, transcript), "notes_transcribed"


async def _download(bot: Bot, note: VoiceNote, settings: Settings) -> bytes:
    """The recording's bytes, through getFile and Telegram's file URL."""
    cap = settings.transcribe_max_bytes
    too_big = TranscriptionRefused(
        f"the recording is over {cap / 1_048_576:.1f} MB, the most AEGIS_TRANSCRIBE_MAX_BYTES "
        "lets through"
    )
    if note.file_size and note.file_size > cap:
        raise too_big
    try:
        file = await bot.get_file(note.recording["file_id"])
        if file.file_size and file.file_size > cap:
            raise too_big
        timeout = settings.transcribe_timeout_seconds
        return bytes(await file.download_as_bytearray(read_timeout=timeout))
    except (BadRequest, Forbidden) as exc:  # BadRequest first: PTB counts it a NetworkError
        why = f"Telegram would not hand over the recording: {exc.message}"
        raise TranscriptionRefused(why) from None
    except TelegramError as exc:  # the network, a timeout, a 429: the file is still there
        why = f"the recording could not be downloaded yet: {exc}"
        raise TranscriptionUnavailable(why) from None


async def _tell(res: Resources, note: VoiceNote) -> None:
    """How it ended, once per task, as an answer to the voice message; with the triage
    buttons while the task waits in the inbox."""
    task = note.task
    if task.chat_id is None or note.status is Transcription.PENDING:
        return
    markup = None
    if task.is_open and task.state is State.INBOX:
        markup = triage_markup(res.platform.interactions.signer, task.id)
    await res.platform.outbox.send(
        task.chat_id,
        outcome_text(note),
        key=f"voice:{task.id}",
        reply_to=task.message_id,
        reply_markup=markup,
    )


def _wait_ms(settings: Settings, tries: int) -> int:
    wait = settings.transcribe_retry_seconds * 2 ** max(0, tries - 1)
    return int(min(wait * 1000, MAX_WAIT_MS))
