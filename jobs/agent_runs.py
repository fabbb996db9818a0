"""Running agents: ``run_agent`` carries one run to a clear end; ``sweep_runs`` takes up runs
nobody is working on.

``run_agent`` claims the run and carries it as a task on the worker's event loop
(jobs/running.py), so a long run holds no worker thread. A run holds its row by beating its
heartbeat every second. Between beats the runner reads the
clock against the run's deadline and the row's cancel flag: past the deadline or cancelled, the
harness is cancelled (a CLI is killed with its whole process group) and the run ends
``timed_out`` or ``cancelled``. A worker killed outright stops beating; ``sweep_runs`` sees the
stale heartbeat and enqueues the run again, and the harness goes on from its last checkpoint
(its messages carry idempotency keys, so nothing it said is said twice).

Every run ends completed or parked, and the owner hears how it ended: the progress message is
edited to its last state and the result (or the reason it stopped) arrives as a reply to it.
A run of an assigned task also settles the task: completed closes it as done; parked, failed,
timed out or cancelled moves it to ``@waiting`` with a comment, because a person has something
to do, and ``@waiting`` is what keeps the sweep from starting it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

import dramatiq

from bot.agents.agent_run import AgentRun, Beat, RunState, end_key
from bot.agents.endings import ended_how, settle_task
from bot.chat.views.runs import progress_text
from bot.errors import BrokerError, HarnessFailed, Parked, RunLost
from jobs import running
from jobs.harness import CONTINUE_ACTOR, RESUME, WATCHED, RunContext
from jobs.harnesses import harness_for
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()
logger = logging.getLogger(__name__)

BEAT_EVERY = 1.0  # seconds between heartbeats (and looks at the cancel flag)
WATCH_EVERY = 0.1  # seconds between looks at the deadline
PROGRESS_EVERY = 10.0  # seconds between progress edits that only move the elapsed time
STEP_EDITS_EVERY = 2.0  # a harness changing step faster than this is shown less often
CANCEL_GRACE = 5.0  # seconds a cancelled harness has to clean up (kill its processes)
CANCELLED_BY_OWNER = "cancelled by the owner"
LOST = object()  # the watch's answer when the run is no longer this holder's


# Not retried by Dramatiq: a run is taken up again by sweep_runs, from its checkpoint. The
# actor only claims the run and hands it to a task on the worker's loop (jobs/running.py).
@dramatiq.actor(queue_name="runs", max_retries=0)
async def run_agent(
    run_id: int, interaction_id: int | None = None, watch_id: int | None = None
) -> dict:
    platform = (await resources()).platform
    stale_after = timedelta(seconds=platform.settings.run_heartbeat_timeout)
    settled = None
    if watch_id is not None:
        return await _after_watch(platform, run_id, watch_id, stale_after)
    if interaction_id is not None:
        settled = await platform.interactions.get(interaction_id)
        if settled is None or settled.is_open:
            return {"continuations_too_early": 1}
        # Identical calls share one card, so several runs may be parked on it while its
        # continuation names one: the first delivery wakes them all. Each run's own claim is
        # the compare-and-set that lets exactly one stretch go on per run.
        if await platform.interactions.claim_continuation(interaction_id) is not None:
            for other in await platform.runs.parked_on(interaction_id):
                if other != run_id:
                    await asyncio.to_thread(run_agent.send, other, interaction_id)
        run = await platform.runs.claim(run_id, stale_after=stale_after, continuing=settled.id)
    else:
        run = await platform.runs.claim(run_id, stale_after=stale_after)
    if run is None:
        return {"runs_already_held": 1}
    if settled is None and run.state.get("continued_from"):
        # Taken over from a worker that died right after a card was settled.
        settled = await platform.interactions.get(run.state["continued_from"])
    running.carry(run, Runner(platform, run, settled).go())
    return {"runs_started": 1}


async def _after_watch(platform, run_id: int, watch_id: int, stale_after: timedelta) -> dict:
    """A process watch the run is parked on ended: the run goes on with its outcome."""
    watch = await platform.monitors.processes.get(watch_id)
    if watch is None or not watch.status.is_over:
        return {"continuations_too_early": 1}
    run = await platform.runs.claim(run_id, stale_after=stale_after, watched=watch_id)
    if run is None:
        return {"runs_already_held": 1}
    running.carry(run, Runner(platform, run, None, watched=watch).go())
    return {"runs_started": 1}


class Runner:
    def __init__(self, platform, run: AgentRun, settled, *, watched=None) -> None:
        self.platform = platform
        self.run = run
        self.settled = settled
        self.watched = watched  # the process watch this stretch continues from
        self.last_edit_text = ""
        self.last_edit_at = 0.0

    async def go(self) -> dict:
        agent = self.platform.agents.get(self.run.agent)
        if agent is None or not agent.runnable:
            ended = await self.platform.runs.finish(
                self.run,
                RunState.FAILED,
                effects=self.run.effects,
                error=f"{self.run.agent} is no longer an agent with a harness in aegis.yaml",
            )
            return await self._ended(ended)
        state = dict(self.run.state)
        if self.settled is not None:
            state["continued_from"] = self.settled.id
        ctx = RunContext(
            self.run,
            agent,
            self.platform.actions.perform,
            self.platform.runs,
            self._say,
            settled=self.settled,
            on_step=self._step,
        )
        ctx.state = state
        await self._give_outcomes(ctx)
        if self.run.cancel_requested:  # cancelled while parked or handed back: no more work
            return await self._end(ctx, RunState.CANCELLED, error=CANCELLED_BY_OWNER)
        await self._show(self.run, force=True)
        try:
            harness = harness_for(agent)
        except HarnessFailed as exc:
            return await self._end(ctx, RunState.FAILED, error=str(exc))
        work = asyncio.create_task(harness.run(ctx))
        try:
            stopped = await self._watch(work, ctx)
        except BaseException:  # the worker is stopping, or the watch broke: stop the harness
            await _stop(work)
            raise
        if stopped is LOST:
            return {"runs_lost": 1}
        if stopped is not None:
            status, why = stopped
            return await self._end(ctx, status, error=why)
        try:
            result = work.result()
        except Parked as parked:
            return await self._park(ctx, parked.interaction_id)
        except RunLost:  # taken over while it worked: the new holder goes on
            logger.warning("run %s was taken over; this holder stops", self.run.id)
            return {"runs_lost": 1}
        except HarnessFailed as exc:
            return await self._end(ctx, RunState.FAILED, error=str(exc))
        except Exception as exc:
            logger.exception("run %s of %s failed", self.run.id, agent.slug)
            return await self._end(ctx, RunState.FAILED, error=f"{type(exc).__name__}: {exc}")
        ctx.state.pop("continued_from", None)
        ctx.state.pop(RESUME, None)
        owed = await self.platform.monitors.processes.owed(
            self.run.id, after=ctx.state.get(WATCHED, 0)
        )
        if owed:  # it asked aegis to watch a process: it goes on when that ends
            going = [watch for watch in owed if not watch.status.is_over]
            return await self._park_on_watch(ctx, (going or owed)[-1])
        return await self._end(ctx, RunState.COMPLETED, result=str(result))

    async def _give_outcomes(self, ctx: RunContext) -> None:
        """Put the outcomes of the process watches this run asked for and that ended since it
        was last given one into its state, for the harness to give its agent. Any stretch
        looks, not only the one a watch woke: a worker that died right after the wake-up's
        claim leaves a run that goes on with the outcome, never one that forgot it. Saved
        before the harness starts, for the same reason."""
        owed = await self.platform.monitors.processes.owed(
            self.run.id, after=ctx.state.get(WATCHED, 0)
        )
        upto = self.watched.id if self.watched is not None else None
        ended = [w for w in owed if w.status.is_over and (upto is None or w.id <= upto)]
        if not ended:
            return
        ctx.state[WATCHED] = ended[-1].id
        ctx.state[RESUME] = "\n\n".join(watch.outcome or "" for watch in ended)
        await ctx.checkpoint(f"continuing after process watch #{ended[-1].id}")

    async def _park_on_watch(self, ctx: RunContext, watch) -> dict:
        parked = await self.platform.runs.park(
            self.run,
            None,
            watch_id=watch.id,
            state=ctx.state,
            effects=dict(ctx.effects),
            step=watch.waiting_step(),
        )
        if parked is None:
            return await self._not_parked(ctx)
        current = await self.platform.monitors.processes.get(watch.id)
        if current is not None and current.status.is_over:
            # Ended before this run parked on it: its wake-up found no run to wake.
            await self._enqueue(CONTINUE_ACTOR, parked.id, None, watch.id)
        return await self._ended(parked)

    async def _not_parked(self, ctx: RunContext) -> dict:
        current = await self.platform.runs.get(self.run.id)
        if (
            current is not None
            and current.cancel_requested
            and current.attempts == self.run.attempts
        ):
            return await self._end(ctx, RunState.CANCELLED, error=CANCELLED_BY_OWNER)
        return {"runs_lost": 1}

    async def _park(self, ctx: RunContext, interaction_id: int) -> dict:
        ctx.state.pop("continued_from", None)
        parked = await self.platform.runs.park(
            self.run,
            interaction_id,
            state=ctx.state,
            effects=dict(ctx.effects),
            step=f"waiting on card #{interaction_id}",
        )
        if parked is None:
            return await self._not_parked(ctx)
        card = await self.platform.interactions.get(interaction_id)
        if card is not None and not card.is_open:
            # Settled before this run parked on it (a shared card, a quick tap): the wake-up
            # went out before this run was there to get it, so it wakes itself.
            await self._enqueue("run_agent", parked.id, interaction_id)
        return await self._ended(parked)

    async def _watch(self, work: asyncio.Task, ctx: RunContext):
        """Wait for the harness; stop it at the deadline or on /cancel. Returns None when the
        harness ended, (status, why) when it was stopped, or LOST when the run was taken over."""
        loop = asyncio.get_running_loop()
        last_beat = last_progress = loop.time()
        while True:
            remaining = ctx.remaining()
            if remaining <= 0:
                await _stop(work)
                return RunState.TIMED_OUT, (
                    f"stopped at its deadline ({self.run.deadline_seconds}s of work)"
                )
            done, _ = await asyncio.wait({work}, timeout=min(remaining, WATCH_EVERY))
            if done:
                return None
            moment = loop.time()
            if moment - last_beat >= BEAT_EVERY:
                last_beat = moment
                beat = await self._beat()
                if beat is Beat.CANCEL:
                    await _stop(work)
                    return RunState.CANCELLED, CANCELLED_BY_OWNER
                if beat is Beat.LOST:
                    await _stop(work)
                    return LOST
            if moment - last_progress >= PROGRESS_EVERY:
                last_progress = moment
                current = await self.platform.runs.get(self.run.id)
                if current is not None:
                    await self._show(current)

    async def _beat(self) -> Beat:
        """One heartbeat; a store hiccup skips it (a run whose beats keep failing is taken
        over after the heartbeat timeout, and learns it at its next beat that gets through)."""
        try:
            return await self.platform.runs.beat(self.run)
        except Exception as exc:
            logger.warning("run %s missed a heartbeat: %s", self.run.id, type(exc).__name__)
            return Beat.GO_ON

    async def _end(
        self, ctx: RunContext, status: RunState, *, result: str | None = None, error=None
    ) -> dict:
        ended = await self.platform.runs.finish(
            self.run,
            status,
            effects=dict(ctx.effects),
            state=ctx.state,
            result=result,
            error=error,
        )
        return await self._ended(ended)

    async def _ended(self, run: AgentRun | None) -> dict:
        """Tell the owner how the stretch ended, and settle the run's task."""
        if run is None:  # someone else moved it first (a cancel of a parked run, a takeover)
            return {"runs_lost": 1}
        await self._show(run, force=True)
        await tell_end(self.platform, run)
        return {f"runs_{run.status.value}": 1, **run.effects}

    async def _step(self, what: str) -> None:
        current = await self.platform.runs.get(self.run.id)
        if current is not None:
            await self._show(current)

    async def _show(self, run: AgentRun, *, force: bool = False) -> None:
        """Edit the progress message (not more often than every STEP_EDITS_EVERY seconds,
        unless ``force``: the first and last states are always shown)."""
        moment = asyncio.get_running_loop().time()
        text = progress_text(run)
        if text == self.last_edit_text:
            return
        if not force and moment - self.last_edit_at < STEP_EDITS_EVERY:
            return
        self.last_edit_text, self.last_edit_at = text, moment
        await self.platform.show_run(run)

    async def _say(self, text: str, key: str) -> None:
        await self.platform.outbox.send(
            self.run.chat_id, text, key=key, thread_id=self.run.thread_id
        )

    async def _enqueue(self, actor: str, *args) -> None:
        try:
            await self.platform.interactions.enqueue(actor, *args)
        except BrokerError:  # the sweeps catch up (outbox sweep, run sweep)
            logger.warning("broker down: %s%s waits for a sweep", actor, args)


