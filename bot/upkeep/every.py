"""What ``/every`` says, read: when (``2h``, ``8:00``, ``weekdays 8:00``, ``fri 17:00``), then
``run``, the agent and what it is asked. ``/every weekdays 8:00 run scout what happened
overnight``. The schedule it makes is kept like the file's (bot/upkeep/schedules.py) and runs in
the owner's zone (bot/upkeep/timing.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.errors import PolicyConfigError, ScheduleRefused
from bot.upkeep.timing import Timing, at_cron

EVERY_USAGE = (
    "Say when, then run, the agent and what to ask: /every weekdays 8:00 run scout what "
    "happened overnight · /every 2h run scout check the feeds · /every fri 17:00 run clerk "
    "weekly summary"
)
DURATION = re.compile(r"^(\d{1,4})(m|h|d)$")
UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400}
SHORTEST = 600  # seconds: a schedule made in chat runs at most every 10 minutes


@dataclass(frozen=True)
class EveryAsked:
    timing: Timing
    agent: str
    request: str


def parse_every(text: str) -> EveryAsked:
    words = text.split()
    lowered = [word.lower() for word in words]
    if "run" not in lowered:
        raise ScheduleRefused(EVERY_USAGE)
    at = lowered.index("run")
    when, rest = words[:at], words[at + 1 :]
    if not when or len(rest) < 2:
        raise ScheduleRefused(EVERY_USAGE)
    return EveryAsked(_timing(when), rest[0], " ".join(rest[1:]))


def _timing(when: list[str]) -> Timing:
    duration = DURATION.match(when[0].lower()) if len(when) == 1 else None
    if duration:
        seconds = int(duration.group(1)) * UNIT_SECONDS[duration.group(2)]
        if seconds < SHORTEST:
            raise ScheduleRefused("Every 10 minutes at most: /every 10m run … or longer.")
        return Timing(interval_seconds=seconds)
    try:
        return Timing(cron=at_cron("when", " ".join(when)))
    except PolicyConfigError as exc:
        raise ScheduleRefused(f"{str(exc).removeprefix('when: ')}") from None
