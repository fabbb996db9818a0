"""The coding-CLI harness (claude-code, codex, opencode), end to end and in parts.

End to end, on SQLite and Postgres: /run through the real bot and the emulator, a real Dramatiq
worker on Redis, and a fake executable per CLI (tests/fakes/) that speaks its vendor's JSON
stream and records what it was given into its working directory. Each test reads how a run
ended from its ``agent_runs`` row and what the owner saw from the emulator's transcript.

In parts: the three stream readers (good lines, bad lines, no result), the command line and
environment a run is given, and the bounded line reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from sqlalchemy import select

from bot.agents.agent_run import RunState
from bot.agents.profiles import AgentProfile, HarnessKind
from bot.agents.tokens import AgentTokens
from bot.errors import HarnessFailed
from bot.store.tables import agent_runs, agent_tokens, audit_events, model_calls
from jobs.harnesses import cli_process
from jobs.harnesses.cli import (
    CLAUDE_DENIED_TOOLS,
    CLIS,
    OPENCODE_PERMISSION,
    _command,
)
from jobs.harnesses.cli_process import CliProcess, _lines
from jobs.harnesses.cli_streams import ClaudeStream, CodexStream, OpencodeStream
from jobs.harnesses.opencode_project import refuse_widening_config
from tests.helpers.mcp import agent_of
from tests.helpers.runs import buttons
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack

FAKES = Path(__file__).resolve().parent.parent / "fakes"
REPO = Path(__file__).resolve().parent.parent.parent
INSTRUCTIONS = 'You keep {things} tidy.\nQuote "exactly" and never guess.'
TOKENS_USED = {"claudia": (120, 30), "cody": (120, 30), "opal": (180, 40)}  # as the fakes say
# slug: (harness, fake, model)
CLI_AGENTS = {
    "claudia": ("claude-code", "claude", "sonnet"),
    "cody": ("codex", "codex", "gpt-5-codex"),
    "opal": ("opencode", "opencode", "anthropic/claude-sonnet-4"),
}
FAKE_OF = {slug: fake for slug, (_, fake, _) in CLI_AGENTS.items()} | {"stuck": "claude"}
CANARY = "AEGIS_CANARY_SECRET"


def config_text(root: Path) -> str:
    lines = ["agents:"]
    agents = {
        slug: {
            "harness": harness,
            "command": str(FAKES / fake),
            "model": model,
            "tools": ["demo.read_clock", "demo.write_file"],
        }
        for slug, (harness, fake, model) in CLI_AGENTS.items()
    }
    agents["stuck"] = {"harness": "claude-code", "command": str(FAKES / "claude"), "deadline": 2}
    agents["homeless"] = {"harness": "codex", "command": str(FAKES / "codex")}
    agents["ghost"] = {"harness": "opencode", "command": str(root / "no-such-opencode")}
    for slug, spec in agents.items():
        workdir = root / "no-such-dir" if slug == "homeless" else root / slug
        workdir.parent.mkdir(parents=True, exist_ok=True)
        if slug != "homeless":
            workdir.mkdir(exist_ok=True)
        spec.setdefault("deadline", 60)
        spec.update(workdir=str(workdir), instructions=INSTRUCTIONS)
        lines.append(f"  {slug}:")
        lines.extend(f"    {key}: {json.dumps(value)}" for key, value in spec.items())
    return "\n".join(lines) + "\n"


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace, monkeypatch):
    # An AEGIS_* variable of the worker's must never reach a CLI (it may hold a secret).
    monkeypatch.setenv(CANARY, "do not pass on")
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(config_text(tmp_path / "work"), encoding="utf-8")
    async with running_stack(settings, namespace=redis_namespace) as running:
        running.workdirs = tmp_path / "work"
        yield running


async def start(stack, text: str) -> int:
    """Send a /run command; the run's number, read from its progress message."""
    sent = await stack.send(text)
    progress = await message_with(stack, r"^Run #\d+ · ", after=sent["message_id"])
    return int(re.match(r"Run #(\d+)", progress["text"]).group(1))


