"""One source of the current time, so deadlines are read from the clock at the check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo


def now() -> datetime:
    return datetime.now(UTC)


def short_time(moment: datetime) -> str:
    """How a time is shown in chat: ``14:02`` today, else ``2026-11-28 14:02`` (UTC)."""
    moment = moment.astimezone(UTC)
    if moment.date() == now().date():
        return moment.strftime("%H:%M UTC")
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def local_time(moment: datetime, zone: tzinfo | None) -> str:
    """How a time is shown in the owner's zone: ``14:02`` today, ``Tue 14:02`` within a week
    ahead or behind, else ``2026-11-28 14:02``; the zone's name after it."""
    zone = zone or UTC
    local, today = moment.astimezone(zone), now().astimezone(zone).date()
    if local.date() == today:
        shown = local.strftime("%H:%M")
    elif abs(local.date() - today) < timedelta(days=6):
        shown = local.strftime("%a %H:%M")
    else:
        shown = local.strftime("%Y-%m-%d %H:%M")
    return f"{shown} {getattr(zone, 'key', 'UTC')}"
