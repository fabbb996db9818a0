"""How reminders read in chat: the answer to /remind, the card that comes when one is due (with
Done, Snooze 1h and Tomorrow 9:00, signed ``remind:<id>:<choice>``), and what the card says once
tapped."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from bot.chat.callbacks import CallbackSigner
from bot.chat.text import Html, bold, html
from bot.reminders.reminders import Reminder
from bot.timeutil import local_time

REMIND_KIND = "remind"
CHOICES = (("done", "Done"), ("snooze", "Snooze 1h"), ("tomorrow", "Tomorrow 9:00"))


def set_for(reminder: Reminder, zone: tzinfo | None) -> str:
    return f"I'll remind you {local_time(reminder.due_at, zone)}: {reminder.text}"


def card(
    signer: CallbackSigner, reminder: Reminder, zone: tzinfo | None, *, late_since: datetime | None
) -> tuple[str, dict[str, Any]]:
    """The card of a due reminder; ``late_since``: it was due then and aegis was not running."""
    lines = [bold(f"⏰ {reminder.text}")]
    if late_since is not None:
        lines.append(
            f"(late: it was due {local_time(late_since, zone)}, while aegis was not running)"
        )
    buttons = [
        {"text": label, "callback_data": signer.sign(REMIND_KIND, str(reminder.id), choice)}
        for choice, label in CHOICES
    ]
    return Html("\n").join(lines), {"inline_keyboard": [buttons]}


def done_text(reminder: Reminder) -> Html:
    return html("<b>✅ {}</b>\nDone.", reminder.text)


def snoozed_text(reminder: Reminder, zone: tzinfo | None) -> Html:
    return html("<b>⏰ {}</b>\nSnoozed until {}.", reminder.text, local_time(reminder.due_at, zone))


def waiting_lines(waiting: list[Reminder], zone: tzinfo | None) -> list[str]:
    """For /schedules: the reminders still to come."""
    if not waiting:
        return []
    return ["", html("<b>Reminders</b>:")] + [
        f"• {local_time(r.due_at, zone)} · {r.text}" for r in waiting
    ]