async def message_with(stack, pattern: str, after: int = 0, timeout: float = 20) -> dict:
    async def found():
        for message in await stack.bot_messages(after=after):
            if re.search(pattern, message["text"] or "", re.DOTALL):
                return message
        return None

    return await eventually(found, timeout=timeout)


async def run_in(stack, run_id: int, *states: RunState, timeout: float = 20) -> dict:
    async def reached():
        async with stack.store.read() as conn:
            row = (await conn.execute(select(agent_runs).where(agent_runs.c.id == run_id))).one()
        return row._mapping if row.status in states else None

    return dict(await eventually(reached, timeout=timeout))


async def recorded(stack, slug: str, count: int = 1) -> dict:
    """What the fake CLI of ``slug`` recorded on its ``count``-th start."""
    path = stack.workdirs / slug / f"fake-{FAKE_OF[slug]}.jsonl"

    def read():
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return json.loads(lines[count - 1]) if len(lines) >= count else None

    return await eventually(read, timeout=20)


async def ledger_rows(stack, run_id: int) -> list:
    async with stack.store.read() as conn:
        query = select(model_calls).where(model_calls.c.run_id == run_id)
        return (await conn.execute(query)).all()


def gone(pid: int, *, reaped: bool) -> bool:
    """Whether ``pid`` is dead; ``reaped``: not even a zombie is left (we are its parent)."""
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return True
    return not reaped and status == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("slug", sorted(CLI_AGENTS))
async def test_a_cli_runs_in_its_workdir_with_its_own_instructions_and_token(stack, slug):
    harness, _, model = CLI_AGENTS[slug]
    run_id = await start(stack, f"/run {slug} wait for go, then tidy up")
    given = await recorded(stack, slug)
    workdir = str(stack.workdirs / slug)
    assert given["cwd"] == workdir and given["env_pwd"] == workdir
    assert given["request"] == "wait for go, then tidy up"
    assert given["instructions"] == INSTRUCTIONS  # braces and quotes as written
    assert given["model"] == model
    assert given["mcp_url"] == f"http://127.0.0.1:{stack.settings.mcp_port}/mcp"
    assert given["pgid"] != os.getpgid(0)  # a process group of its own
    token = given["token"]
    assert token and not any(token in arg for arg in given["argv"])
    assert CANARY not in given["aegis_env"]
    assert given["aegis_env"] == (["AEGIS_MCP_TOKEN"] if harness == "codex" else [])
    if given["mcp_config_mode"] is not None:
        assert given["mcp_config_mode"] == "0o600"
    assert_own_tools_locked(harness, given)
    # While the run goes on, the token is the agent's, and only its hash is stored.
    tokens = AgentTokens(stack.store)
    assert await agent_of(tokens, token) == slug
    async with stack.store.read() as conn:
        rows = (await conn.execute(select(agent_tokens))).all()
    [row] = [r for r in rows if r.run_id == run_id]
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest() and row.agent == slug
    assert all(token not in str(tuple(r)) for r in rows)

    (stack.workdirs / slug / "go").touch()
    ended = await run_in(stack, run_id, RunState.COMPLETED, RunState.FAILED)
    assert ended["status"] == RunState.COMPLETED, ended["error"]
    assert ended["result"] == "Done: wait for go, then tidy up"
    assert ended["effects"]["cli_tool_uses"] == 2
    await message_with(stack, r"^Done: wait for go, then tidy up$")
    [call] = await ledger_rows(stack, run_id)  # the CLI's model use, one row for the run
    assert (call.provider, call.model, call.status, call.agent) == (harness, model, "ok", slug)
    assert (call.prompt_tokens, call.completion_tokens) == TOKENS_USED[slug]
    # Over: the token is revoked and the run's private files are gone.
    assert await agent_of(tokens, token) is None
    assert given["config_path"] is None or not Path(given["config_path"]).exists()


