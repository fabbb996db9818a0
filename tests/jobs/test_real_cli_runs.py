"""The real Claude Code, Codex and OpenCode, as they ship on npm (tests/helpers/vendor_clis.py),
each pointed at a scripted model that speaks its vendor's API (tests/helpers/vendor_models/),
reaching aegis's tools over MCP through the real bot, the emulator and a Dramatiq worker.

For each CLI, as a run aegis starts (``harness: claude-code | codex | opencode``): a read
answers at once; a write is held, the owner taps, it runs exactly once and its result reaches
the model; with no tap nothing runs and the run ends failed, saying why; every built-in that
would change something is refused; nothing in aegis's data dir reaches the model. And as a
client its owner configured by the README: the same read, and the same write after the tap.

On SQLite only: the database's side of these paths is tested on both elsewhere
(test_cli_harness_end_to_end.py, with fake CLIs); what is new here is the vendors' own code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bot.agents.agent_run import RunState
from bot.agents.tokens import AgentTokens
from bot.store.tables import audit_events, interactions
from bot.tools.processes import kill_group
from tests.helpers.echo_mcp import echo_mcp_in_thread
from tests.helpers.mcp import mcp_url
from tests.helpers.runs import message_with, run_in, start, tap
from tests.helpers.stack import make_settings, running_stack
from tests.helpers.vendor_clis import cli_path
from tests.helpers.vendor_models import (
    Call,
    call,
    claude_environment,
    codex_environment,
    opencode_environment,
    say,
    scripted_model,
)

CLOCK = "the server clock says"
WROTE = "wrote 5 characters to hello.txt"
SECRET = "aegis-test-secret-7f3a9c"  # what a file in aegis's data dir holds
RUN_TIMEOUT = 90  # seconds a run may take here (OpenCode alone takes ~4 s to start)


@dataclass(frozen=True)
class Cli:
    executable: str  # as tests/helpers/vendor_clis.py names it
    harness: str  # as aegis.yaml names it
    environment: Callable  # (scripted model, home) -> the CLI's environment
    tool: Callable[[str], str]  # aegis's tool (its wire name) -> the name the model calls
    # Built-ins that would change the workdir (made.txt), as the model would call them
    changes: Callable[[Path], list[Call]]
    # Built-ins that would read a file of aegis's data dir
    peeks: Callable[[Path], list[Call]]

    @property
    def slug(self) -> str:
        return self.executable


def _claude_changes(workdir: Path) -> list[Call]:
    made = str(workdir / "made.txt")
    return [
        call("Write", {"file_path": made, "content": "x"}),
        call("Bash", {"command": f"touch {made}"}),
        call("EnterWorktree", {"name": "made"}),
        call("CronCreate", {"cron": "* * * * *", "prompt": f"touch {made}"}),
        call("Workflow", {"prompt": f"touch {made}"}),
    ]


def _claude_peeks(secret: Path) -> list[Call]:
    return [
        call("Read", {"file_path": str(secret)}),
        call("Grep", {"pattern": "aegis", "path": str(secret.parent), "output_mode": "content"}),
        call("Glob", {"pattern": "*", "path": str(secret.parent)}),
    ]


CLIS = {
    "claude": Cli(
        "claude",
        "claude-code",
        claude_environment,
        lambda tool: f"mcp__aegis__{tool}",
        _claude_changes,
        _claude_peeks,
    ),
    "codex": Cli(
        "codex",
        "codex",
        codex_environment,
        lambda tool: f"mcp__aegis__{tool.replace('-', '_')}",  # Codex's names have no dashes
        lambda workdir: [call("exec_command", {"cmd": f"touch {workdir / 'made.txt'}"})],
        lambda secret: [call("exec_command", {"cmd": f"cat {secret}"})],
    ),
    "opencode": Cli(
        "opencode",
        "opencode",
        opencode_environment,
        lambda tool: f"aegis_{tool}",
        lambda workdir: [
            call("write", {"filePath": str(workdir / "made.txt"), "content": "x"}),
            call("bash", {"command": f"touch {workdir / 'made.txt'}", "description": "touch"}),
        ],
        lambda secret: [
            call("read", {"filePath": str(secret)}),
            call("grep", {"pattern": "aegis", "path": str(secret.parent)}),
        ],
    ),
}


def config_text(workdirs: Path) -> str:
    agents = {
        cli.slug: {
            "harness": cli.harness,
            "command": str(cli_path(cli.executable)),
            "workdir": str(workdirs / cli.slug),
            "tools": ["demo.read_clock", "demo.write_file"],
            "deadline": RUN_TIMEOUT,
        }
        for cli in CLIS.values()
    }
    agents["laptop"] = {"tools": ["demo.read_clock", "demo.write_file", "cli.*"]}
    for spec in agents.values():
        if "workdir" in spec:
            Path(spec["workdir"]).mkdir(parents=True, exist_ok=True)
    return json.dumps({"agents": agents})  # JSON is YAML


@dataclass(frozen=True)
class Place:
    """Where a test runs: its directory, its Redis namespace, the environment it may change."""

    tmp_path: Path
    redis_url: str
    namespace: str
    monkeypatch: pytest.MonkeyPatch


@pytest.fixture
def place(tmp_path, redis_server_url, redis_namespace, monkeypatch) -> Place:
    return Place(tmp_path, redis_server_url, redis_namespace, monkeypatch)


@contextlib.asynccontextmanager
async def real_cli(name: str, steps: list, place: Place, **settings):
    """The stack, with ``name``'s CLI installed and pointed at a scripted model of ``steps``:
    the worker's environment is the CLI's (HOME and the vendor's settings of its own)."""
    cli = CLIS[name]
    tmp_path, monkeypatch = place.tmp_path, place.monkeypatch
    cli_path(cli.executable)  # installed (or skipped) before HOME moves
    database = f"sqlite+aiosqlite:///{tmp_path / 'aegis.sqlite3'}"
    config = make_settings(tmp_path / "data", database, place.redis_url, **settings)
    config.config_file.parent.mkdir(parents=True, exist_ok=True)
    config.config_file.write_text(config_text(tmp_path / "work"), encoding="utf-8")
    async with scripted_model(steps) as model:
        for key, value in cli.environment(model, tmp_path / "home").items():
            monkeypatch.setenv(key, value)
        async with running_stack(config, namespace=place.namespace) as stack:
            await stack.ask("/start")  # the owner has opened the chat
            yield stack, model


def read_then_write(cli: Cli) -> list:
    """A read of aegis's, a write of aegis's (held for the tap), and the answer."""
    return [
        call(cli.tool("demo-read_clock")),
        call(cli.tool("demo-write_file"), {"name": "hello.txt", "text": "hello"}),
        say("Wrote hello.txt."),
    ]


async def used(stack, tool: str) -> int:
    async with stack.store.read() as conn:
        query = select(func.count()).where(
            audit_events.c.event == "used", audit_events.c.tool == tool
        )
        return (await conn.execute(query)).scalar_one()


async def cards(stack) -> int:
    async with stack.store.read() as conn:
        return (await conn.execute(select(func.count()).select_from(interactions))).scalar_one()


# As a run aegis starts


@pytest.mark.parametrize("name", sorted(CLIS))
async def test_a_read_answers_at_once_and_a_write_runs_once_after_the_tap(name, place):
    cli = CLIS[name]
    steps = read_then_write(cli)
    async with real_cli(name, steps, place) as (stack, model):
        run_id, _ = await start(stack, f"/run {cli.slug} write hello.txt")
        card = await message_with(stack, r"Approval needed", timeout=RUN_TIMEOUT)
        # The read answered at once, before anybody tapped anything.
        assert any(CLOCK in text for text in model.tool_result_texts), model.tool_result_texts
        number = re.search(r"card #(\d+)", card["text"]).group(1)
        waiting = rf"(?s)^Run #{run_id} .*Step: waiting for your approval on card #{number}"
        await message_with(stack, waiting)
        demo_file = stack.settings.data_dir / "demo" / "hello.txt"
        assert not demo_file.exists()
        await tap(stack, card, "Approve")
        ended = await run_in(
            stack, run_id, RunState.COMPLETED, RunState.FAILED, timeout=RUN_TIMEOUT
        )
        assert ended["status"] == RunState.COMPLETED, ended["error"]
        assert ended["result"] == "Wrote hello.txt."
        assert demo_file.read_text() == "hello"
        assert await used(stack, "demo.write_file") == 1
        assert any(WROTE in text for text in model.tool_result_texts), model.tool_result_texts
        effects = ended["effects"]
        assert (effects["reads"], effects["changes_made"], effects["calls_failed"]) == (1, 1, 0)
        assert not model.ran_out


@pytest.mark.parametrize("name", sorted(CLIS))
async def test_with_no_tap_nothing_runs_and_the_run_ends_failed_saying_why(name, place):
    cli = CLIS[name]
    steps = [
        call(cli.tool("demo-write_file"), {"name": "hello.txt", "text": "hello"}),
        say("The owner did not answer, so I wrote nothing."),
    ]
    async with real_cli(name, steps, place, mcp_hold_seconds=1) as (stack, model):
        run_id, _ = await start(stack, f"/run {cli.slug} write hello.txt")
        ended = await run_in(
            stack, run_id, RunState.COMPLETED, RunState.FAILED, timeout=RUN_TIMEOUT
        )
        assert ended["status"] == RunState.FAILED
        assert "none of the 1 tool calls it made went through" in ended["error"], ended["error"]
        assert "nothing was done" in ended["error"].lower()
        assert not (stack.settings.data_dir / "demo" / "hello.txt").exists()
        assert await used(stack, "demo.write_file") == 0
        await message_with(stack, rf"^Run #{run_id} failed: ")


@pytest.mark.parametrize("name", sorted(CLIS))
async def test_every_built_in_that_would_change_something_is_refused(name, place):
    cli = CLIS[name]
    workdir = place.tmp_path / "work" / cli.slug
    steps = [*cli.changes(workdir), say("I could not change anything.")]
    async with real_cli(name, steps, place) as (stack, model):
        run_id, _ = await start(stack, f"/run {cli.slug} make a file")
        ended = await run_in(
            stack, run_id, RunState.COMPLETED, RunState.FAILED, timeout=RUN_TIMEOUT
        )
        assert not model.ran_out  # the CLI answered every call, and asked for the next step
        assert not (workdir / "made.txt").exists()
        assert sorted(p.name for p in workdir.iterdir()) == []  # no worktree, nothing at all
        assert await cards(stack) == 0  # refused by the CLI as started: nobody was asked
        if name == "codex":
            # Codex 0.171 prints no event at all for a command its sandbox refused, so the run
            # cannot tell; it ends "completed" with no effect (the completed no-op, which the
            # watchdog raises after three), never with a change counted.
            assert ended["effects"]["changes_made"] == 0 and ended["effects"]["calls_failed"] == 0
        else:
            assert ended["status"] == RunState.FAILED  # none of its calls went through
            assert f"none of the {len(steps) - 1} tool calls" in ended["error"], ended["error"]
        offered = set(model.requests[0].tool_names)
    if name == "codex":  # its subagents and its web search are off
        assert not {t for t in offered if t == "web_search" or t.startswith("multi_agent")}
    if name == "claude":
        # --tools: the built-ins that exist at all, so one a later release adds is not there.
        built_ins = {tool for tool in offered if not tool.startswith("mcp__")}
        assert built_ins <= {"Read", "Grep", "Glob"}, built_ins
        assert {"mcp__aegis__demo-read_clock", "mcp__aegis__demo-write_file"} <= offered


@pytest.mark.parametrize("name", sorted(CLIS))
async def test_nothing_in_aegis_data_dir_reaches_the_model(name, place):
    cli = CLIS[name]
    secret = (place.tmp_path / "data" / "secrets" / "canary").resolve()
    steps = [*cli.peeks(secret), say("I found nothing.")]
    async with real_cli(name, steps, place) as (stack, model):
        secret.parent.mkdir(parents=True, exist_ok=True)
        secret.write_text(SECRET)
        run_id, _ = await start(stack, f"/run {cli.slug} look around")
        await run_in(stack, run_id, RunState.COMPLETED, RunState.FAILED, timeout=RUN_TIMEOUT)
        assert not model.ran_out
        assert len(model.tool_results) == len(steps) - 1  # every call was answered …
        assert not model.reached_model(SECRET)  # … and none with the secret


# As a client its owner configured by the README


def _claude_client(cli: Path, url: str, token: str, home: Path, data_dir: Path) -> list[str]:
    """The README's headless command, with the server added from a --mcp-config file (what
    `claude mcp add` writes). --allowedTools is left out: Claude then asks the permission
    prompt about aegis's own tools, which must not stop them."""
    config = home / "aegis-mcp.json"
    server = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
    config.write_text(json.dumps({"mcpServers": {"aegis": server}}))
    return [
        str(cli),
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--mcp-config",
        str(config),
        "--tools",
        "Read,Grep,Glob",
        "--disallowedTools",
        f"Read(//{str(data_dir).lstrip('/')}/**)",
        "--permission-prompt-tool",
        "mcp__aegis__permission_prompt",
    ]


@pytest.mark.parametrize("name", sorted(CLIS))
async def test_a_client_configured_by_the_readme_reads_at_once_and_writes_after_the_tap(
    name, place
):
    cli = CLIS[name]
    steps = read_then_write(cli)
    async with real_cli(name, steps, place) as (stack, model):
        token = await AgentTokens(stack.store).mint("laptop")
        url = mcp_url(stack.settings)
        home = place.tmp_path / "home"
        env = cli.environment(model, home) | {"AEGIS_MCP_TOKEN": token}
        executable = cli_path(cli.executable)
        if name == "claude":
            data_dir = stack.settings.data_dir.resolve()
            command = _claude_client(executable, url, token, home, data_dir)
            env["MCP_TOOL_TIMEOUT"] = "120000"
        elif name == "codex":
            data_dir = stack.settings.data_dir.resolve()
            readme = (
                'default_permissions = "mine"\n'
                '[permissions.mine]\nextends = ":workspace"\n'
                f'[permissions.mine.filesystem]\n{json.dumps(str(data_dir))} = "none"\n'
                "[mcp_servers.aegis]\n"
                f"url = {json.dumps(url)}\n"
                'bearer_token_env_var = "AEGIS_MCP_TOKEN"\n'
                "tool_timeout_sec = 120\n"
                'default_tools_approval_mode = "approve"\n'
            )
            env = codex_environment(model, home, readme) | {"AEGIS_MCP_TOKEN": token}
            command = [str(executable), "exec", "--json", "--skip-git-repo-check", "-"]
        else:
            server = {
                "type": "remote",
                "url": url,
                "enabled": True,
                "oauth": False,
                "timeout": 120000,
                "headers": {"Authorization": "Bearer {env:AEGIS_MCP_TOKEN}"},
            }
            env = opencode_environment(model, home, {"mcp": {"aegis": server}})
            env["AEGIS_MCP_TOKEN"] = token
            command = [str(executable), "run", "--format", "json"]
        workdir = place.tmp_path / "work" / "laptop"
        workdir.mkdir(parents=True)
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=workdir,
            env=env | {"PWD": str(workdir)},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # In a group of its own, stopped as one below: codex leaves a sandbox helper
            # running after it exits, which outlived the suite by 40 minutes.
            start_new_session=True,
        )
        finished = asyncio.create_task(process.communicate(b"Write hello.txt, please."))
        try:
            card = await message_with(stack, r"Approval needed", timeout=RUN_TIMEOUT)
            assert any(CLOCK in text for text in model.tool_result_texts)
            assert "laptop wants to run 'demo.write_file'" in card["text"]
            await tap(stack, card, "Approve")
            stdout, stderr = await asyncio.wait_for(finished, timeout=RUN_TIMEOUT)
        finally:
            await kill_group(process, grace=0)  # the CLI and whatever it left running
        assert process.returncode == 0, stderr.decode()[-2000:]
        assert (stack.settings.data_dir / "demo" / "hello.txt").read_text() == "hello"
        assert await used(stack, "demo.write_file") == 1
        assert any(WROTE in text for text in model.tool_result_texts), model.tool_result_texts
        assert token not in stdout.decode() + stderr.decode()


