"""The agent_runs row as the one truth of who holds a run (bot/agents/agent_runs.py), on SQLite and
Postgres: every claim is a new holder, and a holder that lost the run can no longer write."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.agents.agent_run import Beat, RunOrigin, RunState
from bot.agents.agent_runs import AgentRuns
from bot.chat.outbox import Outbox
from bot.chat.views.runs import progress_text
from bot.errors import RunLost
from bot.monitors.process_watch import Look, WatchStatus
from bot.monitors.process_watches import ProcessWatches
from bot.monitors.specs import process_watch

TAKEN_OVER_AT_ONCE = timedelta(seconds=-1)  # any heartbeat counts as stale


async def a_run(store) -> tuple[AgentRuns, object]:
    runs = AgentRuns(store, Outbox(store), progress_text)
    run, new = await runs.create(
        "scribe", "write it", 1, origin=RunOrigin.COMMAND, deadline_seconds=60
    )
    assert new
    return runs, run


async def test_a_holder_that_lost_its_run_can_no_longer_write_over_its_successor(store):
    runs, run = await a_run(store)
    first = await runs.claim(run.id, stale_after=timedelta(seconds=30))
    assert first.attempts == 1
    assert await runs.claim(run.id, stale_after=timedelta(seconds=30)) is None  # held

    second = await runs.claim(run.id, stale_after=TAKEN_OVER_AT_ONCE)  # the first went quiet
    assert second.attempts == 2 and second.deadline_at == first.deadline_at

    assert await runs.beat(first) is Beat.LOST
    with pytest.raises(RunLost):
        await runs.checkpoint(first, state={"step": 9}, effects={})
    assert await runs.finish(first, RunState.COMPLETED, effects={}) is None
    assert await runs.park(first, 5, state={}, effects={}, step="x") is None
    assert not await runs.hand_back(first)

    await runs.checkpoint(second, state={"step": 2}, effects={"tool_calls": 1})
    assert await runs.beat(second) is Beat.GO_ON
    done = await runs.finish(second, RunState.COMPLETED, effects={"tool_calls": 1}, result="ok")
    assert done.status is RunState.COMPLETED and done.state == {"step": 2}


async def test_a_run_asked_to_stop_does_not_park_and_a_flagged_claim_says_so(store):
    runs, run = await a_run(store)
    held = await runs.claim(run.id, stale_after=timedelta(seconds=30))
    cancelling = await runs.cancel(run.id)
    assert cancelling.status is RunState.RUNNING and cancelling.cancel_requested
    assert await runs.beat(held) is Beat.CANCEL
    # It must not park: approved later, its card would wake a run the owner stopped.
    assert await runs.park(held, 7, state={}, effects={}, step="waiting") is None
    # Handed back by a stopping worker, the next claim sees the flag and ends it.
    assert await runs.hand_back(held)
    again = await runs.claim(run.id, stale_after=timedelta(seconds=30))
    assert again.cancel_requested and again.attempts == 2


async def test_cancel_ends_a_queued_or_parked_run_at_once(store):
    runs, run = await a_run(store)
    ended = await runs.cancel(run.id)
    assert ended.status is RunState.CANCELLED and ended.finished_at is not None
    assert await runs.claim(run.id, stale_after=TAKEN_OVER_AT_ONCE) is None
    assert await runs.cancel(10_000) is None


async def test_a_run_parked_on_a_process_watch_is_continued_by_that_watch_alone(store):
    runs, run = await a_run(store)
    watches = ProcessWatches(store)
    held = await runs.claim(run.id, stale_after=timedelta(seconds=30))
    spec = process_watch({"done": "true", "deadline": "1h"})
    watch = await watches.start(spec, agent="scribe", run_id=run.id, chat_id=1)
    parked = await runs.park(held, None, watch_id=watch.id, state={}, effects={}, step="w")
    assert (parked.watching, parked.waiting_on) == (watch.id, None)
    assert parked.waits_for() == f"process watch #{watch.id}"
    # Its progress shows on the parked run; a card's continuation or another watch cannot
    # claim it, and a watch that has not ended yet is no lost wake-up.
    shown = await runs.show_waiting(run.id, watch.id, "waiting for true: 40%")
    assert shown.step == "waiting for true: 40%"
    assert await runs.show_waiting(run.id, watch.id + 1, "other") is None
    assert await runs.claim(run.id, stale_after=TAKEN_OVER_AT_ONCE, continuing=1) is None
    assert await runs.claim(run.id, stale_after=TAKEN_OVER_AT_ONCE, watched=watch.id + 1) is None
    assert await runs.parked_on_ended_watches(ended_for=timedelta(0)) == []
    await watches.record(watch.id, Look(WatchStatus.PASSED))
    # Its wake-up lost: the run sweep finds it once the watch has been over for a while.
    assert await runs.parked_on_ended_watches(ended_for=timedelta(minutes=1)) == []
    assert await runs.parked_on_ended_watches(ended_for=timedelta(seconds=-1)) == [
        (run.id, watch.id)
    ]
    woken = await runs.claim(run.id, stale_after=timedelta(seconds=30), watched=watch.id)
    assert woken.status is RunState.RUNNING and woken.watching is None
    assert await runs.claim(run.id, stale_after=timedelta(seconds=30), watched=watch.id) is None