@pytest.mark.parametrize("slug", sorted(CLI_AGENTS))
async def test_a_cli_reaches_aegis_tools_over_mcp_as_its_run_and_waits_for_the_tap(stack, slug):
    """The whole path: the harness's MCP config and per-run token, aegis's MCP server, the
    gate, the card in the run's chat, the tap, the held retry, the tool once, the result."""
    await stack.ask("/start")
    name = f"from-{slug}.txt"
    args = json.dumps({"name": name, "text": "hello"})
    run_id = await start(stack, f"/run {slug} call aegis demo-write_file {args}")
    card = await message_with(stack, r"Approval needed")
    assert f"{slug} wants to run 'demo.write_file'" in card["text"]
    demo_file = stack.settings.data_dir / "demo" / name
    assert not demo_file.exists()
    tapped = await stack.emulator.tap(OWNER_CHAT, card["message_id"], buttons(card)["Approve"])
    assert tapped
    ended = await run_in(stack, run_id, RunState.COMPLETED, RunState.FAILED, timeout=30)
    assert ended["status"] == RunState.COMPLETED, ended["error"]
    assert ended["result"] == f"Done: wrote 5 characters to {name}"
    assert demo_file.read_text() == "hello"
    async with stack.store.read() as conn:
        used = (
            await conn.execute(
                select(audit_events.c.agent).where(
                    audit_events.c.event == "used", audit_events.c.tool == "demo.write_file"
                )
            )
        ).all()
    assert used == [(slug,)]


def assert_own_tools_locked(harness: str, given: dict) -> None:
    """The CLI was started with its own mutating built-ins unavailable (what its fake recorded)."""
    if harness == "claude-code":
        denied = set(given["disallowed_tools"].split(","))
        assert {"Bash", "Edit", "MultiEdit", "Write", "NotebookEdit", "WebFetch"} <= denied
        assert given["permission_mode"] == "default"
        assert set(given["allowed_tools"].split(",")) == {
            "Read",
            "Grep",
            "Glob",
            "LS",
            "mcp__aegis",
        }
        assert not {"bypassPermissions", "acceptEdits"} & set(given["argv"])
        assert "--strict-mcp-config" in given["argv"]
    elif harness == "codex":
        assert given["sandbox"] == "read-only"
        assert (given["approval_policy"], given["approvals_reviewer"]) == ("never", "user")
        assert "--dangerously-bypass-approvals-and-sandbox" not in given["argv"]
    else:
        for config in (given["config_content"], given["mcp_config"]):
            rules = config["permission"]
            assert list(rules)[0] == "*" and rules["*"] == "deny"  # the last match wins
            for tool in ("edit", "bash", "webfetch", "websearch", "task"):
                assert rules[tool] == "deny", tool
            assert rules["aegis_*"] == "allow" and rules["read"] == "allow"
            assert config["agent"]["build"]["permission"] == rules


async def test_an_opencode_workdir_whose_project_config_widens_its_tools_is_refused(stack):
    (stack.workdirs / "opal" / "opencode.json").write_text(
        '{"permission": {"bash": "allow"}}', encoding="utf-8"
    )
    run_id = await start(stack, "/run opal tidy up")
    ended = await run_in(stack, run_id, RunState.FAILED, RunState.COMPLETED)
    assert ended["status"] == RunState.FAILED
    assert ended["error"] == (
        f"OpenCode would read {stack.workdirs / 'opal' / 'opencode.json'}, which sets "
        "permission: that could let OpenCode's own tools write files or run commands outside "
        "aegis's gate; refused (remove those keys from it, or use another workdir)."
    )
    assert not (stack.workdirs / "opal" / "fake-opencode.jsonl").exists()  # never started
    async with stack.store.read() as conn:  # refused before a token was made
        assert (await conn.execute(select(agent_tokens))).all() == []


