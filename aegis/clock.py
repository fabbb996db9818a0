"""``aegis clock``: reads ``schedules``, the reminders and the monitors' slots and enqueues what
is due; it never runs the work itself.

It also follows ``aegis.yaml``: at start and whenever the file changes, the file's schedules are
reconciled into rows (bot/upkeep/schedules.py), so a schedule added, changed or removed in the file
takes effect within a couple of seconds, with no restart. The on/off switch is read from the rows at
every turn, so a tap on /schedules takes effect at the next one.

One clock works at a time, on one machine or many: it holds the ``clock`` lease
(bot/upkeep/leases.py) and renews it every few seconds. Another clock on the same database stands
by, looking at the lease, and takes over once it runs out (the holder stopped, or was killed and
renews no more): within ``LEASE_TTL``, or at once after a clean stop. The machines' clocks must
agree to within a few seconds (NTP), as the lease's time is compared across them.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from zoneinfo import ZoneInfo

from bot.config.file import Config
from bot.config.live import LiveConfig
from bot.errors import BrokerError, StoreError
from bot.monitors.monitors import Monitors
from bot.reminders.reminders import Reminders
from bot.store.database import Store
from bot.timeutil import now
from bot.upkeep.due import Due, turn
from bot.upkeep.heartbeats import BEAT_EVERY, Heartbeats, process_id
from bot.upkeep.leases import Leases
from bot.upkeep.schedules import BUILTIN_SCHEDULES, Schedule, Schedules

logger = logging.getLogger(__name__)
LEASE = "clock"
LEASE_TTL = timedelta(seconds=30)  # a standby takes over this long after the holder's last renewal
RENEW_EVERY = timedelta(seconds=5)
# The longest a turn sleeps: rows another process adds (a reminder, a schedule switched on, a
# monitor resumed) are seen within this.
TURN_SECONDS = 1.0
STANDBY = "clock-standby"  # the heartbeat's kind while another clock works


async def run_clock(
    store: Store,
    enqueue,
    stop: asyncio.Event,
    config: LiveConfig | None = None,
    monitors: Monitors | None = None,
    *,
    lease_ttl: timedelta = LEASE_TTL,
    renew_every: timedelta = RENEW_EVERY,
    name: str | None = None,
    builtins: tuple[Schedule, ...] = BUILTIN_SCHEDULES,
    zone: ZoneInfo | None = None,
) -> None:
    """Tick until ``stop``; ``config`` is aegis.yaml as it changes (None: no file schedules),
    ``monitors`` the monitors whose slots it enqueues, and the process watches whose looks it
    enqueues (None: none). Only while it holds the clock's lease; until then it stands by.
    ``name`` tells the clock apart in the lease and the heartbeats (default: host and pid);
    ``builtins`` are the platform's own schedules and ``zone`` the owner's time zone."""
    schedules = Schedules(store, zone)
    reminders = Reminders(store)
    heartbeats = Heartbeats(store)
    follow = FileSchedules(schedules, config, monitors)
    parts = [schedules.due(), reminders.due()]
    if monitors is not None:
        parts += [monitors.due(), monitors.processes.due()]
    process, started = name or process_id("clock"), now()
    lease = ClockLease(Leases(store), process, lease_ttl, renew_every)
    await schedules.seed(builtins)
    last_beat, kind = None, None
    try:
        while not stop.is_set():
            held = bool(await _quietly(lease.hold()))
            if held and lease.newly_taken and monitors is not None:
                # A restart owes each open incident one "still down" (bot/monitors/incidents.py).
                await _quietly(monitors.incidents.after_restart())
            if last_beat is None or now() - last_beat >= BEAT_EVERY or kind != _kind(held):
                kind = _kind(held)
                await _quietly(heartbeats.beat(process, kind, started))
                last_beat = now()
            wait = await _turn(follow, store, parts, enqueue) if held else None
            if wait is None:
                wait = renew_every.total_seconds()
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(wait, 0.05))
            except TimeoutError:
                pass
    finally:
        await _quietly(lease.release())
        await _quietly(heartbeats.stop(process))


def _kind(held: bool) -> str:
    return "clock" if held else STANDBY


async def _turn(follow, store: Store, parts: list[Due], enqueue) -> float:
    """Enqueue what is due; returns the seconds until something may next be due (at most
    TURN_SECONDS). A turn with nothing due reads one row: every part's soonest moment at once."""
    await _quietly(follow.reconcile_if_changed())
    wait = await _quietly(turn(store, parts, enqueue, ceiling=TURN_SECONDS))
    return TURN_SECONDS if wait is None else wait


