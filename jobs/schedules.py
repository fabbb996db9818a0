"""The schedules of ``aegis.yaml``: the clock enqueues ``scheduled_run`` when one is due, and
it starts a run of the agent the schedule names, or of whichever agent holds its capability.

The run is keyed by the schedule and its due time, so a message delivered twice starts one run.
A capability nobody holds skips the schedule: a warning in the log, ``capability_missing`` in
this job's ``runs`` row, and a line in /status for as long as it lasts (bot/chat/views/schedules.py
works it out from the schedule rows and the agents in force, so fixing aegis.yaml clears it).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

import dramatiq

from aegis.botapi.endpoint import owner_chats
from bot.agents.agent_run import RunOrigin
from bot.agents.profiles import with_tag
from bot.errors import ConfigError, RunRefused
from bot.timeutil import local_time, now
from bot.upkeep.timing import LATE_AFTER
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()
logger = logging.getLogger(__name__)
CONFIG_LOOKS, CONFIG_LOOK_EVERY = 10, 0.25  # LiveConfig looks at the file once a second


# Retried: the run is keyed by the due time, so a retry after it was queued finds it.
@dramatiq.actor(queue_name="default", max_retries=5, min_backoff=1000)
async def scheduled_run(schedule: str, due: str = "") -> dict:
    platform = (await resources()).platform
    schedules = platform.schedules
    row = await schedules.get(schedule)
    if row is None or not row.runs_agent:
        return {"schedules_gone": 1}
    if not row.enabled:
        return {"schedules_off": 1}  # switched off after it was enqueued
    key = f"schedule:{schedule}:{due}" if due else None
    if await schedules.still_running(schedule, other_than=key):
        # The clock skips these too; this catches messages queued while no worker ran.
        await schedules.note_skip(schedule)
        return {"runs_skipped": 1}
    agent = row.agent
    if agent is None:
        holder = with_tag(platform.agents, row.capability or "")
        if holder is None:
            logger.warning(
                "schedule %s skipped: no agent in aegis.yaml holds the capability %r",
                schedule,
                row.capability,
            )
            return {"capability_missing": 1}
        agent = holder.slug
    elif not await _knows(platform, agent):
        # Still unknown: raised, so Dramatiq retries once this worker has read the file too.
        raise ConfigError(f"schedule {schedule}: this worker does not know agent {agent!r} yet")
    chats = owner_chats(platform.settings)
    if not chats:
        logger.warning("schedule %s skipped: no owner chat (set AEGIS_OWNER_IDS)", schedule)
        return {"no_owner_chat": 1}
    await _say_if_late(platform, row, due, chats[0])
    try:
        await platform.start_run(
            agent,
            row.request,
            chats[0],
            origin=RunOrigin.SCHEDULE,
            schedule=schedule,
            key=key,
        )
    except RunRefused as exc:
        logger.warning("schedule %s did not start a run: %s", schedule, exc)
        return {"runs_refused": 1}
    return {"runs_started": 1}


async def _say_if_late(platform, row, due: str, chat_id: int) -> None:
    """A run that comes late (aegis was down at its time) says so, once per due time."""
    if not due or now() - datetime.fromisoformat(due) <= LATE_AFTER:
        return
    zone = platform.settings.zone
    missed = f"; {row.missed} later time(s) were missed in all" if row.missed else ""
    text = (
        f"Schedule {row.name} runs late: it was due {local_time(datetime.fromisoformat(due), zone)}"
        f", while aegis was not running{missed}. It runs once now."
    )
    await platform.outbox.send(chat_id, text, key=f"late:{row.name}:{due}")


async def _knows(platform, agent: str) -> bool:
    """Whether this worker's aegis.yaml has the agent, looking again for a moment: the clock
    may have read a newer file than this worker (each looks once a second), and a schedule
    added with its agent is due at once."""
    for _ in range(CONFIG_LOOKS):
        if agent in platform.agents:
            return True
        await asyncio.sleep(CONFIG_LOOK_EVERY)
    return agent in platform.agents
