"""One source of the current time, so deadlines are read from the clock at the check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo


def now() -> datetime:
    return datetime.now(UTC)


# The owner's zone (AEGIS_TIMEZONE), which every time in chat is shown in. A process sets it
# once, as it builds its platform (bot/core.py); until then, and by default, it is UTC.
_shown_in: tzinfo = UTC


def show_times_in(zone: tzinfo | None) -> None:
    """Show every time in chat in ``zone`` from now on (None: UTC)."""
    global _shown_in
    _shown_in = zone or UTC


def short_time(moment: datetime) -> str:
    """How a time is shown in chat, in the owner's zone (``show_times_in``): ``14:02`` today,
    else ``2026-11-28 14:02``; the zone's name after it (``14:02 UTC``)."""
    local = moment.astimezone(_shown_in)
    shown = "%H:%M" if local.date() == now().astimezone(_shown_in).date() else "%Y-%m-%d %H:%M"
    return f"{local.strftime(shown)} {_zone_name(_shown_in)}"


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
    return f"{shown} {_zone_name(zone)}"


def _zone_name(zone: tzinfo) -> str:
    return getattr(zone, "key", None) or "UTC"
