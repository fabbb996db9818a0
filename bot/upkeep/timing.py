"""When a schedule runs: every so long, or at the times a cron expression names in the owner's
time zone (``AEGIS_TIMEZONE``). ``at: "08:00"`` with ``days: mon-fri`` is written as the cron
``0 8 * * mon-fri``; cron is read by cronsim, as Debian's cron reads it.

Daylight saving, the rules (cronsim's, Debian cron's):
- a time that does not exist on the day the clocks go forward (02:30 in Berlin on the last Sunday
  of March) runs once, at the first minute that does exist (03:00): never skipped;
- a time that happens twice on the day they go back (01:30 on the last Sunday of October) runs
  once, the first time: never doubled;
- an expression that runs every so many minutes or hours (``*/15 * * * *``) follows the wall
  clock and gets no special handling.

A schedule that could not run on time (aegis was down) runs once when the clock is back, then at
its next time: never a burst. The slots it missed are counted, and /schedules says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from bot.errors import PolicyConfigError

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DAY_SETS = {
    "daily": "*",
    "day": "*",
    "weekdays": "mon-fri",
    "weekday": "mon-fri",
    "weekends": "sat,sun",
}
AT = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
CRON_FIELD = re.compile(r"^[0-9*,/\-a-z]+$")
LATE_AFTER = timedelta(minutes=2)  # a run this far past its time is said to be late
MISSED_COUNTED_UP_TO = 1000  # slots counted after a long downtime, at most


@dataclass(frozen=True)
class Timing:
    """Every ``interval_seconds``, or at the times of ``cron``; exactly one is set."""

    interval_seconds: int = 0
    cron: str | None = None

    def next_after(self, moment: datetime, zone: ZoneInfo | None = None) -> datetime:
        """The first time strictly after ``moment`` (in UTC)."""
        if self.cron is None:
            return moment + timedelta(seconds=self.interval_seconds)
        local = moment.astimezone(zone or UTC).replace(microsecond=0)
        following = next(CronSim(self.cron, local))
        if following <= moment:  # cronsim counts from the whole second it was given
            following = next(CronSim(self.cron, following))
        return following.astimezone(UTC)

    def missed_between(self, due: datetime, moment: datetime, zone: ZoneInfo | None) -> int:
        """How many more times fell due after ``due`` and up to ``moment`` (a downtime)."""
        count, slot = 0, due
        while count < MISSED_COUNTED_UP_TO:
            slot = self.next_after(slot, zone)
            if slot > moment:
                return count
            count += 1
        return count

    def describe(self, zone: ZoneInfo | None = None) -> str:
        if self.cron is None:
            return f"every {_every(self.interval_seconds)}"
        explained = CronSim(self.cron, datetime.now(zone or UTC)).explain()
        return f"{explained[0].lower()}{explained[1:]} ({zone_name(zone)})"


def zone_name(zone: ZoneInfo | None) -> str:
    return getattr(zone, "key", "UTC") if zone is not None else "UTC"


def zone_of(name: str) -> ZoneInfo:
    """The IANA zone ``name`` ("Europe/Berlin"), or an error that says what to write."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise PolicyConfigError(
            f"{name!r} is not a time zone: write an IANA name such as Europe/Berlin, "
            "America/New_York or UTC"
        ) from None


def cron_of(place: str, expression: object) -> str:
    """A 5-field cron expression, checked; the error says what to write."""
    if not isinstance(expression, str):
        raise PolicyConfigError(f'{place}: write a cron expression as text, e.g. "30 7 * * 1-5"')
    fields = expression.lower().split()
    if len(fields) != 5 or not all(CRON_FIELD.match(field) for field in fields):
        raise PolicyConfigError(
            f"{place}: {expression!r} is not a cron expression of 5 fields (minute hour "
            'day-of-month month day-of-week), e.g. "30 7 * * 1-5"'
        )
    cron = " ".join(fields)
    try:
        next(CronSim(cron, datetime.now(UTC)))
    except (CronSimError, ValueError, StopIteration) as exc:
        raise PolicyConfigError(
            f"{place}: {expression!r} cannot be read ({exc}): write minute hour day-of-month "
            'month day-of-week, e.g. "30 7 * * 1-5"'
        ) from None
    return cron


def at_cron(place: str, at: object, days: object = None) -> str:
    """``at: "08:00"`` (and ``days: mon-fri``, ``weekdays``, ``sat,sun``…) as a cron expression;
    ``at`` may carry its days in front: ``"fri 17:00"``, ``"weekdays 8:00"``."""
    if isinstance(at, str) and days is None and " " in at.strip():
        days, _, at = at.strip().rpartition(" ")
    match = AT.match(at.strip()) if isinstance(at, str) else None
    if match is None:
        raise PolicyConfigError(
            f'{place}: {at!r} is not a time of day: write it as "08:00" (or "fri 17:00")'
        )
    hour, minute = int(match.group(1)), int(match.group(2))
    return f"{minute} {hour} * * {days_field(place, days)}"


def days_field(place: str, days: object) -> str:
    """``None`` (every day), ``weekdays``, ``mon-fri``, ``mon,wed,fri`` or ``sat`` as cron's
    day-of-week field."""
    if days is None:
        return "*"
    text = str(days).strip().lower() if isinstance(days, str) else ""
    if text in DAY_SETS:
        return DAY_SETS[text]
    parts = re.split(r"\s*,\s*", text)
    for part in parts:
        ends = part.split("-")
        if not part or len(ends) > 2 or not all(end in DAYS for end in ends):
            raise PolicyConfigError(
                f"{place}: {days!r} is not a set of days: write weekdays, weekends, daily, "
                "mon-fri or mon,wed,fri"
            )
    return ",".join(parts)


def _every(seconds: int) -> str:
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"
