"""A worker killed with SIGKILL in the middle of a run, on SQLite and Postgres.

The run's worker is an OS process of its own (tests/helpers/worker_process.py: ``aegis worker``
on the test's Redis namespace); the web app, the bot and the emulator run here. The agent says
"one", reads the clock (a read tool: no card), sleeps, and says "two". The worker is killed
during the sleep; another worker starts, the run sweep finds the run's heartbeat stale and
enqueues it again, and the new worker goes on from the step the dead one was in. What must
hold: the run ends completed on its second attempt, "one" and "two" each reach the owner once,
the clock is read once (the step that had finished is not done again), and the rows say so.
"""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from sqlalchemy import func, select

from bot.actions.audit import AuditEvent
from bot.agents.agent_run import RunState
from bot.chat.outgoing import OutboxStatus
from bot.store.tables import agent_runs, audit_events, outbox, runs
from tests.helpers import worker_process
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack

# Above the runner's one-second beat with room for a loaded machine: a live worker whose beat
# came a little late must not be taken over (that would be a third attempt).
HEARTBEAT_TIMEOUT = 2.0
SLEEP = 6  # the step the worker is killed in; long enough to kill it there, done twice
CONFIG = f"""\
agents:
  relay:
    name: Relay
    harness: script
    tools: [demo.read_clock]
    deadline: 10m
    steps:
      - say: one
      - call: demo.read_clock
      - sleep: {SLEEP}
      - say: two
"""
SLEEP_STEP = f"step 3/4: waiting {SLEEP}s"


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    """aegis without a worker of its own: the workers are processes the test starts and kills."""
    settings = make_settings(
        tmp_path / "data",
        database_url,
        redis_server_url,
        run_heartbeat_timeout=HEARTBEAT_TIMEOUT,
        log_level="INFO",
    )
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(CONFIG, encoding="utf-8")
    async with running_stack(settings, namespace=redis_namespace, worker=False) as running:
        yield running


@pytest.fixture
def workers(stack, redis_namespace, tmp_path):
    """Start worker processes; any still running at the end is stopped."""
    started = worker_process.Workers(stack.settings, redis_namespace, tmp_path / "workers.log")

    async def start() -> subprocess.Popen:
        return await started.start()

    start.log = started.log
    yield start
    started.close()


async def the_run(stack):
    async with stack.store.read() as conn:
        return (await conn.execute(select(agent_runs))).first()


async def texts(stack) -> list[str]:
    return [m.get("text") for m in await stack.bot_messages()]


async def sweep_once(stack) -> dict:
    """Enqueue the run sweep, as the clock does, and wait for its summary."""

    async def sweeps() -> list[dict]:
        async with stack.store.read() as conn:
            query = select(runs.c.summary).where(runs.c.job == "sweep_runs").order_by(runs.c.id)
            return list((await conn.execute(query)).scalars())

    before = len(await sweeps())
    await stack.services.platform.interactions.enqueue("sweep_runs")
    done = await eventually(lambda: _more(sweeps, before), timeout=20)
    return done[before]


async def _more(read, count: int):
    rows = await read()
    return rows if len(rows) > count else None


async def asleep_and_quiet(stack):
    """The run, once it sleeps, "one" has reached the owner, and nothing is being sent.

    Killed in the middle of a delivery, a worker would hold the chat's later messages for the
    outbox's lease (a minute; bot/chat/deliveries.py): that is the outbox's fault to survive,
    not this test's. So the kill waits for a heartbeat at least a second after the sleep was
    first seen (the step's progress edit, if any, is queued by then) and for the chat's outbox
    to be idle.
    """

    async def sleeping():
        row = await the_run(stack)
        return row and row.step == SLEEP_STEP and "one" in await texts(stack) and row

    entered = await eventually(sleeping, timeout=20)

    async def later_and_quiet():
        row = await sleeping()
        if not row or (row.heartbeat_at - entered.heartbeat_at).total_seconds() < 1:
            return None
        async with stack.store.read() as conn:
            query = select(func.count()).where(
                outbox.c.chat_id == OWNER_CHAT,
                outbox.c.status.in_((OutboxStatus.PENDING, OutboxStatus.SENDING)),
            )
            unsent = (await conn.execute(query)).scalar_one()
        return row if unsent == 0 else None

    return await eventually(later_and_quiet, timeout=20)


