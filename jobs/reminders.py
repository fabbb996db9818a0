"""A due reminder's card (bot/reminders/): the clock claims the reminder and enqueues ``remind``,
which queues the card through the outbox, keyed by the reminder and its due time, so a message
delivered twice, or a reminder claimed again, sends one card."""

from __future__ import annotations

import dramatiq

from bot.chat.views.reminders import card
from bot.reminders.reminders import ReminderStatus
from bot.timeutil import now
from bot.upkeep.timing import LATE_AFTER
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()


@dramatiq.actor(queue_name="default", max_retries=5, min_backoff=1000)
async def remind(reminder_id: int) -> dict:
    platform = (await resources()).platform
    reminders = platform.reminders
    reminder = await reminders.get(reminder_id)
    if reminder is None or reminder.status != ReminderStatus.DUE:
        return {"reminders_not_due": 1}
    late = now() - reminder.due_at > LATE_AFTER
    zone = platform.settings.zone
    text, markup = card(
        platform.interactions.signer, reminder, zone, late_since=reminder.due_at if late else None
    )
    key = f"reminder:{reminder.id}:{reminder.due_at.isoformat()}"
    outbox_id = await platform.outbox.send(reminder.chat_id, text, key=key, reply_markup=markup)
    await reminders.fired(reminder.id, outbox_id)
    return {"reminders_sent": 1, "late": int(late)}