@pytest.mark.parametrize(
    ("request_text", "why", "status"),
    [
        (
            "exit 3",
            r"exited with status 3; the whole of its stderr: warming up\nfatal: the model",
            "exit 3",
        ),
        (
            "garbage",
            r"the output of \S+ could not be read: 0 events, 3 unreadable lines",
            "unreadable output",
        ),
        ("silent", r"\S+ printed nothing", "no output"),
        ("report failure", r"\S+ reported a failure: the model is overloaded", "failure reported"),
    ],
)
async def test_a_cli_that_fails_ends_the_run_failed_with_the_reason_shown(
    stack, request_text, why, status
):
    for slug in sorted(CLI_AGENTS):
        run_id = await start(stack, f"/run {slug} {request_text}")
        ended = await run_in(stack, run_id, RunState.COMPLETED, RunState.FAILED)
        assert ended["status"] == RunState.FAILED
        assert re.search(why, ended["error"]), ended["error"]
        told = await message_with(stack, rf"^Run #{run_id} failed: ")
        assert re.search(why, told["text"]), told["text"]
        token = (await recorded(stack, slug))["token"] if request_text == "exit 3" else None
        assert token is None or token not in told["text"]
        assert [call.status for call in await ledger_rows(stack, run_id)] == [status]


async def test_a_hung_cli_and_its_child_are_killed_at_the_deadline(stack):
    run_id = await start(stack, "/run stuck hang, spawn a child first")
    given = await recorded(stack, "stuck")
    assert given["child_pid"] is not None and not gone(given["child_pid"], reaped=False)
    ended = await run_in(stack, run_id, RunState.TIMED_OUT, RunState.FAILED, RunState.COMPLETED)
    assert ended["status"] == RunState.TIMED_OUT
    await message_with(stack, rf"^Run #{run_id} timed out: stopped at its deadline")
    assert [call.status for call in await ledger_rows(stack, run_id)] == ["timeout"]
    # The run ended once they were dead: the CLI reaped, its child at most a zombie of init's.
    assert gone(given["pid"], reaped=True) and gone(given["child_pid"], reaped=False)
    assert await agent_of(AgentTokens(stack.store), given["token"]) is None


async def test_cancel_kills_a_running_cli_and_its_child(stack):
    # It ignores SIGTERM, so only the SIGKILL that follows the grace stops it.
    run_id = await start(stack, "/run opal hang stubborn, spawn a child first")
    given = await recorded(stack, "opal")
    await run_in(stack, run_id, RunState.RUNNING)
    [answer] = await stack.ask(f"/cancel {run_id}")
    assert answer["text"] == f"Stopping run #{run_id}; its message shows when it has stopped."
    ended = await run_in(stack, run_id, RunState.CANCELLED, RunState.FAILED, RunState.COMPLETED)
    assert ended["status"] == RunState.CANCELLED
    await message_with(stack, rf"^Run #{run_id} was cancelled")
    assert [call.status for call in await ledger_rows(stack, run_id)] == ["cancelled"]
    # The run ended once they were dead: the CLI reaped, its child at most a zombie of init's.
    assert gone(given["pid"], reaped=True) and gone(given["child_pid"], reaped=False)


async def test_a_cli_agent_without_its_workdir_or_its_command_fails_in_words(stack):
    run_id = await start(stack, "/run homeless do something")
    ended = await run_in(stack, run_id, RunState.FAILED, RunState.COMPLETED)
    assert (
        ended["error"] == f"homeless's workdir {stack.workdirs / 'no-such-dir'} is not a directory."
    )
    run_id = await start(stack, "/run ghost do something")
    ended = await run_in(stack, run_id, RunState.FAILED, RunState.COMPLETED)
    assert "ghost's command" in ended["error"] and "was not found" in ended["error"]
    await message_with(stack, rf"^Run #{run_id} failed: ghost's command")
    async with stack.store.read() as conn:  # refused before a token was made or a model used
        assert (await conn.execute(select(agent_tokens))).all() == []
        assert (await conn.execute(select(model_calls))).all() == []


# The stream readers, line by line.