# What a project's own settings, or the owner's, cannot widen


async def test_a_projects_claude_settings_run_no_hook_and_allow_nothing_more(place):
    workdir = place.tmp_path / "work" / "claude"
    made, hooked = workdir / "made.txt", workdir / "hooked.txt"
    hook = [{"hooks": [{"type": "command", "command": f"touch {hooked}"}]}]
    settings = {
        "hooks": {"SessionStart": hook, "UserPromptSubmit": hook},
        "permissions": {"allow": ["Bash(*)", "Write(*)"], "defaultMode": "bypassPermissions"},
    }
    steps = [call("Bash", {"command": f"touch {made}"}), say("I could not.")]
    async with real_cli("claude", steps, place) as (stack, model):
        (workdir / ".claude").mkdir(parents=True)
        (workdir / ".claude" / "settings.json").write_text(json.dumps(settings))
        run_id, _ = await start(stack, "/run claude make a file")
        ended = await run_in(
            stack, run_id, RunState.COMPLETED, RunState.FAILED, timeout=RUN_TIMEOUT
        )
        assert not model.ran_out and len(model.tool_results) == 1
    assert not made.exists() and not hooked.exists()
    assert ended["status"] == RunState.FAILED  # its one call was refused


async def test_neither_the_owners_nor_a_projects_codex_config_widens_a_run(place):
    workdir = place.tmp_path / "work" / "codex"
    made = workdir / "made.txt"
    with echo_mcp_in_thread() as echo:
        other = f'url = {json.dumps(echo.url)}\ndefault_tools_approval_mode = "approve"\n'
        top = 'sandbox_mode = "danger-full-access"\ndefault_permissions = "open"\n'
        tables = '[permissions.open]\nextends = ":danger-full-access"\n'
        steps = [
            call("mcp__other__write", {"text": "x"}),
            call("exec_command", {"cmd": f"touch {made}"}),
            say("Done."),
        ]
        async with real_cli("codex", steps, place) as (stack, model):
            owner = place.tmp_path / "home" / ".codex" / "config.toml"
            owner.write_text(f"{top}{owner.read_text()}\n{tables}\n[mcp_servers.other]\n{other}")
            (workdir / ".codex").mkdir(parents=True)
            (workdir / ".codex" / "config.toml").write_text(f"{top}{tables}")
            run_id, _ = await start(stack, "/run codex make a file")
            ended = await run_in(
                stack, run_id, RunState.COMPLETED, RunState.FAILED, timeout=RUN_TIMEOUT
            )
            assert model.requests, ended["error"]
            offered = set(model.requests[0].tool_names)
    assert not made.exists()
    assert echo.calls == []  # the owner's other MCP server never saw a call
    assert not {tool for tool in offered if tool.startswith("mcp__other")}