async def test_a_run_whose_worker_is_killed_is_taken_over_and_says_everything_once(stack, workers):
    first = await workers()
    await stack.send("/run relay take this over")

    held = await asleep_and_quiet(stack)
    first.kill()
    await asyncio.to_thread(first.wait)
    assert held.status == RunState.RUNNING and held.attempts == 1

    second = await workers()
    # Until its heartbeat is stale the run is someone's; then the sweep takes it up, once.
    taken = await eventually(lambda: _taken_up(stack), timeout=20, every=HEARTBEAT_TIMEOUT / 4)
    assert taken == {"runs_taken_up": 1, "parked_runs_woken": 0, "run_ends_told": 0}

    async def ended():
        row = await the_run(stack)
        return row.status != RunState.RUNNING and row

    run = await eventually(ended, timeout=30)
    log = workers.log.read_text()[-3000:]
    assert run.status == RunState.COMPLETED, (run.status, run.error, log)
    assert run.attempts == 2
    assert run.effects == {"messages_sent": 2, "tool_calls": 1}
    assert run.result.startswith("demo.read_clock: ran: the server clock says")
    assert run.finished_at is not None and run.started_at <= held.heartbeat_at < run.finished_at

    # The owner: "one" and "two" once each, the result once, as a reply to the run's message.
    async def everything_said():
        messages = await stack.bot_messages()
        return (
            "two" in [m["text"] for m in messages]
            and any(m["reply_to_message_id"] for m in messages)
            and messages
        )

    messages = await eventually(everything_said, timeout=20)
    said = [m["text"] for m in messages]
    assert said.count("one") == 1 and said.count("two") == 1
    assert said.index("one") < said.index("two")
    [progress] = [m for m in messages if (m["text"] or "").startswith(f"Run #{run.id} ")]
    [result] = [m for m in messages if m["reply_to_message_id"]]
    assert result["reply_to_message_id"] == progress["message_id"]
    assert result["text"] == run.result
    await eventually(lambda: _shows_completed(stack, progress["message_id"]), timeout=20)
    [listing] = await stack.ask("/runs")
    assert f"#{run.id} relay · completed" in listing["text"]
    assert "changed: messages sent: 2, tool calls: 1" in listing["text"]

    async with stack.store.read() as conn:
        # The clock was read once: the step the dead worker had finished did not run again.
        reads = (
            await conn.execute(
                select(func.count())
                .select_from(audit_events)
                .where(
                    audit_events.c.agent == "relay",
                    audit_events.c.tool == "demo.read_clock",
                    audit_events.c.event == AuditEvent.ALLOWED,
                )
            )
        ).scalar_one()
        said_rows = (
            await conn.execute(
                select(outbox.c.idempotency_key, outbox.c.parts, outbox.c.status)
                .where(outbox.c.idempotency_key.like(f"run:{run.id}:%"))
                .order_by(outbox.c.id)
            )
        ).all()
    assert reads == 1
    assert [tuple(row) for row in said_rows] == [
        (f"run:{run.id}:say:step:0", ["one"], "sent"),
        (f"run:{run.id}:say:step:3", ["two"], "sent"),
        (f"run:{run.id}:end", [run.result], "sent"),
    ]
    # The jobs' own rows (written in batches a moment after each job, so waited for): the
    # sweep that took the run up, and no run_agent job that failed.
    jobs = await eventually(lambda: _agent_jobs(stack), timeout=20)
    assert all(status == "completed" for status, _ in jobs), jobs
    assert second.poll() is None  # the second worker is alive and did the work


async def _agent_jobs(stack) -> list[tuple[str, dict]]:
    """The run_agent jobs recorded (statuses and summaries), once there are some."""
    async with stack.store.read() as conn:
        query = select(runs.c.status, runs.c.summary).where(runs.c.job == "run_agent")
        rows = [tuple(row) for row in (await conn.execute(query.order_by(runs.c.id)))]
    return rows or None


async def _taken_up(stack):
    summary = await sweep_once(stack)
    return summary if summary.get("runs_taken_up") else None


async def _shows_completed(stack, message_id: int) -> bool:
    messages = await stack.emulator.messages(OWNER_CHAT)
    [progress] = [m for m in messages if m["message_id"] == message_id]
    return progress["text"].startswith("Run #") and " · completed" in progress["text"]