CLAUDE_LINES = [
    {"type": "system", "subtype": "init", "model": "claude-sonnet", "tools": []},
    {
        "type": "assistant",
        "message": {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}]},
    },
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": "a\nb"}]}},
    {"type": "assistant", "message": {"content": [{"type": "text", "text": "Two files."}]}},
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "There are two files.",
        "usage": {"input_tokens": 10, "output_tokens": 4},
    },
]
CODEX_LINES = [
    {"type": "thread.started", "thread_id": "t1"},
    {"type": "turn.started"},
    {"type": "item.started", "item": {"id": "i0", "type": "command_execution", "command": "ls"}},
    {"type": "item.completed", "item": {"id": "i0", "type": "command_execution", "command": "ls"}},
    {
        "type": "item.started",
        "item": {"id": "i1", "type": "mcp_tool_call", "server": "aegis", "tool": "read_clock"},
    },
    {"type": "item.completed", "item": {"id": "i2", "type": "agent_message", "text": "Done."}},
    {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 4}},
]
OPENCODE_LINES = [
    {"type": "step_start", "part": {"type": "step-start"}},
    {"type": "text", "part": {"type": "text", "text": "Let me look."}},
    {"type": "tool_use", "part": {"tool": "bash", "state": {"status": "completed", "input": {}}}},
    {"type": "step_finish", "part": {"reason": "tool-calls", "tokens": {"input": 5}}},
    {"type": "step_start", "part": {"type": "step-start"}},
    {"type": "text", "part": {"type": "text", "text": "It is tidy."}},
    {"type": "step_finish", "part": {"reason": "stop", "tokens": {"input": 5, "output": 3}}},
]


def feed(reader, events, *extra_lines):
    steps = []
    for line in [json.dumps(e) for e in events] + list(extra_lines):
        steps += reader.feed(line)
    return steps


def test_claude_stream_gives_steps_and_the_result_event():
    reader = ClaudeStream()
    steps = feed(reader, CLAUDE_LINES)
    assert steps == ["started (claude-sonnet)", "using Bash ls", "writing: Two files."]
    assert reader.answer() == "There are two files."
    assert (reader.tool_uses, reader.input_tokens, reader.output_tokens) == (1, 10, 4)
    assert reader.failure is None and reader.malformed == 0


def test_codex_stream_answers_with_the_last_agent_message():
    reader = CodexStream()
    steps = feed(reader, CODEX_LINES)
    assert steps == ["running ls", "calling aegis.read_clock", "writing: Done."]
    assert reader.answer() == "Done." and reader.tool_uses == 1


def test_opencode_stream_answers_with_the_last_step_that_ended_the_turn():
    reader = OpencodeStream()
    steps = feed(reader, OPENCODE_LINES)
    assert steps == ["writing: Let me look.", "used bash", "writing: It is tidy."]
    assert reader.answer() == "It is tidy."


@pytest.mark.parametrize(
    ("reader_type", "events"),
    [(ClaudeStream, CLAUDE_LINES), (CodexStream, CODEX_LINES), (OpencodeStream, OPENCODE_LINES)],
)
def test_bad_lines_are_skipped_and_counted(reader_type, events):
    reader = reader_type()
    feed(reader, events[:2], "not json", '{"cut": ', "[1, 2]", '"text"', "")
    feed(reader, events[2:])
    assert reader.malformed == 4  # the blank line is no line at all
    assert reader.answer() is not None


def test_an_event_of_an_unexpected_shape_is_counted_as_unreadable():
    reader = ClaudeStream()
    feed(reader, [{"type": "assistant", "message": 3}, {"type": "something new"}])
    assert (reader.events, reader.malformed) == (2, 1)


def test_a_stream_without_a_result_falls_back_to_the_last_text_or_to_nothing():
    reader = ClaudeStream()
    feed(reader, CLAUDE_LINES[:4])
    assert reader.answer() == "Two files."  # no result event: the last assistant message
    reader = ClaudeStream()
    feed(reader, CLAUDE_LINES[:3], "garbage")
    assert reader.answer() is None


