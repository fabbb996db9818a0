"""A monitor as data: what it watches, how often, and what counts as up; what one check found;
and the rules that turn checks into a state (``judge``), kept apart from the rows so a timeline
can be played against them with any clock.

A monitor is UP or DOWN only after ``fail_after`` failures (or ``recover_after`` successes) in a
row; until its first verdict it is PENDING. The counters live on the row, so a restart keeps
them. The service that stores monitors is bot/monitors/monitors.py; the probes that check them
are adapters (jobs/monitors/probe.py and jobs/monitors/probes/).
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MIN_INTERVAL = 10
DEFAULT_INTERVAL = 60
MAX_INTERVAL = 7 * 24 * 3600
DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 60.0
DEFAULT_FAIL_AFTER = 3
DEFAULT_RECOVER_AFTER = 2
DEFAULT_REMIND_EVERY = 4 * 3600
MIN_REMIND_EVERY = 5 * 60
DEFAULT_WARN_DAYS = 14
STALE_AFTER_INTERVALS = 3  # no check for this many intervals (and the grace): it is stale
# What the workers may hold a check back by on its way to the row: the slots the clock claims
# ahead (CLAIM_AHEAD of bot/monitors/monitors.py) and the successes batched before they are
# written (RECORD_EVERY of jobs/monitors/checks.py). A worker restarted loses those, and a
# monitor of 10 s would read stale at each ordinary restart without it.
STALE_GRACE = timedelta(seconds=45)


class MonitorKind(enum.StrEnum):
    HTTP = "http"
    TCP = "tcp"
    CERT = "cert"
    CMD = "cmd"


class MonitorState(enum.StrEnum):
    PENDING = "pending"  # not enough checks yet for a verdict
    UP = "up"
    DOWN = "down"


@dataclass(frozen=True)
class MonitorSpec:
    """What to watch and what counts as up. ``target`` is a URL (http), ``host:port`` (tcp,
    cert) or a command line (cmd, split into words, never given to a shell)."""

    name: str
    kind: MonitorKind
    target: str
    interval_seconds: int = DEFAULT_INTERVAL
    timeout_seconds: float = DEFAULT_TIMEOUT
    fail_after: int = DEFAULT_FAIL_AFTER
    recover_after: int = DEFAULT_RECOVER_AFTER
    remind_every_seconds: int = DEFAULT_REMIND_EVERY
    # http: the statuses that count as up (empty: 200-399), a text the body contains, a
    # regular expression it matches, the slowest answer that still counts as up.
    expect_status: tuple[int, ...] = ()
    body_contains: str | None = None
    body_matches: str | None = None
    max_latency_ms: int | None = None
    # cert: fewer days left than this is down (and so is a bad chain or name).
    warn_days: int = DEFAULT_WARN_DAYS
    # cmd: the exit code that counts as up, and a text its output contains.
    expect_exit: int = 0
    output_contains: str | None = None

    def to_json(self) -> dict[str, Any]:
        values = asdict(self)
        values["expect_status"] = list(self.expect_status)
        return values

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> MonitorSpec:
        values = dict(values)
        values["kind"] = MonitorKind(values["kind"])
        values["expect_status"] = tuple(values.get("expect_status") or ())
        return cls(**values)

    @property
    def identity(self) -> str:
        """What makes two monitors the same watch: the kind and the target."""
        return f"{self.kind}:{self.target}"

    @property
    def identity_hash(self) -> str:
        return hashlib.sha256(self.identity.encode()).hexdigest()

    @property
    def interval(self) -> timedelta:
        return timedelta(seconds=self.interval_seconds)

    @property
    def remind_every(self) -> timedelta:
        return timedelta(seconds=self.remind_every_seconds)

    def what(self) -> str:
        """The watch in a few words, as chat and the log show it: a password in a URL is not
        shown (the URL's user name is)."""
        return {
            MonitorKind.HTTP: _without_password(self.target),
            MonitorKind.TCP: f"tcp {self.target}",
            MonitorKind.CERT: f"cert {self.target}",
            MonitorKind.CMD: f"cmd {self.target}",
        }[self.kind]


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.netloc.rsplit('@', 1)[1]}"
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class CheckResult:
    """What one check found: up or not, how long it took, and why it is not up."""

    ok: bool
    latency_ms: float | None = None
    error: str | None = None  # the reason, in words, when not ok
    detail: str | None = None  # what an ok check saw worth showing ("41 days left")

    @classmethod
    def down(cls, error: str, latency_ms: float | None = None) -> CheckResult:
        return cls(False, latency_ms, error)


