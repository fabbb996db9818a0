"""The http harness end to end, on SQLite and Postgres: /run through the real bot and the
emulator, a real Dramatiq worker on Redis, and two scripted OpenAI-compatible fake model servers
on local ports (tests/helpers/fake_model.py) as the agent's providers, first and second.

Runs (a tool read, a write parked for approval, a denied write, failing providers falling to
the next, a missing key, every provider failing, the tool loop's bound, malformed arguments)
and budgets (an agent's spent, and the overall one). Each test reads how a run ended from its
``agent_runs`` row, what the model was sent from the fake's requests, and the ledger from
``model_calls``; it waits for states, never for a time.
"""

from __future__ import annotations

import json
import re

import pytest
from sqlalchemy import func, select

from bot.agents.agent_run import RunState
from bot.agents.ledger import Ledger
from bot.store.tables import agent_runs, audit_events, interactions, model_calls
from jobs.harnesses import http as http_harness
from jobs.harnesses.http import MAX_TURNS
from tests.helpers.fake_model import running_fake_model
from tests.helpers.runs import buttons, run_in, tap, tool_runs
from tests.helpers.stack import eventually, make_settings, running_stack

KEY = "sk-fake-0123456789"
CONFIG = """\
agents:
  scout:
    name: Scout
    harness: http
    model: small
    providers:
      - {{url: "{first}", model: small, key_env: FAKE_MODEL_KEY, name: first}}
      - {{url: "{second}", model: backup, name: second}}
    instructions: You are Scout. Answer in one line.
    tools: [demo.read_clock, demo.write_file]
    deadline: 60
  thrifty:
    harness: http
    providers:
      - {{url: "{first}", model: tiny, name: first}}
    tools: [demo.read_clock]
    budget_tokens: 100
"""


@pytest.fixture
async def first():
    async with running_fake_model() as fake:
        yield fake


@pytest.fixture
async def second():
    async with running_fake_model() as fake:
        yield fake


@pytest.fixture
def stack_with(tmp_path, database_url, redis_server_url, redis_namespace, first, second):
    """Start the whole of aegis (settings ``overrides``) with scout and thrifty on the fakes."""

    def start(**overrides):
        settings = make_settings(tmp_path / "data", database_url, redis_server_url, **overrides)
        settings.config_file.parent.mkdir(parents=True, exist_ok=True)
        config = CONFIG.format(first=first.url, second=second.url)
        settings.config_file.write_text(config, encoding="utf-8")
        return running_stack(settings, namespace=redis_namespace)

    return start


@pytest.fixture
async def stack(stack_with, monkeypatch):
    monkeypatch.setenv("FAKE_MODEL_KEY", KEY)
    async with stack_with() as running:
        yield running


async def start(stack, text: str) -> tuple[int, dict]:
    [progress] = await stack.ask(text)
    found = re.match(r"Run #(\d+) · ", progress["text"])
    assert found, progress["text"]
    return int(found.group(1)), progress


async def message_with(stack, pattern: str, timeout: float = 15) -> dict:
    async def found():
        for message in await stack.bot_messages():
            if re.search(pattern, message["text"] or ""):
                return message
        return None

    return await eventually(found, timeout=timeout)


async def ledger_rows(stack) -> list[tuple]:
    query = select(
        model_calls.c.provider,
        model_calls.c.model,
        model_calls.c.status,
        model_calls.c.prompt_tokens,
        model_calls.c.completion_tokens,
        model_calls.c.agent,
        model_calls.c.run_id,
    ).order_by(model_calls.c.id)
    async with stack.store.read() as conn:
        return [tuple(row) for row in (await conn.execute(query)).all()]


def tool_messages(got) -> list[dict]:
    return [m for m in got.messages if m["role"] == "tool"]


# Runs