@pytest.mark.parametrize(
    ("reader_type", "event", "failure"),
    [
        (
            ClaudeStream,
            {"type": "result", "subtype": "error_max_turns", "is_error": True},
            "it ended with error_max_turns",
        ),
        (
            CodexStream,
            {"type": "turn.failed", "error": {"message": "quota exceeded"}},
            "quota exceeded",
        ),
        (CodexStream, {"type": "error", "message": "stream closed"}, "stream closed"),
        (
            OpencodeStream,
            {"type": "error", "error": {"name": "APIError", "data": {"message": "401"}}},
            "401",
        ),
    ],
)
def test_a_failure_the_cli_reports_is_kept(reader_type, event, failure):
    reader = reader_type()
    feed(reader, [event])
    assert reader.failure == failure


# The command line and environment a run is given.


def profile(kind: HarnessKind, tmp_path: Path, **changes) -> AgentProfile:
    values = {
        "slug": "ada",
        "name": "Ada",
        "harness": kind,
        "model": "m1",
        "instructions": "Mind the {braces}.",
        "workdir": tmp_path,
    }
    return AgentProfile(**{**values, **changes})


@pytest.mark.parametrize("kind", sorted(CLIS))
def test_the_token_is_never_on_the_command_line_and_the_workers_secrets_stay_home(
    kind, tmp_path, monkeypatch
):
    monkeypatch.setenv("AEGIS_TELEGRAM_TOKEN", "123:bot-secret")
    rundir = tmp_path / "run"
    rundir.mkdir()
    argv, env = _command(CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-123")
    assert not any("tok-123" in arg for arg in argv)
    assert "AEGIS_TELEGRAM_TOKEN" not in env and env["PWD"] == str(tmp_path)
    written = "".join(p.read_text() for p in rundir.iterdir())
    shown = " ".join(argv) + written + json.dumps({k: env[k] for k in env if k not in os.environ})
    assert "tok-123" in shown  # it does reach the CLI, through a file or its environment
    assert "Mind the {braces}." in shown and "m1" in argv
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in rundir.iterdir())


def test_every_cli_harness_kind_has_its_description():
    assert set(CLIS) == {kind for kind in HarnessKind if kind.is_cli}
    assert {kind: spec.executable for kind, spec in CLIS.items()} == {
        kind: kind.default_command for kind in CLIS
    }


def test_an_agent_without_a_model_or_instructions_gets_neither_flag(tmp_path):
    rundir = tmp_path / "run"
    rundir.mkdir()
    agent = profile(HarnessKind.CLAUDE_CODE, tmp_path, model="", instructions="")
    argv, _ = _command(CLIS[HarnessKind.CLAUDE_CODE], agent, rundir, 8743, "tok")
    assert "--model" not in argv and "--append-system-prompt" not in argv


async def test_a_line_too_long_is_dropped_and_counted_and_the_rest_read(monkeypatch):
    monkeypatch.setattr(cli_process, "MAX_LINE_BYTES", 10)
    monkeypatch.setattr(cli_process, "READ_CHUNK", 4)
    stream = asyncio.StreamReader()
    stream.feed_data(b'{"a": 1}\n' + b"x" * 25 + b"\n{}\nlast")
    stream.feed_eof()
    holder = CliProcess.__new__(CliProcess)
    holder.stdout_bytes = 0
    lines = [line async for line in _lines(stream, holder)]
    assert lines == [b'{"a": 1}', None, b"{}", b"last"]
    assert holder.stdout_bytes == 9 + 26 + 3 + 4


class Stretch:
    """Just enough of a RunContext for one CLI process."""

    def __init__(self, request: str) -> None:
        self.request = request
        self.effects = Counter()
        self.run = SimpleNamespace(id=0)

    def remaining(self) -> float:
        return 60.0

    async def checkpoint(self, step=None) -> None:
        pass

    async def step(self, what: str) -> None:
        pass