class ClockLease:
    """The clock's hold on its lease: renewed every ``renew_every``, looked at as often by a
    clock standing by. Says in the log when this clock starts, stops or stands by."""

    def __init__(self, leases: Leases, holder: str, ttl: timedelta, renew_every: timedelta) -> None:
        self.leases = leases
        self.holder = holder
        self.ttl = ttl
        self.renew_every = renew_every
        self.renewed_at = None  # when this clock last renewed it; None: it does not hold it
        self.other: str | None = None  # who holds it, while another does
        self.newly_taken = False

    async def hold(self) -> bool:
        moment = now()
        if self.renewed_at is not None and moment - self.renewed_at < self.renew_every:
            self.newly_taken = False
            return True
        lease = await self.leases.hold(LEASE, self.holder, self.ttl)
        mine = lease.holder == self.holder
        self.newly_taken = mine and self.renewed_at is None
        if self.newly_taken:
            logger.info("this clock works now (%s holds the clock lease)", self.holder)
        elif not mine and lease.holder != self.other:
            logger.info(
                "another clock works (%s holds the lease); this one stands by and takes over "
                "if that one stops",
                lease.holder,
            )
        self.renewed_at = moment if mine else None
        self.other = None if mine else lease.holder
        return mine

    async def release(self) -> None:
        if self.renewed_at is not None:
            self.renewed_at = None
            await self.leases.release(LEASE, self.holder)


class FileSchedules:
    """Reconciles the file's schedules (and monitors) when the config in force is a new one.

    LiveConfig hands out the same Config object until the file changes and reads well, so
    identity is the change stamp; a file that goes bad keeps the last good one in force. A
    clock that starts on a bad file runs on the built-ins alone: that is never reconciled, or
    a typo would remove every file schedule, and the owner's switches with them.
    """

    def __init__(
        self, schedules: Schedules, config: LiveConfig | None, monitors: Monitors | None = None
    ) -> None:
        self.schedules = schedules
        self.config = config
        self.monitors = monitors
        self.reconciled: Config | None = None

    async def reconcile_if_changed(self) -> None:
        if self.config is None:
            return
        current = self.config.current()
        if current is self.reconciled:
            return
        if self.reconciled is None and self.config.problem is not None:
            return  # started on a bad file: the built-ins alone, not what the file means
        done = await self.schedules.reconcile(current.schedules)
        if self.monitors is not None:
            watched = await self.monitors.reconcile(current.monitors)
            if watched.changed:
                logger.info(
                    "monitors from aegis.yaml: added %s, updated %s, removed %s",
                    watched.added or "none",
                    watched.updated or "none",
                    watched.removed or "none",
                )
        self.reconciled = current  # only once it is written: an outage tries again next turn
        if done.changed:
            logger.info(
                "schedules from aegis.yaml: added %s, updated %s, removed %s",
                done.added or "none",
                done.updated or "none",
                done.removed or "none",
            )


async def _quietly(awaitable):
    """An outage skips this turn; the clock keeps turning and catches up once it is over."""
    try:
        return await awaitable
    except (StoreError, BrokerError) as exc:
        logger.warning("clock turn skipped: %s", exc)
        return None