async def test_a_run_reads_a_tool_then_answers(stack, first, second):
    first.call("demo-read_clock", {})
    first.answer("It is noon on the server.", prompt_tokens=30, completion_tokens=7)
    run_id, progress = await start(stack, "/run scout what time is it?")
    done = await run_in(stack, run_id, RunState.COMPLETED)

    assert done["result"] == "It is noon on the server."
    answer = await message_with(stack, r"^It is noon on the server\.$")
    assert answer["reply_to_message_id"] == progress["message_id"]
    asked, told = first.requests
    assert asked.headers["Authorization"] == f"Bearer {KEY}"
    assert asked.body["model"] == "small"
    assert asked.messages == [
        {"role": "system", "content": "You are Scout. Answer in one line."},
        {"role": "user", "content": "what time is it?"},
    ]
    assert asked.tool_names == ["demo-read_clock", "demo-write_file"]
    write = asked.body["tools"][1]["function"]
    assert write["parameters"]["required"] == ["name", "text"]
    assert "approval" in write["description"]
    [result] = tool_messages(told)
    assert result["tool_call_id"] == told.messages[2]["tool_calls"][0]["id"]
    assert result["content"].startswith("the server clock says ")
    assert await tool_runs(stack, "demo.read_clock") == 1
    assert done["effects"] == {"tool_calls": 1}
    assert second.requests == []
    assert await ledger_rows(stack) == [
        ("first", "small", "ok", 10, 5, "scout", run_id),
        ("first", "small", "ok", 30, 7, "scout", run_id),
    ]


async def test_a_write_parks_and_runs_once_when_approved(stack, first):
    args = {"name": "note.txt", "text": "remember the milk"}
    first.call("demo-write_file", args)
    first.answer("Written.")
    run_id, _ = await start(stack, "/run scout note that down")
    parked = await run_in(stack, run_id, RunState.PARKED)
    card = await message_with(stack, r"Approval needed · card #\d+ · from scout")
    assert "demo.write_file" in card["text"] and "remember the milk" in card["text"]
    assert len(first.requests) == 1  # nothing more is asked while it waits

    await tap(stack, card, "Approve")
    done = await run_in(stack, run_id, RunState.COMPLETED)

    assert done["result"] == "Written."
    assert parked["waiting_on"] is not None
    written = stack.settings.data_dir / "demo" / "note.txt"
    assert written.read_text() == "remember the milk"
    assert await tool_runs(stack, "demo.write_file") == 1
    _, told = first.requests
    [result] = tool_messages(told)
    assert result["content"] == "wrote 17 characters to note.txt"
    # The model's turn was not asked again: the conversation went on from where it stopped.
    assert told.messages[2]["tool_calls"][0]["function"]["arguments"] == json.dumps(args)
    assert done["effects"] == {"cards_asked": 1, "tool_calls": 1}
    assert done["attempts"] == 2


async def test_a_denied_write_tells_the_model_nothing_was_done(stack, first):
    first.call("demo-write_file", {"name": "no.txt", "text": "x"})
    first.answer("Understood, I left it.")
    run_id, _ = await start(stack, "/run scout write something")
    await run_in(stack, run_id, RunState.PARKED)
    await tap(stack, await message_with(stack, r"Approval needed · card #\d+"), "Deny")
    done = await run_in(stack, run_id, RunState.COMPLETED)

    assert done["result"] == "Understood, I left it."
    [result] = tool_messages(first.requests[1])
    assert result["content"].startswith("Refused: the owner was asked on card #")
    assert "it was denied; nothing was done" in result["content"]
    assert not (stack.settings.data_dir / "demo" / "no.txt").exists()
    assert await tool_runs(stack, "demo.write_file") == 0
    assert done["effects"] == {"cards_asked": 1, "calls_refused": 1}


