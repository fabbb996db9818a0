"""Triage of the inbox and the weekly review: scheduled sweeps that spawn one child per item.

``sweep_triage`` (every 15 minutes) spawns ``triage_task`` per inbox task nobody was asked
about; the child runs the triage chain and, when nothing decides, leaves a card that asks the
owner and finishes (bot/tasks/inbox.py). The card's answer continues in ``apply_triage``.
``weekly_review`` spawns ``review_chat`` per chat that captured tasks; each sends one card that
resurfaces ``@someday`` and lists what has been ``@waiting`` for over a week.
"""

from __future__ import annotations

import asyncio

import dramatiq

from bot.chat.text import visible
from bot.chat.views.tasks import review_view
from bot.tasks.inbox import TriageStep
from bot.timeutil import now
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()


@dramatiq.actor(queue_name="default", max_retries=0)
async def sweep_triage(schedule: str = "") -> dict:
    untriaged = await (await resources()).platform.tasks.untriaged()
    for task_id in untriaged:
        await asyncio.to_thread(triage_task.send, task_id)
    return {"tasks_queued": len(untriaged)}


@dramatiq.actor(queue_name="default", max_retries=5, min_backoff=1000)
async def triage_task(task_id: int) -> dict:
    res = await resources()
    result = await res.platform.inbox.triage(task_id)
    if result.step is TriageStep.TRIAGED:
        task, verdict = result.task, result.verdict
        text = f"Task {task.id} → {task.state} ({verdict.by}): {visible(task.title)}"
        await res.platform.outbox.send(task.chat_id, text, key=f"triaged:{task.id}")
    return {f"tasks_{result.step}": 1}


# Not retried: the answer is claimed first, and a rerun would find it claimed.
@dramatiq.actor(queue_name="default", max_retries=0)
async def apply_triage(task_id: int, interaction_id: int) -> dict:
    res = await resources()
    platform = res.platform
    settled = await platform.interactions.claim_continuation(interaction_id)
    if settled is None:
        return {"duplicate_continuations": 1}
    text = await platform.inbox.answer(task_id, settled)
    await platform.outbox.send(settled.chat_id, text, key=f"triage-answer:{interaction_id}")
    return {"answers_applied": 1}


@dramatiq.actor(queue_name="default", max_retries=0)
async def weekly_review(schedule: str = "") -> dict:
    chats = await (await resources()).platform.tasks.capturing_chats()
    week = now().strftime("%G-W%V")
    for chat_id in chats:
        await asyncio.to_thread(review_chat.send, chat_id, week)
    return {"reviews_queued": len(chats)}


@dramatiq.actor(queue_name="default", max_retries=5, min_backoff=1000)
async def review_chat(chat_id: int, week: str) -> dict:
    res = await resources()
    someday, waiting = await res.platform.tasks.for_review()
    text, markup = review_view(res.platform.interactions.signer, someday, waiting)
    # One review per chat and week, however often this runs.
    await res.platform.outbox.send(
        chat_id, text, key=f"review:{chat_id}:{week}", reply_markup=markup
    )
    return {"someday_resurfaced": len(someday.tasks), "waiting_listed": len(waiting.tasks)}
