"""When a reminder is due, read as people write it, in the owner's time zone.

``20m`` / ``2h`` / ``3d`` (from now), ``17:00`` (today, or tomorrow once it has passed),
``tomorrow`` / ``today`` / ``fri`` / ``2026-12-24`` / ``24 dec`` / ``dec 24`` with an optional
time (09:00 when none is given). A local time that does not exist (the hour the clocks skip in
spring) is the first minute after it; one that happens twice is the first of the two, as for
schedules (bot/upkeep/timing.py).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from bot.errors import ReminderRefused

RELATIVE = re.compile(r"^(\d{1,4})(m|min|mins|h|d)$")
CLOCK = re.compile(r"^(\d{1,2}):(\d{2})$")
ISO_DAY = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})$")
DAY_NUMBER = re.compile(r"^\d{1,2}$")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
UNIT_MINUTES = {"m": 1, "min": 1, "mins": 1, "h": 60, "d": 1440}
DEFAULT_TIME = time(9, 0)
LONGEST = timedelta(days=366)
USAGE = (
    "Say when, then what: /remind 20m call the bank · /remind tomorrow 9:00 call the bank · "
    "/remind fri 17:00 send the invoice"
)


def parse_reminder(text: str, moment: datetime, zone: tzinfo) -> tuple[datetime, str]:
    """(when it is due, in UTC; what to remind of) from what follows /remind."""
    words = text.split()
    if not words:
        raise ReminderRefused(USAGE)
    due, used = _when(words, moment, zone)
    what = " ".join(words[used:]).strip()
    if not what:
        raise ReminderRefused("Say what to remind you of after the time: /remind 20m call the bank")
    if due <= moment:
        shown = due.astimezone(zone).strftime("%a %d %b %Y %H:%M")
        raise ReminderRefused(f"{shown} has passed: give a time still to come.")
    if due - moment > LONGEST:
        raise ReminderRefused("That is more than a year away; a reminder can be a year ahead.")
    return due, what


def _when(words: list[str], moment: datetime, zone: tzinfo) -> tuple[datetime, int]:
    first = words[0].lower()
    if first == "in" and len(words) > 1:
        due, used = _when(words[1:], moment, zone)
        return due, used + 1
    relative = RELATIVE.match(first)
    if relative:
        minutes = int(relative.group(1)) * UNIT_MINUTES[relative.group(2)]
        if minutes < 1:
            raise ReminderRefused("Give at least a minute: /remind 1m …")
        return moment + timedelta(minutes=minutes), 1
    today = moment.astimezone(zone).date()
    if CLOCK.match(first):
        at = _clock(first)
        due = local_moment(today, at, zone)
        return (due if due > moment else local_moment(today + timedelta(days=1), at, zone)), 1
    day, used = _day(words, today)
    if day is None:
        raise ReminderRefused(USAGE)
    at = DEFAULT_TIME
    if len(words) > used and CLOCK.match(words[used]):
        at, used = _clock(words[used]), used + 1
    elif len(words) > used and re.match(r"^\d{1,2}[:.h]\d*$", words[used]):
        raise ReminderRefused(f"{words[used]!r} is not a time of day: write it as 17:00.")
    return local_moment(day, at, zone), used


def _day(words: list[str], today: date) -> tuple[date | None, int]:
    """The day the words start with, and how many words it took; (None, 0) when none."""
    first = words[0].lower()
    if first == "today":
        return today, 1
    if first == "tomorrow":
        return today + timedelta(days=1), 1
    if first[:3] in WEEKDAYS and _is_weekday_word(first):
        ahead = (WEEKDAYS.index(first[:3]) - today.weekday()) % 7
        return today + timedelta(days=ahead or 7), 1  # "fri" on a Friday: next week's
    iso = ISO_DAY.match(first)
    if iso:
        return _date(int(iso.group(1)), int(iso.group(2)), int(iso.group(3))), 1
    second = words[1].lower() if len(words) > 1 else ""
    if DAY_NUMBER.match(first) and second[:3] in MONTHS:  # 24 dec
        return _next(today, MONTHS.index(second[:3]) + 1, int(first)), 2
    if first[:3] in MONTHS and DAY_NUMBER.match(second):  # dec 24
        return _next(today, MONTHS.index(first[:3]) + 1, int(second)), 2
    return None, 0


def _is_weekday_word(word: str) -> bool:
    full = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
    return word in WEEKDAYS or word in full


def _next(today: date, month: int, day: int) -> date:
    """That day this year, or next year once it has passed."""
    this_year = _date(today.year, month, day)
    return this_year if this_year >= today else _date(today.year + 1, month, day)


def _date(year: int, month: int, day: int) -> date:
    try:
        return date(year, month, day)
    except ValueError:
        month_name = MONTHS[month - 1].capitalize() if 1 <= month <= 12 else f"month {month}"
        raise ReminderRefused(f"There is no {day} {month_name}: give a day that exists.") from None


def _clock(word: str) -> time:
    match = CLOCK.match(word)
    hour, minute = int(match.group(1)), int(match.group(2))
    if hour > 23 or minute > 59:
        raise ReminderRefused(f"{word!r} is not a time of day: write it as 17:00.")
    return time(hour, minute)


def local_moment(day: date, at: time, zone: tzinfo) -> datetime:
    """``day`` at ``at`` in ``zone``, in UTC: a time the clocks skip becomes the first minute
    after the gap; a time they pass twice, the first of the two."""
    wall = datetime.combine(day, at)
    for step in range(181):
        candidate = wall + timedelta(minutes=step)
        aware = candidate.replace(tzinfo=zone, fold=0)
        if aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == candidate:
            return aware.astimezone(UTC)
    return wall.replace(tzinfo=zone).astimezone(UTC)  # no zone skips three hours
