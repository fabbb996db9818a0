"""An incident as data: a monitor down, a monitor flapping, or the watchdog's finding about
aegis itself. The service that opens, reminds and closes them is bot/monitors/incidents.py."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

FLAP_WINDOW = timedelta(hours=1)
FLAP_LIMIT = 6  # more changes than this within the window: flapping
STABLE_AFTER = timedelta(minutes=30)  # no change for this long ends the flapping


class IncidentKind(enum.StrEnum):
    DOWN = "down"
    FLAPPING = "flapping"
    WATCHDOG = "watchdog"


class Tap(enum.StrEnum):
    """The choices of an incident card's buttons (``inc:<id>:<choice>``); running an agent is
    ``r<n>``, the n-th agent the card offers."""

    ACK = "ack"
    SILENCE_HOUR = "s1h"
    SILENCE_DAY = "s1d"


SILENCES = {Tap.SILENCE_HOUR: timedelta(hours=1), Tap.SILENCE_DAY: timedelta(days=1)}


@dataclass(frozen=True)
class Incident:
    id: int
    subject: str  # "monitor:<id>", "flapping:<id>", "watchdog:<what>"
    kind: IncidentKind
    monitor_id: int | None
    chat_id: int
    title: str  # "site is down"
    detail: str | None  # the last error, or what the watchdog found
    agents: tuple[str, ...]  # the agents the card offers to run
    opened_at: datetime
    closed_at: datetime | None
    close_note: str | None
    acked_at: datetime | None
    acked_by_name: str | None
    silenced_until: datetime | None
    next_remind_at: datetime | None
    reminders: int
    restart_notice: bool
    card_outbox_id: int | None

    @classmethod
    def from_row(cls, row: Any) -> Incident:
        values = {f.name: getattr(row, f.name) for f in dataclasses.fields(cls)}
        values.update(kind=IncidentKind(row.kind), agents=tuple(row.agents or ()))
        return cls(**values)

    @property
    def is_open(self) -> bool:
        return self.closed_at is None

    def silenced(self, moment: datetime) -> bool:
        return self.silenced_until is not None and moment < self.silenced_until

    def quiet(self, moment: datetime) -> bool:
        """Whether reminders are off: acknowledged, or silenced for now."""
        return self.acked_at is not None or self.silenced(moment)


def next_reminder(opened_at: datetime, every: timedelta, moment: datetime) -> datetime:
    """The first reminder time after ``moment`` on the schedule anchored at the opening, so a
    reminder that was late (a restart, an outage) does not push every later one."""
    passed = int((moment - opened_at) / every) + 1
    return opened_at + passed * every
