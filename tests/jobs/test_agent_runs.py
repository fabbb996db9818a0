"""Agent runs end to end, on SQLite and Postgres: /run through the real bot and the emulator, a
real Dramatiq worker on Redis running the script harness, the gate, cards and taps.

Each test reads how a run ended from its ``agent_runs`` row and what the owner saw from the
emulator's transcript; it waits for states, never for a time.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

import dramatiq
import pytest
from sqlalchemy import func, select, update

from bot.agents.agent_run import RunOrigin, RunState
from bot.store.tables import agent_runs, interactions
from tests.helpers.runs import message_with, run_in, start, tap, tool_runs
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack

CONFIG = """\
agents:
  scribe:
    name: Scribe
    harness: script
    tags: [gtd]
    tools: [demo.read_clock, demo.write_file]
    deadline: 60
    steps:
      - say: "Starting on {request}"
      - call: demo.read_clock
      - call: demo.write_file
        args: {name: "scribe-{run}.txt", text: "{request}"}
      - say: Finished
  sleeper:
    harness: script
    deadline: 1
    steps:
      - say: going to sleep
      - sleep: 120
  napper:
    harness: script
    deadline: 120
    steps:
      - sleep: 120
  twin:
    harness: script
    tools: [demo.write_file]
    steps:
      - call: demo.write_file
        args: {name: twin.txt, text: same}
  gatekeeper:
    tools: [demo.read_clock]