@dataclass(frozen=True)
class Counters:
    """A monitor's verdict so far: its state and the run of results that leads to the next."""

    state: MonitorState = MonitorState.PENDING
    failures: int = 0  # failures in a row
    successes: int = 0  # successes in a row


class Change(enum.StrEnum):
    """What a check changed: nothing, or a verdict."""

    NONE = "none"
    WENT_DOWN = "went_down"
    RECOVERED = "recovered"
    FIRST_UP = "first_up"  # a new monitor's first verdict: nothing to tell anyone


@dataclass(frozen=True)
class Verdict:
    counters: Counters
    change: Change


def judge(spec: MonitorSpec, before: Counters, result: CheckResult) -> Verdict:
    """The state after one more check. DOWN needs ``fail_after`` failures in a row, UP (from
    DOWN) ``recover_after`` successes in a row; a PENDING monitor is UP at its first success,
    so a new watch is quiet about a healthy target and loud about a broken one."""
    failures = 0 if result.ok else before.failures + 1
    successes = before.successes + 1 if result.ok else 0
    state, change = before.state, Change.NONE
    if before.state is not MonitorState.DOWN and failures >= spec.fail_after:
        state, change = MonitorState.DOWN, Change.WENT_DOWN
    elif before.state is MonitorState.DOWN and successes >= spec.recover_after:
        state, change = MonitorState.UP, Change.RECOVERED
    elif before.state is MonitorState.PENDING and result.ok:
        state, change = MonitorState.UP, Change.FIRST_UP
    return Verdict(Counters(state, failures, successes), change)


def phase_of(monitor_id: int, interval_seconds: int) -> int:
    """Where in its interval a monitor's slots fall, spread by id so that a hundred monitors of
    one interval are not all checked in the same second."""
    return (monitor_id * 7919) % interval_seconds


def next_slot(monitor_id: int, interval_seconds: int, after: datetime) -> datetime:
    """The first slot strictly after ``after``. Slots are anchored to the wall clock (the Unix
    epoch plus the monitor's phase), so a slow check never pushes the next one later, and after
    downtime the next slot is the next one ahead: one check, never a burst of missed ones."""
    epoch = datetime(1970, 1, 1, tzinfo=after.tzinfo)
    phase = phase_of(monitor_id, interval_seconds)
    elapsed = (after - epoch).total_seconds() - phase
    slots_passed = int(elapsed // interval_seconds) + 1
    return epoch + timedelta(seconds=phase + slots_passed * interval_seconds)


@dataclass(frozen=True)
class Monitor:
    """One row of ``monitors``."""

    id: int
    spec: MonitorSpec
    source: str  # "chat", "file" (aegis.yaml) or "agent:<slug>"
    paused: bool
    counters: Counters
    next_check_at: datetime
    last_check_at: datetime | None
    last_ok: bool | None
    last_latency_ms: float | None
    last_error: str | None
    state_since: datetime | None
    created_at: datetime
    flips: tuple[datetime, ...] = ()  # when a check disagreed with the one before (last hour)
    flapping_since: datetime | None = None

    @classmethod
    def from_row(cls, row: Any) -> Monitor:
        return cls(
            id=row.id,
            spec=MonitorSpec.from_json(row.spec),
            source=row.source,
            paused=row.paused,
            counters=Counters(MonitorState(row.state), row.failures, row.successes),
            next_check_at=row.next_check_at,
            last_check_at=row.last_check_at,
            last_ok=row.last_ok,
            last_latency_ms=row.last_latency_ms,
            last_error=row.last_error,
            state_since=row.state_since,
            created_at=row.created_at,
            flips=tuple(datetime.fromisoformat(flip) for flip in row.flips or ()),
            flapping_since=row.flapping_since,
        )

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def state(self) -> MonitorState:
        return self.counters.state

    def is_stale(self, moment: datetime) -> bool:
        """No check for ``STALE_AFTER_INTERVALS`` intervals and ``STALE_GRACE`` while it should
        have been checked."""
        if self.paused:
            return False
        since = self.last_check_at or self.created_at
        return moment - since > STALE_AFTER_INTERVALS * self.spec.interval + STALE_GRACE