FAILURES = {
    "500": (lambda fake: fake.fail(500), "http 500"),
    "401": (lambda fake: fake.fail(401), "http 401"),
    "429": (lambda fake: fake.fail(429), "http 429"),
    "not a completion": (lambda fake: fake.garbage(), "bad body"),
    "connection dropped": (lambda fake: fake.drop(), "connection error"),
    "hung past the ceiling": (lambda fake: fake.hang(30), "timeout"),
}


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_a_failing_provider_falls_to_the_next_and_the_ledger_shows_both(
    stack, first, second, failure, monkeypatch
):
    fail, status = FAILURES[failure]
    monkeypatch.setattr(http_harness, "CALL_CEILING", 1.0)  # the worker runs in this process
    fail(first)
    second.answer("The backup answers.")
    run_id, _ = await start(stack, "/run scout hello")
    done = await run_in(stack, run_id, RunState.COMPLETED)

    assert done["result"] == "The backup answers."
    assert len(first.requests) == 1
    [asked] = second.requests
    assert asked.body["model"] == "backup"
    assert "Authorization" not in asked.headers  # second has no key_env
    assert await ledger_rows(stack) == [
        ("first", "small", status, 0, 0, "scout", run_id),
        ("second", "backup", "ok", 10, 5, "scout", run_id),
    ]

    await message_with(stack, r"^The backup answers\.$")  # its last word, before we ask
    [models] = await stack.ask("/models")
    assert _timeless(models["text"]) == (
        "Models (provider · model):\n"
        "• first · small\n"
        f"   never succeeded · last failure HH:MM ({status}) · 1 call in 24 h\n"
        "• second · backup\n"
        "   last ok HH:MM · 1 call in 24 h\n"
        "• first · tiny\n"
        "   never called"
    )


def _timeless(text: str) -> str:
    return re.sub(r"(\d{4}-\d\d-\d\d )?\d\d:\d\d UTC", "HH:MM", text)


async def test_a_missing_key_fails_that_provider_without_a_request(
    stack, first, second, monkeypatch
):
    second.answer("Only the backup was asked.")
    monkeypatch.delenv("FAKE_MODEL_KEY")
    run_id, _ = await start(stack, "/run scout hi")
    done = await run_in(stack, run_id, RunState.COMPLETED)

    assert done["result"] == "Only the backup was asked."
    assert first.requests == []
    rows = await ledger_rows(stack)
    assert rows[0][:3] == ("first", "small", "no key (FAKE_MODEL_KEY is not set)")
    assert rows[1][:3] == ("second", "backup", "ok")


async def test_when_every_provider_fails_the_run_fails_with_a_clear_reason(stack, first, second):
    first.fail(500)
    second.garbage()
    run_id, progress = await start(stack, "/run scout hello")
    failed = await run_in(stack, run_id, RunState.FAILED)

    reason = "Every model provider failed: first (small): http 500; second (backup): bad body."
    assert failed["error"] == reason
    told = await message_with(stack, rf"^Run #{run_id} failed: Every model provider failed")
    assert told["text"] == f"Run #{run_id} failed: {reason}"
    assert told["reply_to_message_id"] == progress["message_id"]
    assert KEY not in told["text"]
    assert [row[2] for row in await ledger_rows(stack)] == ["http 500", "bad body"]


async def test_the_tool_loop_stops_after_its_bound_and_says_so(stack, first):
    for _ in range(MAX_TURNS):
        first.call("demo-read_clock", {}, text="Checking again.")
    run_id, _ = await start(stack, "/run scout watch the clock forever")
    done = await run_in(stack, run_id, RunState.COMPLETED)

    assert done["result"] == (
        f"Stopped after {MAX_TURNS} model turns, the most a run may take; the model still "
        "asked for demo.read_clock, which was not done. Its last words: Checking again."
    )
    assert len(first.requests) == MAX_TURNS
    # The last turn's call was not made: the model would never have seen its result.
    assert await tool_runs(stack, "demo.read_clock") == MAX_TURNS - 1
    await message_with(stack, rf"^Stopped after {MAX_TURNS} model turns")


