"""The coding-CLI harness (claude-code, codex, opencode), end to end.

On SQLite and Postgres: /run through the real bot and the emulator, a real Dramatiq worker on
Redis, and a fake executable per CLI (tests/fakes/) that speaks its vendor's JSON stream and
records what it was given into its working directory. Each test reads how a run ended from its
``agent_runs`` row and what the owner saw from the emulator's transcript: the workdir,
instructions and token a run is given, aegis's tools over MCP through the gate, a CLI that
fails, one hung past its deadline, one cancelled, and an agent whose workdir or command is
missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.agents.agent_run import RunState
from bot.agents.tokens import AgentTokens
from bot.store.tables import agent_runs, agent_tokens, audit_events, model_calls
from tests.helpers.cli_harness import FAKES, gone
from tests.helpers.mcp import agent_of
from tests.helpers.runs import buttons
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack

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
    agents["nosy"] = {"harness": "opencode", "command": str(FAKES / "opencode")}
    for slug, spec in agents.items():
        workdir = root / "no-such-dir" if slug == "homeless" else root / slug
        workdir = root.parent if slug == "nosy" else workdir  # it holds aegis's data dir
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
    # Read, and aegis's demo.read_clock: two calls, both reads, none failed.
    assert (ended["effects"]["reads"], ended["effects"]["changes_made"]) == (2, 0)
    assert ended["effects"]["calls_failed"] == 0
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
    # The run's message says what it waits for, from the server's side (whatever the CLI
    # printed: OpenCode says nothing of a call until it has ended).
    card_id = re.search(r"card #(\d+)", card["text"]).group(1)
    waiting = f"Step: waiting for your approval on card #{card_id}"
    shown = await message_with(stack, rf"^Run #{run_id} .*{waiting}")
    assert f"Run #{run_id} · {slug} · running" in shown["text"]
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
        assert given["tools"] == "Read,Grep,Glob"  # the built-ins that exist at all
        assert given["disallowed_tools"].startswith("Read(//")  # only the data dir's rule
        assert given["permission_mode"] == "default"
        assert given["allowed_tools"] == "Read,Grep,Glob,mcp__aegis"
        assert not {"bypassPermissions", "acceptEdits"} & set(given["argv"])
        assert "--strict-mcp-config" in given["argv"]
    elif harness == "codex":
        profile = given["profile"]
        assert re.fullmatch(r"aegis-[0-9a-f]{12}", profile) and "--sandbox" not in given["argv"]
        assert f'permissions.{profile}.extends=":read-only"' in given["argv"]
        assert any(a.startswith(f"permissions.{profile}.filesystem={{") for a in given["argv"])
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
        (
            "every call refused",
            r"\S+ ended, but none of the 1 tool calls it made went through; the last: \S+: "
            "MCP tool call requires approval",
            "no call worked",
        ),
        (
            "read then a refused change",
            r"\S+ ended, but none of the 1 changes it tried went through; the last: \S+: "
            "MCP tool call requires approval",
            "no change went through",
        ),
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
    """Also one whose workdir holds aegis's data dir: refused before the CLI starts."""
    run_id = await start(stack, "/run homeless do something")
    ended = await run_in(stack, run_id, RunState.FAILED, RunState.COMPLETED)
    assert (
        ended["error"] == f"homeless's workdir {stack.workdirs / 'no-such-dir'} is not a directory."
    )
    run_id = await start(stack, "/run ghost do something")
    ended = await run_in(stack, run_id, RunState.FAILED, RunState.COMPLETED)
    assert "ghost's command" in ended["error"] and "was not found" in ended["error"]
    await message_with(stack, rf"^Run #{run_id} failed: ghost's command")
    run_id = await start(stack, "/run nosy read everything")
    ended = await run_in(stack, run_id, RunState.FAILED, RunState.COMPLETED)
    data_dir = stack.settings.data_dir.resolve()
    assert ended["error"].startswith(
        f"aegis's data dir {data_dir} lies inside nosy's workdir {stack.workdirs.parent}, where "
        "the CLI reads without asking; move it out"
    )
    assert not (stack.workdirs.parent / "fake-opencode.jsonl").exists()  # never started
    async with stack.store.read() as conn:  # refused before a token was made or a model used
        assert (await conn.execute(select(agent_tokens))).all() == []
        assert (await conn.execute(select(model_calls))).all() == []