async def tell_end(platform, run: AgentRun) -> None:
    """Settle the run's task, then tell the owner how it ended: its last word, as a reply to
    its progress message. The last word's outbox key is the mark that both were done, so the
    run sweep can finish the job for a worker that died right after the run ended."""
    if run.task_id is not None:
        await settle_task(platform.tasks, run)
    if not run.status.is_over:
        return
    if run.status is RunState.COMPLETED:
        text = run.result or "Done."
    else:
        text = f"Run #{run.id} {ended_how(run)}: {run.error}"
    await platform.outbox.send(
        run.chat_id,
        text,
        key=end_key(run.id),
        reply_to_outbox=run.progress_outbox_id,
        thread_id=run.thread_id,
    )


async def _stop(work: asyncio.Task) -> None:
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait_for(asyncio.shield(work), timeout=CANCEL_GRACE)


@dramatiq.actor(queue_name="default", max_retries=0)
async def sweep_runs(schedule: str = "") -> dict:
    """Enqueue again every run nobody is working on (a killed worker, a lost message), wake
    every run still parked on a card settled (or a process watch ended) a while ago (a lost
    wake-up), and finish telling the end of runs whose worker died right after they ended."""
    platform = (await resources()).platform
    stale_after = timedelta(seconds=platform.settings.run_heartbeat_timeout)
    adrift = await platform.runs.adrift(stale_after=stale_after, queued_for=stale_after)
    for run_id in adrift:
        await asyncio.to_thread(run_agent.send, run_id)
    asleep = await platform.runs.parked_on_settled_cards(settled_for=stale_after)
    for run_id, card in asleep:
        await asyncio.to_thread(run_agent.send, run_id, card)
    watched = await platform.runs.parked_on_ended_watches(ended_for=stale_after)
    for run_id, watch in watched:
        await asyncio.to_thread(run_agent.send, run_id, None, watch)
    untold = await platform.runs.ended_untold(ended_for=stale_after)
    for run in untold:
        await tell_end(platform, run)
    return {
        "runs_taken_up": len(adrift),
        "parked_runs_woken": len(asleep) + len(watched),
        "run_ends_told": len(untold),
    }
