"""Capture and the task commands: thin handlers over bot/tasks/tasks.py, texts from bot/chat/views/.

Any message that is not a command (nor a code or a reply for a card) is captured as a task;
``/aside`` keeps a message out, ``/note`` keeps it as a note for ``/recall``. Lists page with
buttons (bot/chat/views/task_buttons.py, handlers/task_buttons.py); every change answers in one
sentence, and a change a task cannot take (no such task, already closed, an odd label) changes
nothing.
"""

from __future__ import annotations

import dataclasses

from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.callbacks import CallbackData
from bot.chat.text import clip, visible
from bot.chat.views import task_buttons
from bot.chat.views import tasks as task_views
from bot.errors import TaskRefused
from bot.store.search import words
from bot.tasks.audio import awaiting_transcription, for_transcription
from bot.tasks.notes import Note, NoteKind
from bot.tasks.task import Captured, Closed, parse_label
from handlers import voice
from handlers.capture import capture_of
from handlers.services import Services, edit_tapped, place_of, reply, reply_row, services

PAGE_SIZE = 20
FOUND_PER_PAGE = 10
RECALLED = 5
NOTE_CHARS = 600  # of each note /recall shows: five of them fit one message


async def capture(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    capture = capture_of(update.message)
    place = place_of(update)
    agent = await svc.platform.topics.agent_of(place.chat_id, place.thread_id)
    if agent is not None:  # written in that agent's topic: it is for that agent
        capture = dataclasses.replace(capture, assignee=agent)
    if svc.platform.settings.transcribe_url is not None:
        capture = for_transcription(capture)  # a voice note: its words come from a job
    captured, receipt = await svc.platform.tasks.capture_then(capture, receipt_of(update, context))
    if receipt is not None:
        await svc.platform.outbox.request_delivery(place.chat_id, receipt)
    elif awaiting_transcription(captured.task.attachments) and not captured.joined:
        await voice.transcribe(update, context, captured)


def receipt_of(update: Update, context: ContextTypes.DEFAULT_TYPE):
    """The receipt of a capture, as the outbox row queued with the task (one commit for the
    task and its answer). None for one more photo of an album (its first message was
    answered) and for a voice note whose words a job is still to fetch (the job answers)."""

    def receipt(captured: Captured) -> dict | None:
        if captured.joined or awaiting_transcription(captured.task.attachments):
            return None
        markup = None
        if captured.new:
            markup = task_views.triage_markup(services(context).signer, captured.task.id)
        return reply_row(update, context, task_views.captured_text(captured), reply_markup=markup)

    return receipt


async def follow_edit(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    message = update.edited_message
    text = message.text or message.caption or ""
    edit = await services(context).platform.tasks.follow_edit(
        message.chat_id, message.message_id, text, album=message.media_group_id
    )
    if edit is None:
        return  # that message captured nothing (a command, a /note, an /aside, a code)
    task = edit.task
    if edit.applied:
        answer = f"Task {task.id} follows your edit: {visible(task.title)}"
    else:
        answer = f"Task {task.id} keeps its text: {edit.why_not}, so the edit is not applied."
    await reply(update, context, answer)


async def note(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """``/note text``: keep it as a note (not a task), for /recall to find."""
    message = update.message
    parts = (message.text or "").split(maxsplit=1)  # keeps the text's own lines
    text = parts[1].strip() if len(parts) > 1 else ""
    if not words(text):
        await reply(
            update, context, "Send /note and what to keep, e.g. /note the gate code is 4512."
        )
        return
    user_id = message.from_user.id if message.from_user else None
    await services(context).platform.notes.keep(text, user_id=user_id)
    first = words(text)[0]
    await reply(update, context, f"Noted. /recall {first} finds it.")


async def aside(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """``/aside text``: say something that is neither captured nor kept."""
    await reply(update, context, "Not captured: /aside keeps a message out of your tasks.")


async def show_list(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    # PTB matches commands whatever their case: /INBOX is /inbox.
    view = update.message.text.split(maxsplit=1)[0].lstrip("/").split("@")[0].lower()
    await send_list(update, context, view, 0)


async def send_list(update, context, view: str, page: int, send=reply) -> None:
    svc = services(context)
    listed = await svc.platform.tasks.in_state(task_views.LISTS[view], page=page, size=PAGE_SIZE)
    text, markup = task_views.list_view(svc.signer, view, listed)
    await send(update, context, text, reply_markup=markup)


async def find(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    query_words = words(" ".join(context.args))
    if not query_words:
        await reply(update, context, "Send /find followed by words, e.g. /find invoice march.")
        return
    await _send_found(update, context, query_words, 0)


async def _send_found(update, context, query_words: list[str], page: int, send=reply) -> None:
    svc = services(context)
    found = await svc.platform.tasks.find(" ".join(query_words), page=page, size=FOUND_PER_PAGE)
    text, markup = task_views.found_view(svc.signer, query_words, found)
    await send(update, context, text, reply_markup=markup)


async def recall(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    query = " ".join(context.args)
    if not words(query):
        await reply(update, context, "Send /recall followed by words, e.g. /recall wifi password.")
        return
    found, total = await services(context).platform.notes.search(query, limit=RECALLED)
    if not found:
        await reply(update, context, f"No note holds {' '.join(words(query))!r}.")
        return
    shown = f", the newest {len(found)}" if total > len(found) else ""
    lines = [f"{total} note{'s' if total != 1 else ''}{shown}:"]
    for item in found:
        lines += ["", f"[{_source(item)}] {visible(clip(item.text, NOTE_CHARS))}"]
    await reply(update, context, "\n".join(lines))


def _source(note: Note) -> str:
    """Where a note came from, as /recall shows it."""
    if note.kind is NoteKind.OWNER:
        return "your note"
    if note.task_id:
        return f"task {note.task_id}"
    return f"by {note.agent}" if note.kind is NoteKind.MEMO else f"for {note.agent}"


async def show(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    task_id = await _task_id(update, context, "/task 12 shows task 12.")
    if task_id is None:
        return
    tasks = services(context).platform.tasks
    task = await tasks.get(task_id)
    if task is None:
        await reply(update, context, f"There is no task {task_id}.")
        return
    # Its latest comments: why it was parked, what a run did; and every choice its state offers.
    text = task_views.task_detail(task, await tasks.comments(task_id))
    rows = task_buttons.rows_for(services(context).signer, task)
    await reply(update, context, text, reply_markup={"inline_keyboard": rows} if rows else None)


async def done(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    task_id = await _task_id(update, context, "Send /done and the task's number, e.g. /done 12.")
    if task_id is not None:
        await _change(update, context, close(services(context), task_id, Closed.DONE))


async def label(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    usage = "Send /label, the task's number and labels to add or remove: /label 12 +quick -errand"
    task_id = await _task_id(update, context, usage)
    if task_id is None:
        return
    changes = context.args[1:]
    if not changes:
        await reply(update, context, usage)
        return
    add, remove = [], []
    try:
        for change in changes:
            # A word without + or - is refused rather than added: "/label 3 +a b" was meant as
            # one label "a b", and labels are single words.
            if change[:1] not in ("+", "-"):
                refused = clip(change, 40)
                raise TaskRefused(f"{refused!r} is not a label change: write +label or -label.")
            (remove if change[0] == "-" else add).append(parse_label(change[1:]))
    except TaskRefused as exc:
        await reply(update, context, f"{exc} Nothing was changed.")
        return

    async def relabel() -> str:
        task = await services(context).platform.tasks.relabel(task_id, add, remove)
        shown = " ".join(f"#{name}" for name in task.labels) or "none"
        return f"Task {task.id} labels: {shown}"

    await _change(update, context, relabel())


async def assign(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    usage = "Send /assign, the task's number and an agent: /assign 12 demo (or 'nobody')."
    task_id = await _task_id(update, context, usage)
    if task_id is None:
        return
    if len(context.args) != 2:
        await reply(update, context, usage)
        return
    await _change(update, context, assign_to(services(context), task_id, context.args[1]))


async def on_page_button(
    update: Update, context: ContextTypes.DEFAULT_TYPE, data: CallbackData
) -> None:
    query = update.callback_query
    if not data.choice.isdigit():
        await query.answer("That page does not exist.", show_alert=True)
        return
    page = int(data.choice)
    await query.answer()
    # The page turns in place: one list message, not one more per tap.
    if data.kind == task_views.FIND_KIND:
        await _send_found(update, context, data.id.split("+"), page, edit_tapped)
    elif data.id in task_views.LISTS:
        await send_list(update, context, data.id, page, edit_tapped)


async def close(svc: Services, task_id: int, closed_as: Closed, **options) -> str:
    task = await svc.platform.tasks.close(task_id, closed_as, **options)
    return f"Task {task.id} {closed_as}: {visible(task.title)}"


async def assign_to(svc: Services, task_id: int, agent: str) -> str:
    if agent.casefold() in ("nobody", "none", "-"):
        task = await svc.platform.tasks.assign(task_id, None)
        return f"Task {task.id} is assigned to nobody now."
    if agent not in svc.platform.catalog.agents:
        known = ", ".join(sorted(svc.platform.catalog.agents))
        raise TaskRefused(f"There is no agent {agent[:40]!r}; the agents are: {known}.")
    task = await svc.platform.tasks.assign(task_id, agent)
    return f"Task {task.id} is assigned to {agent}: {visible(task.title)}"


async def _change(update, context, outcome) -> None:
    try:
        text = await outcome
    except TaskRefused as exc:
        text = f"{exc} Nothing was changed."
    await reply(update, context, text)


async def _task_id(update, context, usage: str) -> int | None:
    first = context.args[0] if context.args else ""
    number = first.lstrip("#")
    if not number.isdigit() or len(number) > 12:
        await reply(update, context, usage)
        return None
    return int(number)