"""


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(CONFIG, encoding="utf-8")
    async with running_stack(settings, namespace=redis_namespace) as running:
        yield running


async def card_of(stack, run_id: int) -> dict:
    return await message_with(stack, r"Approval needed · card #\d+ · from scribe")


async def test_a_run_parks_on_its_card_and_continues_once_approved(stack):
    run_id, progress = await start(stack, "/run scribe hello world")
    parked = await run_in(stack, run_id, RunState.PARKED)
    assert parked["waiting_on"] is not None
    card = await card_of(stack, run_id)
    assert f"scribe-{run_id}.txt" in card["text"]

    await tap(stack, card, "Approve")
    done = await run_in(stack, run_id, RunState.COMPLETED)

    written = stack.settings.data_dir / "demo" / f"scribe-{run_id}.txt"
    assert written.read_text() == "hello world"
    assert await tool_runs(stack, "demo.write_file") == 1
    assert done["effects"] == {
        "messages_sent": 2,
        "tool_calls": 2,
        "cards_asked": 1,
    }
    assert done["attempts"] == 2  # started, then continued from the card
    # The progress message was edited in place to the end; the result is a reply to it.
    result = await message_with(stack, r"demo.write_file: ran: wrote 11 characters")
    assert result["reply_to_message_id"] == progress["message_id"]

    async def progress_shows_the_end():
        [message] = [
            m for m in await stack.bot_messages() if m["message_id"] == progress["message_id"]
        ]
        return "completed" in message["text"] and message

    edited = await eventually(progress_shows_the_end)
    assert "Changed: cards asked: 1, messages sent: 2, tool calls: 2" in edited["text"]
    # Each thing the run said was said once, though its work came in two stretches.
    texts = [m["text"] for m in await stack.bot_messages()]
    assert texts.count("Starting on hello world") == 1
    assert texts.count("Finished") == 1


async def test_a_denied_call_is_reported_and_never_asked_again(stack):
    run_id, _ = await start(stack, "/run scribe keep this")
    await run_in(stack, run_id, RunState.PARKED)
    await tap(stack, await card_of(stack, run_id), "Deny")
    done = await run_in(stack, run_id, RunState.COMPLETED)

    assert "was denied; nothing was done" in done["result"]
    assert not (stack.settings.data_dir / "demo" / f"scribe-{run_id}.txt").exists()
    assert await tool_runs(stack, "demo.write_file") == 0
    async with stack.store.read() as conn:
        cards = (await conn.execute(select(func.count()).select_from(interactions))).scalar_one()
    assert cards == 1
    assert done["effects"]["calls_refused"] == 1


async def test_a_hung_run_is_stopped_at_its_deadline_and_the_owner_told(stack):
    run_id, progress = await start(stack, "/run sleeper dream")
    ended = await run_in(stack, run_id, RunState.TIMED_OUT)
    assert "deadline" in ended["error"]
    told = await message_with(stack, rf"Run #{run_id} timed out: stopped at its deadline")
    assert told["reply_to_message_id"] == progress["message_id"]


async def test_cancel_stops_a_running_run(stack):
    run_id, _ = await start(stack, "/run napper rest")
    await run_in(stack, run_id, RunState.RUNNING)
    sent = await stack.send(f"/cancel {run_id}")
    await message_with(stack, rf"^Stopping run #{run_id}", after=sent["message_id"])
    ended = await run_in(stack, run_id, RunState.CANCELLED)
    assert ended["error"] == "cancelled by the owner"
    await message_with(stack, rf"Run #{run_id} was cancelled")
    sent = await stack.send(f"/cancel {run_id}")
    await message_with(
        stack, rf"^Run #{run_id} is already over \(cancelled\)\.$", after=sent["message_id"]
    )


async def test_a_parked_run_cancelled_does_not_run_on_when_its_card_is_approved(stack):
    run_id, _ = await start(stack, "/run scribe never mind")
    await run_in(stack, run_id, RunState.PARKED)
    card = await card_of(stack, run_id)
    sent = await stack.send(f"/cancel {run_id}")
    await message_with(
        stack, rf"^Run #{run_id} is cancelled; it had not run on\.$", after=sent["message_id"]
    )

    await tap(stack, card, "Approve")

    async def continuation_came():
        async with stack.store.read() as conn:
            row = (await conn.execute(select(interactions.c.continued_at))).one()
        return row.continued_at is not None

    await eventually(continuation_came)
    row = await run_in(stack, run_id, RunState.CANCELLED)
    assert row["attempts"] == 1
    assert await tool_runs(stack, "demo.write_file") == 0


async def test_runs_parked_on_one_shared_card_all_wake_and_the_grant_is_used_once(stack):
    first, _ = await start(stack, "/run twin a")
    second, _ = await start(stack, "/run twin b")
    one = await run_in(stack, first, RunState.PARKED)
    two = await run_in(stack, second, RunState.PARKED)
    assert one["waiting_on"] == two["waiting_on"]  # identical calls: one card
    card = await message_with(stack, r"Approval needed · card #\d+ · from twin")
    await tap(stack, card, "Approve")

    async def settled():
        rows = [await run_in(stack, run_id, *RunState) for run_id in (first, second)]
        statuses = sorted(row["status"] for row in rows)
        asked_again = [r for r in rows if r["waiting_on"] not in (None, one["waiting_on"])]
        # One ran the call; the other woke, found the grant used, and asked on a card of its own.
        return statuses == ["completed", "parked"] and asked_again

    await eventually(settled)
    assert await tool_runs(stack, "demo.write_file") == 1


@pytest.mark.parametrize(
    "command, refusal",
    [
        (
            "/run ghost do it",
            "No agent is called 'ghost'. Agents that run: demo, napper, scribe, sleeper, twin",
        ),
        ("/run gatekeeper look", "gatekeeper has no harness in aegis.yaml, so it cannot run."),
        ("/run scribe", "Say what scribe should do: /run scribe what to do"),
        ("/run", "Send /run, an agent and what to do"),
    ],
)
async def test_a_run_that_cannot_start_is_refused_in_words_and_nothing_is_made(
    stack, command, refusal
):
    [answer] = await stack.ask(command)
    assert refusal in answer["text"]
    async with stack.store.read() as conn:
        made = (await conn.execute(select(func.count()).select_from(agent_runs))).scalar_one()
    assert made == 0


async def test_runs_and_agents_show_what_ran_and_what_it_changed(stack):
    run_id, _ = await start(stack, "/run sleeper short")
    await run_in(stack, run_id, RunState.TIMED_OUT)
    await message_with(stack, rf"Run #{run_id} timed out")  # its last word, before we ask

    [runs] = await stack.ask("/runs")
    assert f"#{run_id} sleeper · timed out" in runs["text"]
    assert "changed: messages sent: 1" in runs["text"]

    [agents] = await stack.ask("/agents")
    assert "• scribe — Scribe · script · tags: gtd" in agents["text"]
    assert f"last run: #{run_id} timed out" in agents["text"]
    assert "• gatekeeper — gatekeeper · no harness (gate identity only)" in agents["text"]


async def test_the_same_run_command_handled_twice_starts_one_run(stack):
    platform = stack.services.platform
    first = await platform.start_run("scribe", "once", OWNER_CHAT, key="command:test:1")
    second = await platform.start_run("scribe", "once", OWNER_CHAT, key="command:test:1")
    assert first.id == second.id
    async with stack.store.read() as conn:
        made = (await conn.execute(select(func.count()).select_from(agent_runs))).scalar_one()
    assert made == 1


async def test_an_agent_added_to_aegis_yaml_runs_without_a_restart(stack):
    text = stack.settings.config_file.read_text()
    stack.settings.config_file.write_text(
        text + "  newcomer:\n    harness: script\n    steps:\n      - say: hello from the file\n"
    )

    async def runs_now():
        [answer] = await stack.ask("/run newcomer greet")
        return answer if answer["text"].startswith("Run #") else None

    await eventually(runs_now, every=0.5)
    await message_with(stack, r"^hello from the file$")


async def test_a_broken_aegis_yaml_keeps_the_last_good_one(stack):
    # A first run, so the worker has read the good file before it breaks.
    first, _ = await start(stack, "/run sleeper before")
    await run_in(stack, first, RunState.TIMED_OUT)
    stack.settings.config_file.write_text("agents:\n  scribe:\n    harness: telepathy\n")
    platform = stack.services.platform

    def problem_seen():
        platform.config.current()
        return platform.config.problem

    problem = await eventually(problem_seen, every=0.3)
    assert "agents.scribe.harness: must be one of script, http" in problem
    assert "scribe" in platform.agents  # still the last good file
    sent = await stack.send("/status")
    status = await message_with(stack, "^aegis status", after=sent["message_id"])
    assert "aegis.yaml changed but is not used" in status["text"]
    assert "agents.scribe.harness: must be one of" in status["text"]
    run_id, _ = await start(stack, "/run sleeper still works")
    await run_in(stack, run_id, RunState.TIMED_OUT)


HANDOFF = """\
agents:
  relay:
    harness: script
    deadline: 120
    steps:
      - say: first leg
      - sleep: 2
      - say: second leg
