"""The commands of the foundation, driven through the emulator like a person would."""

from __future__ import annotations

from bot.chat.views.commands import COMMANDS
from tests.helpers.stack import eventually


async def test_start_and_help_explain_the_bot(stack):
    [start] = await stack.ask("/start")
    assert "aegis" in start["text"] and "/help" in start["text"] and "/demo" in start["text"]
    [help_] = await stack.ask("/help")
    assert all(command in help_["text"] for command in ("/status", "/pair", "/ping"))


async def test_help_lists_every_command_in_the_table_each_on_its_own_line(stack):
    [help_] = await stack.ask("/help")
    lines = help_["text"].splitlines()
    unlisted = [
        c.name for c in COMMANDS if not any(line.startswith(f"{c.usage}: ") for line in lines)
    ]
    assert unlisted == []


async def test_ping_is_answered_by_the_worker_with_the_round_trip(stack):
    [pong] = await stack.ask("/ping")
    assert pong["text"].startswith("pong from worker")
    assert " ms" in pong["text"]

    async def ping_run_recorded():
        runs = await stack.services.platform.job_runs.latest(10)
        return any(run.job == "ping" and run.summary == {"messages_queued": 1} for run in runs)

    await eventually(ping_run_recorded)


async def test_status_shows_processes_queues_database_broker_and_jobs(stack):
    await stack.ask("/ping")
    await eventually(lambda: stack.services.platform.job_runs.latest(5))
    [status] = await stack.ask("/status")
    text = status["text"]
    assert "web: web@" in text and "worker: worker@" in text
    assert "Queues: default" in text
    assert stack.store.describe() in text
    assert "Broker: test Redis" in text
    assert "ping completed" in text
    button = status["reply_markup"]["inline_keyboard"][0][0]
    assert button["text"] == "Refresh"


async def test_unknown_command_gets_a_pointer_to_help_and_plain_text_is_captured(stack):
    [unknown] = await stack.ask("/frobnicate now")
    assert unknown["text"] == "I don't know /frobnicate. /help lists what I can do."
    [text] = await stack.ask("just some words")
    assert text["text"].startswith("Captured as task 1: just some words\n")
    assert [task.title for task in await _open_tasks(stack)] == ["just some words"]


async def test_a_forward_is_acknowledged_and_captured_with_its_original_sender(stack):
    origins = [
        ({"type": "user", "sender_user": {"id": 42, "is_bot": False, "first_name": "Ann"}}, "Ann"),
        ({"type": "hidden_user", "sender_user_name": "Bob"}, "Bob"),
        (
            {
                "type": "channel",
                "chat": {"id": -100, "type": "channel", "title": "News"},
                "message_id": 5,
            },
            "News",
        ),
    ]
    for number, (origin, _) in enumerate(origins, start=1):
        [reply] = await stack.ask(f"look at this {number}", forward_origin=origin)
        assert reply["text"].startswith(f"Captured as task {number}: look at this {number}\n")
    tasks = await _open_tasks(stack)
    assert [task.origin_name for task in tasks] == [shown for _, shown in origins]
    assert [task.origin_kind for task in tasks] == ["user", "hidden_user", "channel"]


async def _open_tasks(stack):
    from bot.tasks.task import State

    return (await stack.services.platform.tasks.in_state(State.INBOX)).tasks
