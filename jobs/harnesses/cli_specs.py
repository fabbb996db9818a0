"""How each coding CLI is driven headless: ``CliSpec`` (data, never a branch on a name) and the
specs of Claude Code, Codex and OpenCode, each with the vendor's documented reasons for its
flags and config: how it is made headless, how it reaches aegis's MCP server, how its own
mutating built-ins are turned off, and how a session is resumed. The harness that runs them is
jobs/harnesses/cli.py.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.agents.profiles import CLI_COMMANDS, HarnessKind
from bot.tools.declarations import MCP_SERVER_NAME, PROMPT_TOOL
from jobs.harnesses.cli_streams import ClaudeStream, CodexStream, OpencodeStream, StreamReader
from jobs.harnesses.codex_config import foreign_servers_off
from jobs.harnesses.opencode_project import refuse_widening_config

# The name of a variable (not a secret): a CLI that reads its bearer token from the environment.
TOKEN_ENV = "AEGIS_MCP_TOKEN"  # noqa: S105
# How long a CLI aegis starts waits for one call to aegis's tools: well past the 25 s a gated
# call is held (bot/actions/held_calls.py), so the hold, not the client, ends the wait.
CLIENT_TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class CliSpec:
    """How one vendor's CLI is run headless. Strings may hold placeholders, filled per run:
    ``{model}``, ``{instructions}``, ``{instructions_toml}`` (a TOML string),
    ``{instructions_file}``, ``{mcp_url}``, ``{mcp_url_toml}``, ``{config_file}``, and
    ``{token}``, which only ``config`` and ``env`` may hold, never the command line."""

    # the CLI's own name (bot/agents/profiles.py), used when the agent names no command
    executable: str
    args: tuple[str, ...]  # headless, JSON stream, the request read from stdin
    reader: type[StreamReader]
    model_args: tuple[str, ...] = ()  # added when the agent names a model
    instructions_args: tuple[str, ...] = ()  # added when the agent has instructions
    mcp_args: tuple[str, ...] = ()
    # added when aegis's data dir is known: what keeps the CLI's own reading tools out of it
    # ({private_rules}: Claude Code's deny rules for it)
    private_args: tuple[str, ...] = ()
    prompt_args: tuple[str, ...] = ()  # last on a new session's command line
    resume_args: tuple[str, ...] = ()  # last when a session ({session}) is resumed instead
    config: Mapping[str, Any] | None = None  # written as JSON to {config_file}, mode 0600
    env: Mapping[str, str] = field(default_factory=dict)
    # Called with the workdir before anything is started; raises HarnessFailed to refuse it.
    preflight: Callable[[Path], None] | None = None
    # Called with the workdir: more arguments, from what the CLI's own config files hold (what
    # must be switched off for the run); raises HarnessFailed to refuse the run.
    config_args: Callable[[Path], list[str]] | None = None
    # Its built-ins that only read, as its stream names them; any other call (aegis's tools
    # go by their declared effect) counts as a change it tried.
    reading_tools: frozenset[str] = frozenset()
    # The npm package and the version of it the tests run for real (tests/helpers/vendor_clis.py
    # installs it; `aegis doctor` compares what is installed).
    package: str = ""
    tested: str = ""

    @property
    def name(self) -> str:
        return self.executable


# Claude Code: ``claude -p`` prints one answer and exits; stream-json needs --verbose in print
# mode. The prompt is read from stdin when none is given. --mcp-config takes a JSON file of
# {"mcpServers": {name: {"type": "http", "url", "headers"}}}; --strict-mcp-config ignores every
# other MCP server.
# Its built-ins are an allow list: ``--tools`` names the built-ins that exist for the session
# at all ("" for none, or names; `claude --help`), so a built-in a later release adds
# (2.1.33x ships EnterWorktree, CronCreate, Workflow, Monitor …, which a deny list did not
# name) is not there until it is listed here. Only the reading ones are: Read, Grep and Glob.
# --allowedTools lets those and aegis's own MCP tools run without a prompt (aegis's gate
# decides each MCP call on the server). The one deny rule keeps the reading tools out of
# aegis's data dir, which holds its secrets: a Read rule on it (an absolute path is written
# with //) also governs Grep and Glob, and deny rules win over allow rules from every settings
# source ("deny -> ask -> allow, the first matching rule wins", code.claude.com/docs/en/
# permissions). --permission-mode default: never acceptEdits or bypassPermissions; headless,
# what would ask goes to --permission-prompt-tool, aegis's gate, which decides a built-in as
# ``cli.<Name>`` (aegis/mcp/server.py): reading outside the workdir, say.
# MCP_TOOL_TIMEOUT (ms) is how long Claude waits for one MCP call; aegis holds a gated call up
# to 25 s, so it must be longer than that.
CLAUDE_BUILTINS = ("Read", "Grep", "Glob")
CLAUDE_CODE = CliSpec(
    executable=CLI_COMMANDS[HarnessKind.CLAUDE_CODE],
    package="@anthropic-ai/claude-code",
    tested="2.1.332",
    reading_tools=frozenset(CLAUDE_BUILTINS),
    args=("-p", "--output-format", "stream-json", "--verbose"),
    reader=ClaudeStream,
    model_args=("--model", "{model}"),
    instructions_args=("--append-system-prompt", "{instructions}"),
    mcp_args=(
        "--mcp-config",
        "{config_file}",
        "--strict-mcp-config",
        "--tools",
        ",".join(CLAUDE_BUILTINS),
        # No settings file of the owner's or the project's: a project's .claude/settings.json
        # runs hooks (shell commands) with no prompt, and carries allow rules. Hooks off too.
        "--setting-sources",
        "",
        "--settings",
        '{"disableAllHooks": true}',
        "--permission-mode",
        "default",
        "--allowedTools",
        ",".join((*CLAUDE_BUILTINS, f"mcp__{MCP_SERVER_NAME}")),
        "--permission-prompt-tool",
        f"mcp__{MCP_SERVER_NAME}__{PROMPT_TOOL}",
    ),
    private_args=("--disallowedTools", "{private_rules}"),
    resume_args=("--resume", "{session}"),
    config={
        "mcpServers": {
            MCP_SERVER_NAME: {
                "type": "http",
                "url": "{mcp_url}",
                "headers": {"Authorization": "Bearer {token}"},
            }
        }
    },
    env={"MCP_TOOL_TIMEOUT": str(CLIENT_TIMEOUT_SECONDS * 1000)},
)

# Codex: ``codex exec --json`` prints JSONL events; ``-`` reads the prompt from stdin. It has no
# MCP config file flag: servers are ``-c mcp_servers.<name>.*`` overrides (values are TOML),
# and a streamable-HTTP server's token is read from the variable ``bearer_token_env_var`` names
# (Codex refuses an inline bearer_token). ``developer_instructions`` adds the agent's own
# instructions to Codex's. --skip-git-repo-check: the workdir aegis.yaml names is the owner's
# choice, and need not be a git repository.
# Codex has no allow list of its built-ins; what bounds them is its sandbox, which it applies
# to every command it runs (bubblewrap and seccomp on Linux). The sandbox is a permission
# profile of aegis's own (developers.openai.com/codex/permissions), given as -c overrides, the
# highest config layer: it extends ":read-only" (commands read, never write; no network) and
# denies reading aegis's data dir ("none"), which --sandbox read-only cannot say. Its name
# ({profile}) is new for each run, so no config layer can add to it (Codex merges tables of
# the same name key by key: a project's [permissions.x.filesystem] "/" = "write" would). The
# profile
# replaces --sandbox and sandbox_mode, which would switch Codex back to its older settings and
# drop the profile; tested with 0.171, a sandbox_mode in the owner's ~/.codex/config.toml does
# not win over it (tests/jobs/test_real_cli_runs.py). ``codex exec`` refuses
# --ask-for-approval (openai/codex#13614) and runs with approval policy never anyway;
# ``-c approval_policy="never"`` says so explicitly, so nothing escalates out of the sandbox.
# ``approvals_reviewer="user"``: with "auto_review" an automatic reviewer may grant an
# escalation (openai/codex#36570). Its subagents (features.multi_agent: a second context whose
# tools we do not list) and its web search are off, and so is every other MCP server its config
# layers declare (jobs/harnesses/codex_config.py: Codex has no --strict-mcp-config). Aegis's
# MCP server is called by Codex itself, outside the sandbox, so its tools still reach the gate.
CODEX = CliSpec(
    executable=CLI_COMMANDS[HarnessKind.CODEX],
    package="@openai/codex",
    tested="0.171.0",
    # Its shell runs in a read-only profile: a command there cannot change anything.
    reading_tools=frozenset({"command_execution", "web_search"}),
    args=(
        "exec",
        "--json",
        "--skip-git-repo-check",
        # Config, not options: ``codex exec resume`` reads them too (openai/codex#40149).
        "-c",
        'default_permissions="{profile}"',
        "-c",
        'permissions.{profile}.extends=":read-only"',
        "-c",
        'approval_policy="never"',
        "-c",
        'approvals_reviewer="user"',
        "-c",
        'web_search="disabled"',
        "-c",
        "features.multi_agent=false",
    ),
    reader=CodexStream,
    model_args=("--model", "{model}"),
    instructions_args=("-c", "developer_instructions={instructions_toml}"),
    mcp_args=(
        "-c",
        f"mcp_servers.{MCP_SERVER_NAME}.url={{mcp_url_toml}}",
        "-c",
        f'mcp_servers.{MCP_SERVER_NAME}.bearer_token_env_var="{TOKEN_ENV}"',
        # A hard cap on one call (progress does not extend it): past the hold.
        "-c",
        f"mcp_servers.{MCP_SERVER_NAME}.tool_timeout_sec={CLIENT_TIMEOUT_SECONDS}",
        # Codex asks its own approval for an MCP tool not marked read-only, and under approval
        # policy never that is a refusal before the call leaves Codex ("MCP tool call requires
        # approval, but approval policy is never"): aegis's gate never saw it. "approve" hands
        # every call of this server to the server, whose gate decides it.
        "-c",
        f'mcp_servers.{MCP_SERVER_NAME}.default_tools_approval_mode="approve"',
    ),
    # {private_toml}: a TOML inline table, aegis's data dir to "none"
    private_args=("-c", "permissions.{profile}.filesystem={private_toml}"),
    config_args=functools.partial(foreign_servers_off, keep=MCP_SERVER_NAME),
    prompt_args=("-",),
    # ``codex exec [OPTIONS] resume <SESSION_ID> -``: the options stay before the subcommand
    # (codex-rs/exec/src/cli.rs); ``-`` reads the prompt from stdin there too.
    resume_args=("resume", "{session}", "-"),
    env={TOKEN_ENV: "{token}"},
)

# OpenCode: ``opencode run --format json`` prints JSON events; a piped stdin is the message.
# OPENCODE_CONFIG names an extra config file, merged over the user's: a remote MCP server is
# {"mcp": {name: {"type": "remote", "url", "headers", "enabled"}}} (the layout of the released
# 1.x config; V2 moves servers under mcp.servers), and "instructions" lists files added to the
# agent's context. Models are named provider/model.
# Its built-in tools run unasked by default ("allow" is the build agent's default for edit, bash
# and webfetch). ``permission`` decides each tool: "allow", "ask" or "deny"; "*" covers every
# tool and, the rules being matched in order, the last match wins, so "*" comes first; the keys
# are read, edit (which also covers write, patch and multiedit), glob, grep, list, bash, task,
# skill, lsp, todoread, todowrite, webfetch, websearch, codesearch, external_directory,
# doom_loop (opencode.ai/docs/permissions; ``tools`` is the deprecated form of the same). Agent
# entries (``agent.<name>.permission``) override the global rules for that agent. So the rules
# deny everything and allow back only the reading tools and aegis's MCP tools (named
# ``<server>_<tool>``; the gate decides each call), for the default agent too. Precedence
# (opencode.ai/docs/config, "later sources override earlier ones"): remote, global
# (~/.config/opencode), OPENCODE_CONFIG, the project's opencode.json, .opencode directories,
# then OPENCODE_CONFIG_CONTENT, then the admin's managed config. The project file beats
# OPENCODE_CONFIG, so the rules go in OPENCODE_CONFIG_CONTENT, which beats it; but configs are
# merged key by key, and a project's own permission keys or agents could still come after ours,
# so a workdir whose project config touches permissions, tools, agents or plugins is refused
# (jobs/harnesses/opencode_project.py). The token stays in the private file, not the environment.
OPENCODE_READING = ("read", "glob", "grep", "list", "lsp", "todoread", "todowrite")
OPENCODE_PERMISSION: dict[str, str] = {
    "*": "deny",
    **dict.fromkeys(OPENCODE_READING, "allow"),
    f"{MCP_SERVER_NAME}_*": "allow",
    "edit": "deny",
    "bash": "deny",
    "webfetch": "deny",
    "websearch": "deny",
    "codesearch": "deny",
    "task": "deny",
    "external_directory": "deny",
}
OPENCODE_LOCKED = {
    "permission": OPENCODE_PERMISSION,
    "default_agent": "build",
    "agent": {name: {"permission": OPENCODE_PERMISSION} for name in ("build", "plan")},
}
OPENCODE = CliSpec(
    executable=CLI_COMMANDS[HarnessKind.OPENCODE],
    package="opencode-ai",
    tested="1.18.33",
    reading_tools=frozenset(OPENCODE_READING),
    args=("run", "--format", "json"),
    reader=OpencodeStream,
    model_args=("--model", "{model}"),
    resume_args=("--session", "{session}"),
    config={
        "$schema": "https://opencode.ai/config.json",
        "mcp": {
            MCP_SERVER_NAME: {
                "type": "remote",
                "url": "{mcp_url}",
                "headers": {"Authorization": "Bearer {token}"},
                "enabled": True,
                # ms for one call, reset by each progress note: past the hold all the same.
                "timeout": CLIENT_TIMEOUT_SECONDS * 1000,
            }
        },
        "instructions": ["{instructions_file}"],
        **OPENCODE_LOCKED,
    },
    env={
        "OPENCODE_CONFIG": "{config_file}",
        "OPENCODE_CONFIG_CONTENT": json.dumps(OPENCODE_LOCKED),
    },
    preflight=refuse_widening_config,
)

CLIS: dict[HarnessKind, CliSpec] = {
    HarnessKind.CLAUDE_CODE: CLAUDE_CODE,
    HarnessKind.CODEX: CODEX,
    HarnessKind.OPENCODE: OPENCODE,
}