class Watching(ClaudeStream):
    """Claude's stream, telling when the CLI's first event arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()

    def event(self, event: dict) -> list[str]:
        self.started.set()
        return super().event(event)


@pytest.mark.parametrize("stubborn", [False, True])
async def test_a_cli_cancelled_while_it_starts_a_child_leaves_nothing_running(tmp_path, stubborn):
    """The fake prints its first event, then starts its child: cancelled at moments from then
    on, the harness returns only once the CLI and its child are dead, not merely signalled."""
    request = "hang stubborn, spawn a child" if stubborn else "hang, spawn a child"
    command = claude_command(tmp_path)
    for index, delay in enumerate([0, 0, 0, 0.001, 0.001, 0.002, 0.003, 0.005, 0.01, 0.05]):
        workdir = tmp_path / str(index)
        workdir.mkdir()
        reader = Watching()
        process = CliProcess("claude", reader, Stretch(request), "tok")
        task = asyncio.create_task(process.run(command, workdir, dict(os.environ)))
        await reader.started.wait()
        await asyncio.sleep(delay)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        left = running_in(workdir)
        assert left == [], f"cancelled {delay}s after its first event, still running: {left}"


def running_in(workdir: Path) -> list[int]:
    """The processes working in ``workdir`` that are alive (not zombies)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.cwd() == str(workdir) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except psutil.Error:  # gone meanwhile, or not ours to look at
            continue
    return found


