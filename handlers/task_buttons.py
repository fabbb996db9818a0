"""Taps on a task's buttons (a receipt, a list, /task, the weekly review, "Who takes task 3?").

The message tapped is edited to say what was chosen, by whom and when, and keeps only the
buttons that still make sense (bot/chat/views/task_buttons.py). A tap on a task that changed
since the message was sent changes nothing: the answer says so, and the message is edited to
show the task as it is now, with its buttons for that state, so a second tap is a choice made
on what the owner sees. Drop and Done offer Undo.
"""

from __future__ import annotations

from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.callbacks import CallbackData
from bot.chat.text import clip, visible
from bot.chat.views import task_buttons as views
from bot.chat.views import tasks as task_views
from bot.errors import TaskChanged, TaskRefused
from bot.tasks.task import Closed, State, Task
from bot.timeutil import local_time, now
from handlers.services import Services, edit_tapped, reply, services
from handlers.tasks import assign_to

ALERT_CHARS = 200  # Telegram's limit for the answer to a tap
Context = ContextTypes.DEFAULT_TYPE


async def on_task_button(update: Update, context: Context, data: CallbackData) -> None:
    query = update.callback_query
    if not data.id.isdigit():
        await query.answer("That task does not exist; nothing was done.", show_alert=True)
        return
    task_id = int(data.id)
    if data.kind == views.ASSIGN_KIND:
        await _assigned(update, context, task_id, data.choice)
        return
    choice = views.Choice.parse(data.choice)
    if choice.action not in views.WORDS:
        await query.answer("That button no longer does anything; nothing was done.")
        return
    if choice.action == "assign":
        await _ask_whom(update, context, task_id)
        return
    svc = services(context)
    numbered = _numbered(update, context, task_id)
    try:
        outcome = await apply(svc, task_id, choice, query.from_user.first_name, numbered)
    except TaskChanged:
        await _ask_again(update, context, task_id, choice)
        return
    except TaskRefused as exc:
        await query.answer(str(exc), show_alert=True)
        return
    answer, line, rows = outcome
    await query.answer(clip(answer, ALERT_CHARS))
    await _settle(update, context, task_id, line, rows)


async def apply(svc: Services, task_id: int, choice: views.Choice, who: str, numbered: bool):
    """Do what the button says; the answer to the tap, the line for its message and the
    buttons that follow. Raises TaskChanged when the task is not as the message showed it."""
    tasks = svc.platform.tasks
    by = f", by {who} at {_at(svc)}"
    if choice.action in views.CLOSES:
        if choice.shown is None:  # a button from before states were carried: ask again
            raise TaskChanged("the state this button was shown for is not known")
        closed_as = Closed.DONE if choice.action == "done" else Closed.DROPPED
        task = await tasks.close(task_id, closed_as, only_from=choice.shown)
        undo = views.undo_row(svc.signer, task_id, task.state, numbered=numbered)
        return _said(task, str(closed_as)), f"✓ Task {task_id} {closed_as}{by}", undo
    if choice.action == "undo":
        task = await tasks.reopen(task_id, choice.shown or State.INBOX, f"owner {who}")
        rows = views.rows_for(svc.signer, task, numbered=numbered)
        return _said(task, f"is back in {task.state}"), f"↩ Task {task_id} back{by}", rows
    if choice.action == "keep":
        task = await tasks.get(task_id)
        if task is None or not task.is_open or task.state is not choice.shown:
            raise TaskChanged("kept, but not as shown")
        return f"Task {task_id} stays {task.state}.", f"✓ Task {task_id} kept{by}", []
    state = State.REFERENCE if choice.action == "reference" else views.MOVES[choice.action]
    task = await tasks.move(task_id, state, f"owner {who}", only_from=choice.shown)
    if state is State.REFERENCE:
        answer = f"Task {task.id} filed as @reference; /recall finds it: {visible(task.title)}"
        return answer, f"✓ Task {task_id} filed as @reference{by}", []
    return _said(task, f"→ {task.state}"), f"✓ Task {task_id} → {task.state}{by}", []


async def _ask_again(update: Update, context: Context, task_id: int, choice: views.Choice) -> None:
    """The task changed since the message was sent: say how, do nothing, and show the message
    with what the task offers now (for Drop or Done: that choice again, or Keep)."""
    query = update.callback_query
    svc = services(context)
    task = await svc.platform.tasks.get(task_id)
    if task is None:
        await query.answer(f"There is no task {task_id}; nothing was done.", show_alert=True)
        return
    numbered = _numbered(update, context, task_id)
    now_is = _state_now(task)
    if not task.is_open:
        closed = f"Task {task_id} is already closed ({task.describe_state()})."
        await query.answer(closed, show_alert=True)
        await _settle(update, context, task_id, f"⚠ Task {task_id} is {now_is}.", [])
        return
    if choice.action in views.CLOSES:
        word = views.WORDS[choice.action]
        answer = f"Task {task_id} is {now_is} now; nothing was done. {word} it anyway?"
        rows = views.confirm_row(svc.signer, task, choice.action, numbered=numbered)
        line = f"⚠ Task {task_id} is {now_is} now. {word} it anyway?"
    else:
        answer = f"Task {task_id} is {now_is} now; nothing was done."
        rows = views.rows_for(svc.signer, task, numbered=numbered)
        line = f"⚠ Task {task_id} is {now_is} now; nothing was changed."
    await query.answer(clip(answer, ALERT_CHARS), show_alert=True)
    await _settle(update, context, task_id, line, rows)


async def _ask_whom(update: Update, context: Context, task_id: int) -> None:
    svc = services(context)
    agents = sorted(svc.platform.catalog.agents)
    await update.callback_query.answer()
    await reply(
        update,
        context,
        f"Who takes task {task_id}?",
        reply_markup=task_views.assign_markup(svc.signer, task_id, agents),
    )


async def _assigned(update: Update, context: Context, task_id: int, agent: str) -> None:
    query = update.callback_query
    svc = services(context)
    try:
        answer = await assign_to(svc, task_id, agent)
    except TaskRefused as exc:
        await query.answer(str(exc), show_alert=True)
        return
    await query.answer(clip(answer, ALERT_CHARS))
    who = query.from_user.first_name
    line = f"✓ Task {task_id} → {agent}, by {who} at {_at(svc)}"
    await _settle(update, context, task_id, line, [])


async def _settle(update: Update, context: Context, task_id: int, line: str, rows) -> None:
    """Edit the tapped message: this task's buttons replaced by ``rows``, ``line`` added."""
    message = update.callback_query.message
    if not getattr(message, "text", None):  # too old for Telegram to show it to us: the
        return  # answer to the tap says it all
    text = message.text_html  # as it was formatted: the edit keeps its bold heading
    markup = message.reply_markup.to_dict() if message.reply_markup else None
    signer = services(context).signer
    edited, keyboard = views.settled(signer, text, markup, task_id, line, rows)
    await edit_tapped(update, context, edited, keyboard)


def _numbered(update: Update, context: Context, task_id: int) -> bool:
    message = update.callback_query.message
    markup = getattr(message, "reply_markup", None)
    return views.is_numbered(services(context).signer, markup and markup.to_dict(), task_id)


def _said(task: Task, what: str) -> str:
    return f"Task {task.id} {what}: {visible(task.title)}"


def _state_now(task: Task) -> str:
    return str(task.state) if task.is_open else f"closed ({task.describe_state()})"


def _at(svc: Services) -> str:
    return local_time(now(), svc.platform.settings.zone)
