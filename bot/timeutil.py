"""One source of the current time, so deadlines are read from the clock at the check."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    return datetime.now(UTC)


def short_time(moment: datetime) -> str:
    """How a time is shown in chat: ``14:02`` today, else ``2026-11-28 14:02`` (UTC)."""
    moment = moment.astimezone(UTC)
    if moment.date() == now().date():
        return moment.strftime("%H:%M UTC")
    return moment.strftime("%Y-%m-%d %H:%M UTC")