def claude_command(tmp_path: Path) -> list[str]:
    """The fake claude's command line, as the harness would give it."""
    rundir = tmp_path / "claude-run"
    rundir.mkdir(exist_ok=True)
    kind = HarnessKind.CLAUDE_CODE
    argv, _ = _command(CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-123")
    return [str(FAKES / "claude"), *argv]


# Each CLI's own mutating built-ins, as its command line and config say.


def test_claude_code_denies_its_mutating_tools_and_allows_only_reading_ones(tmp_path):
    rundir = tmp_path / "run"
    rundir.mkdir()
    kind = HarnessKind.CLAUDE_CODE
    argv, _ = _command(CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-123")
    denied = argv[argv.index("--disallowedTools") + 1].split(",")
    assert set(denied) == set(CLAUDE_DENIED_TOOLS)
    assert {"Bash", "Edit", "MultiEdit", "Write", "NotebookEdit", "WebFetch", "WebSearch"} <= set(
        denied
    )
    allowed = argv[argv.index("--allowedTools") + 1].split(",")
    assert not set(allowed) & set(denied)
    assert argv[argv.index("--permission-mode") + 1] == "default"
    assert argv[argv.index("--permission-prompt-tool") + 1] == "mcp__aegis__permission_prompt"
    assert "--strict-mcp-config" in argv and "--dangerously-skip-permissions" not in argv


def test_claude_code_is_kept_out_of_aegis_data_dir(tmp_path):
    rundir = tmp_path / "run"
    rundir.mkdir()
    kind = HarnessKind.CLAUDE_CODE
    private = tmp_path / "data"
    argv, _ = _command(
        CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-123", private=private
    )
    denied = argv[argv.index("--disallowedTools") + 1].split(",")
    assert f"Read(//{str(private).lstrip('/')}/**)" in denied
    assert set(CLAUDE_DENIED_TOOLS) <= set(denied)
    with pytest.raises(HarnessFailed, match="cannot be told to keep out of it"):
        _command(
            CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-123", private=tmp_path / "a b"
        )


def test_codex_runs_its_shell_read_only_and_never_escalates(tmp_path):
    rundir = tmp_path / "run"
    rundir.mkdir()
    kind = HarnessKind.CODEX
    argv, _ = _command(CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-123")
    assert argv[argv.index("--sandbox") + 1] == "read-only"
    assert 'approval_policy="never"' in argv and 'approvals_reviewer="user"' in argv
    assert argv[0] == "exec" and argv[-1] == "-"  # the overrides are exec's, before the prompt


def test_opencode_denies_its_tools_in_the_config_that_outranks_the_project(tmp_path):
    rundir = tmp_path / "run"
    rundir.mkdir()
    kind = HarnessKind.OPENCODE
    _, env = _command(CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-9")
    content = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    assert content["permission"] == OPENCODE_PERMISSION
    assert "tok-9" not in env["OPENCODE_CONFIG_CONTENT"]  # the token stays in the 0600 file
    written = json.loads((rundir / "config.json").read_text())
    assert written["permission"] == OPENCODE_PERMISSION
    assert [rule for rule in OPENCODE_PERMISSION.values()][0] == "deny"


@pytest.mark.parametrize(
    ("where", "text", "refused"),
    [
        ("opencode.json", '{"model": "anthropic/claude-sonnet-4"}', None),
        (
            "opencode.jsonc",
            '{\n  // our model\n  "model": "a/b", /* "permission": {} */\n  "theme": "x",\n}',
            None,
        ),
        ("opencode.json", '{"permission": {"bash": "allow"}}', "sets permission"),
        ("opencode.jsonc", '{"tools": {"bash": true}, // legacy\n}', "sets tools"),
        (".opencode/opencode.json", '{"agent": {"build": {}}}', "sets agent"),
        ("opencode.json", '{"plugin": ["x"], "default_agent": "y"}', "sets default_agent, plugin"),
        ("opencode.json", "{not json", "cannot parse"),
        (".opencode/agents/open.md", "---\npermission:\n  bash: allow\n---\n", "agents from"),
        (".opencode/plugin/p.js", "export default {}", "plugin from"),
        ("../opencode.json", '{"permission": "allow"}', "sets permission"),  # a parent's
    ],
)
def test_a_project_opencode_config_that_could_widen_its_tools_is_refused(
    tmp_path, where, text, refused
):
    workdir = tmp_path / "project" / "work"
    workdir.mkdir(parents=True)
    path = workdir / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if refused is None:
        refuse_widening_config(workdir)
        return
    with pytest.raises(HarnessFailed, match=re.escape(refused)) as failed:
        refuse_widening_config(workdir)
    assert "refused" in str(failed.value)


def test_a_project_config_above_the_git_root_is_not_opencodes_to_read(tmp_path):
    workdir = tmp_path / "outer" / "repo"
    (workdir / ".git").mkdir(parents=True)
    (tmp_path / "outer" / "opencode.json").write_text('{"permission": "allow"}')
    refuse_widening_config(workdir)
    (workdir / "opencode.json").write_text('{"permission": "allow"}')
    with pytest.raises(HarnessFailed, match="sets permission"):
        refuse_widening_config(workdir)


# A worker killed outright: its CLI must not outlive it.

WORKER = """
import asyncio, os, sys
from collections import Counter
from types import SimpleNamespace
from jobs.harnesses.cli_process import CliProcess
from jobs.harnesses.cli_streams import ClaudeStream

class Stretch:
    request = "hang, spawn a child"
    effects = Counter()
    run = SimpleNamespace(id=0)
    def remaining(self):
        return 600.0
    async def checkpoint(self, step=None):
        pass
    async def step(self, what):
        pass

workdir, command = sys.argv[1], sys.argv[2:]
process = CliProcess("claude", ClaudeStream(), Stretch(), "tok")
asyncio.run(process.run(command, workdir, dict(os.environ)))
"""


async def test_a_cli_dies_with_a_worker_killed_by_sigkill(tmp_path):
    """A worker SIGKILLed mid-run runs no cleanup: the kernel kills its CLI (PR_SET_PDEATHSIG).
    The CLI's own child is not covered (see cli_process.py); it is killed here by hand."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    workdir = tmp_path / "work"
    workdir.mkdir()
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(workdir), *claude_command(tmp_path)], cwd=REPO
    )
    path = workdir / "fake-claude.jsonl"
    given = None
    try:
        given = await eventually(
            lambda: path.exists() and json.loads(path.read_text().splitlines()[0]), timeout=20
        )
        assert psutil.Process(given["pid"]).ppid() == worker.pid  # the wrapper became the CLI
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        await eventually(lambda: gone(given["pid"], reaped=False), timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if given is not None:  # the CLI's group: its child, and the CLI if the test failed
            with contextlib.suppress(ProcessLookupError):
                os.killpg(given["pgid"], signal.SIGKILL)