async def test_malformed_arguments_are_answered_as_an_error_and_never_run(stack, first):
    first.call("demo-write_file", '{"name": "a.txt", "text": ')
    first.call("demo-delete_file", {"name": "a.txt"})  # offered to scout? no: not granted
    first.answer("I give up.")
    run_id, _ = await start(stack, "/run scout try")
    done = await run_in(stack, run_id, RunState.COMPLETED)

    assert done["result"] == "I give up."
    [bad_json] = tool_messages(first.requests[1])
    assert bad_json["content"].startswith("Error: the arguments are not valid JSON")
    no_such = tool_messages(first.requests[2])[1]
    assert no_such["content"] == (
        "Error: no tool called 'demo-delete_file' is offered to you. Nothing was done."
    )
    async with stack.store.read() as conn:
        asked = (await conn.execute(select(func.count()).select_from(audit_events))).scalar_one()
        cards = (await conn.execute(select(func.count()).select_from(interactions))).scalar_one()
    assert asked == 0 and cards == 0  # the gate was never asked: nothing was called
    assert done["effects"] == {"calls_malformed": 2}


# Budgets


async def refused(stack, command: str) -> dict:
    """The bot's reply to ``command`` (the card that may come with it is another message)."""
    sent = await stack.send(command)

    async def reply():
        for message in await stack.bot_messages(after=sent["message_id"]):
            if message.get("reply_to_message_id") == sent["message_id"]:
                return message
        return None

    return await eventually(reply)


async def test_a_spent_agent_budget_refuses_new_runs_with_a_card(stack, first):
    first.answer("Done, expensively.", prompt_tokens=80, completion_tokens=40)
    run_id, _ = await start(stack, "/run thrifty summarise")
    await run_in(stack, run_id, RunState.COMPLETED)

    refusal = await refused(stack, "/run thrifty once more")
    assert refusal["text"].startswith(
        "thrifty cannot start: the token budget of thrifty is spent (120 of 100 tokens in "
        "24 hours); it frees up at about "
    )
    assert refusal["text"].endswith("Nothing was started.")
    card = await message_with(stack, r"For your attention · card #\d+ · from thrifty")
    assert (
        "Token budget spent: thrifty used 120 of 100 tokens in the last 24 hours " in (card["text"])
    )
    assert "(budget_tokens of thrifty in aegis.yaml)" in card["text"]
    assert list(buttons(card)) == ["Got it"]
    again = await refused(stack, "/run thrifty and again")
    assert again["text"].startswith("thrifty cannot start")
    async with stack.store.read() as conn:
        runs = (await conn.execute(select(agent_runs.c.id))).scalars().all()
        cards = (await conn.execute(select(interactions.c.kind))).scalars().all()
    assert runs == [run_id]  # no row for a refused run
    assert cards == ["acknowledgement"]  # one card, however often it is refused
    # Another agent's budget is its own.
    first.answer("scout is fine")
    other, _ = await start(stack, "/run scout hello")
    await run_in(stack, other, RunState.COMPLETED)


async def test_a_spent_overall_budget_refuses_every_agent(stack_with, monkeypatch):
    async with stack_with(token_budget_per_day=1000) as stack:
        ledger = Ledger(stack.store)
        await ledger.record(
            provider="elsewhere",
            model="m",
            status="ok",
            latency_ms=5,
            agent="other",
            prompt_tokens=600,
            completion_tokens=400,
        )
        refusal = await refused(stack, "/run scout hello")
        assert refusal["text"].startswith(
            "scout cannot start: the token budget of all agents is spent (1,000 of 1,000 tokens"
        )
        card = await message_with(stack, r"For your attention · card #\d+ · from scout")
        assert "(AEGIS_TOKEN_BUDGET_PER_DAY)" in card["text"]
        async with stack.store.read() as conn:
            made = (await conn.execute(select(func.count()).select_from(agent_runs))).scalar_one()
        assert made == 0