"""


async def test_a_stopping_worker_hands_its_run_back_and_the_next_worker_goes_on(
    tmp_path, database_url, redis_server_url, redis_namespace
):
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(HANDOFF, encoding="utf-8")
    async with running_stack(settings, namespace=redis_namespace, worker=False) as stack:
        worker = await asyncio.to_thread(start_worker, stack.broker)
        run_id, _ = await start(stack, "/run relay go")
        await message_with(stack, "^first leg$")
        await asyncio.to_thread(worker.stop)  # mid-sleep: the run is handed back
        handed = await run_in(stack, run_id, RunState.QUEUED)
        assert handed["state"]["step"] == 1 and handed["attempts"] == 1

        worker = await asyncio.to_thread(start_worker, stack.broker)
        try:
            await stack.services.platform.interactions.enqueue("sweep_runs")
            done = await run_in(stack, run_id, RunState.COMPLETED)
            await message_with(stack, "^second leg$")
            texts = [m["text"] for m in await stack.bot_messages()]
        finally:
            await asyncio.to_thread(worker.stop)
    assert done["attempts"] == 2
    assert texts.count("first leg") == 1 and texts.count("second leg") == 1


def start_worker(broker):
    worker = dramatiq.Worker(broker, worker_threads=2, worker_timeout=50)
    worker.start()
    return worker


async def test_a_task_whose_run_is_cancelled_waits_with_a_comment_saying_so(stack):
    [receipt] = await stack.ask("Write the quarterly note")
    task_id = int(re.match(r"Captured as task (\d+)", receipt["text"]).group(1))
    platform = stack.services.platform
    run = await platform.start_run(
        "scribe", "quarterly", OWNER_CHAT, origin=RunOrigin.TASK, task_id=task_id
    )
    await run_in(stack, run.id, RunState.PARKED)

    async def waiting():
        task = await platform.tasks.get(task_id)
        return task.state == "@waiting" and task

    await eventually(waiting)
    sent = await stack.send(f"/cancel {run.id}")
    await message_with(
        stack, rf"^Run #{run.id} is cancelled; it had not run on\.$", after=sent["message_id"]
    )
    task = await platform.tasks.get(task_id)
    assert task.is_open and task.state == "@waiting"
    comments = await platform.tasks.comments(task_id)
    assert comments[-1] == (
        f"Run #{run.id} by scribe was cancelled: cancelled by the owner before it ran on"
    )

    async def progress_says_cancelled():
        [message] = [
            m for m in await stack.bot_messages() if m["text"].startswith(f"Run #{run.id} ·")
        ]
        return "cancelled" in message["text"]

    await eventually(progress_says_cancelled)


async def test_a_run_whose_wake_up_was_lost_is_woken_by_the_run_sweep(stack):
    run_id, _ = await start(stack, "/run scribe lost in the mail")
    parked = await run_in(stack, run_id, RunState.PARKED)
    # The card is settled (denied) an hour ago, and the continuation that should have woken
    # the run never went out: a worker died in between.
    async with stack.store.write() as conn:
        await conn.execute(
            update(interactions)
            .where(interactions.c.id == parked["waiting_on"])
            .values(
                status="resolved",
                outcome="denied",
                resolved_at=datetime.now(UTC) - timedelta(hours=1),
                continuation_sent_at=datetime.now(UTC) - timedelta(hours=1),
            )
        )
    await stack.services.platform.interactions.enqueue("sweep_runs")
    done = await run_in(stack, run_id, RunState.COMPLETED)
    assert "was denied; nothing was done" in done["result"]
    assert await tool_runs(stack, "demo.write_file") == 0


async def test_the_end_of_a_run_whose_worker_died_right_after_is_told_by_the_run_sweep(stack):
    [receipt] = await stack.ask("Send the invoice")
    task_id = int(re.match(r"Captured as task (\d+)", receipt["text"]).group(1))
    runs = stack.services.platform.runs
    run, _ = await runs.create(
        "scribe", "invoice", OWNER_CHAT, origin=RunOrigin.TASK, deadline_seconds=60, task_id=task_id
    )
    held = await runs.claim(run.id, stale_after=timedelta(seconds=30))
    await runs.finish(held, RunState.COMPLETED, effects={"tool_calls": 1}, result="Invoice sent.")
    # The worker died here: nobody told the owner, nobody closed the task.
    async with stack.store.write() as conn:
        await conn.execute(
            update(agent_runs)
            .where(agent_runs.c.id == run.id)
            .values(finished_at=datetime.now(UTC) - timedelta(minutes=5))
        )
    await stack.services.platform.interactions.enqueue("sweep_runs")
    await message_with(stack, "^Invoice sent.$")
    task = await eventually(lambda: stack.services.platform.tasks.get(task_id))
    assert task.closed_as == "done"
    # Told once: the next sweep finds nothing untold.
    assert await runs.ended_untold(ended_for=timedelta(0)) == []
