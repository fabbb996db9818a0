"""A voice note (or audio file) to transcribe: captured already, answered at once, and handed
to a job for its words (jobs/voice/), which tells the owner how it went."""

from __future__ import annotations

from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.views.voice import transcribing_text
from bot.tasks.task import Captured
from handlers.services import reply, services


async def transcribe(
    update: Update, context: ContextTypes.DEFAULT_TYPE, captured: Captured
) -> None:
    """Ask for the transcription of a captured note whose words are still to come.

    Asked again when the same note comes again before it has words (a redelivered update, a
    second forward): the job counts its tries on the task, so an extra request costs at most
    one more call to the server, never a second task or a second answer."""
    # The answer is queued first, so the one telling how it ended always comes after it.
    await reply(update, context, transcribing_text(captured))
    await services(context).enqueue("transcribe_voice", captured.task.id)
