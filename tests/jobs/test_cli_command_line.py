"""The command line, environment and config a coding-CLI run is given: its token kept off the
command line and the worker's secrets kept home, each CLI's own mutating built-ins locked
(claude-code's flags, codex's permission profile, opencode's permission config), and an
opencode project config that could widen its tools refused."""

from __future__ import annotations

import json
import os
import re

import pytest

from bot.agents.profiles import HarnessKind
from bot.errors import HarnessFailed
from jobs.harnesses.cli import _command
from jobs.harnesses.cli_specs import CLAUDE_BUILTINS, CLIS, OPENCODE_PERMISSION
from jobs.harnesses.codex_config import foreign_servers_off
from jobs.harnesses.opencode_project import refuse_widening_config
from tests.helpers.cli_harness import profile

# The command line and environment a run is given.


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


# Each CLI's own mutating built-ins, as its command line and config say.


def test_claude_code_has_only_its_reading_built_ins_by_an_allow_list(tmp_path):
    rundir = tmp_path / "run"
    rundir.mkdir()
    kind = HarnessKind.CLAUDE_CODE
    argv, env = _command(CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-123")
    # --tools is the list of built-ins that exist at all: one a later release adds is absent.
    assert argv[argv.index("--tools") + 1].split(",") == ["Read", "Grep", "Glob"]
    assert set(CLAUDE_BUILTINS) == {"Read", "Grep", "Glob"}
    allowed = argv[argv.index("--allowedTools") + 1].split(",")
    assert allowed == ["Read", "Grep", "Glob", "mcp__aegis"]
    assert "--disallowedTools" not in argv  # no data dir named, no deny rule to give
    assert argv[argv.index("--permission-mode") + 1] == "default"
    assert argv[argv.index("--permission-prompt-tool") + 1] == "mcp__aegis__permission_prompt"
    assert "--strict-mcp-config" in argv and "--dangerously-skip-permissions" not in argv
    assert int(env["MCP_TOOL_TIMEOUT"]) > 25_000  # longer than aegis holds a gated call


def test_claude_code_is_kept_out_of_aegis_data_dir(tmp_path):
    rundir = tmp_path / "run"
    rundir.mkdir()
    kind = HarnessKind.CLAUDE_CODE
    private = tmp_path / "data"
    argv, _ = _command(
        CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-123", private=(private,)
    )
    denied = argv[argv.index("--disallowedTools") + 1].split(",")
    assert denied == [f"Read(//{str(private).lstrip('/')}/**)"]
    env_file = tmp_path / ".env"  # a file: the rule names it alone
    env_file.write_text("AEGIS_TELEGRAM_TOKEN=x\n")
    (tmp_path / "run2").mkdir()
    argv, _ = _command(
        CLIS[kind], profile(kind, tmp_path), tmp_path / "run2", 8743, "tok-2", private=(env_file,)
    )
    assert argv[argv.index("--disallowedTools") + 1] == f"Read(//{str(env_file).lstrip('/')})"
    with pytest.raises(HarnessFailed, match="cannot be told to keep out of it"):
        _command(
            CLIS[kind],
            profile(kind, tmp_path),
            rundir,
            8743,
            "tok-123",
            private=(tmp_path / "a b",),
        )


def test_codex_runs_its_shell_read_only_and_never_escalates(tmp_path):
    rundir = tmp_path / "run"
    rundir.mkdir()
    kind = HarnessKind.CODEX
    private = tmp_path / 'data "x"'
    argv, _ = _command(
        CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-123", private=(private,)
    )
    # A permission profile of aegis's own, not --sandbox (which would drop the profile): it
    # extends read-only and denies reading aegis's data dir, its path a TOML string. Its name is
    # new for each run, so no config layer of the owner's or a project's can add to it.
    named = re.search(r'^default_permissions="(aegis-[0-9a-f]{12})"$', "\n".join(argv), re.M)
    assert "--sandbox" not in argv and named is not None
    name = named.group(1)
    assert f'permissions.{name}.extends=":read-only"' in argv
    assert f'permissions.{name}.filesystem={{{json.dumps(str(private))} = "none"}}' in argv
    env_file = tmp_path / ".env"
    env_file.write_text("AEGIS_TELEGRAM_TOKEN=x\n")
    both = tmp_path / "both"
    both.mkdir()
    argv2, _ = _command(
        CLIS[kind], profile(kind, tmp_path), both, 8743, "tok-1", private=(private, env_file)
    )
    entries = f'{json.dumps(str(private))} = "none", {json.dumps(str(env_file))} = "none"'
    assert any(arg.endswith(f".filesystem={{{entries}}}") for arg in argv2)
    again = tmp_path / "again"
    again.mkdir()
    other, _ = _command(CLIS[kind], profile(kind, tmp_path), again, 8743, "tok-456")
    assert f'default_permissions="{name}"' not in other
    assert 'web_search="disabled"' in argv and "features.multi_agent=false" in argv
    assert 'approval_policy="never"' in argv and 'approvals_reviewer="user"' in argv
    assert argv[0] == "exec" and argv[-1] == "-"  # the overrides are exec's, before the prompt
    # Its cap on one MCP call is hard (progress does not extend it): past aegis's 25 s hold.
    assert "mcp_servers.aegis.tool_timeout_sec=120" in argv
    # Its own approval would refuse every aegis tool that is not a read: aegis's gate decides.
    assert 'mcp_servers.aegis.default_tools_approval_mode="approve"' in argv


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
    assert written["mcp"]["aegis"]["timeout"] > 25_000  # ms; past aegis's hold of a call
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


# Resuming a session (a run that asked aegis to watch a process goes on in its own session).


@pytest.mark.parametrize(
    ("kind", "tail"),
    [
        (HarnessKind.CLAUDE_CODE, ["--resume", "ses-1"]),
        # codex exec [OPTIONS] resume <SESSION_ID> -: every option before the subcommand
        (HarnessKind.CODEX, ["resume", "ses-1", "-"]),
        (HarnessKind.OPENCODE, ["--session", "ses-1"]),
    ],
)
def test_a_resumed_session_is_named_last_and_a_new_one_is_not(kind, tail, tmp_path):
    def argv(**session) -> list[str]:
        rundir = tmp_path / ("resumed" if session else "new")
        rundir.mkdir()
        made, _ = _command(CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-123", **session)
        made = [arg.replace(str(rundir), "RUN") for arg in made]
        return [re.sub(r"aegis-[0-9a-f]{12}", "PROFILE", arg) for arg in made]  # Codex's, per run

    new, resumed = argv(), argv(session="ses-1")
    assert resumed[-len(tail) :] == tail
    assert "ses-1" not in new and "resume" not in new and "--session" not in new
    # Everything else is the same: the same locks, the same MCP server, the same instructions.
    kept = len(new) - len(CLIS[kind].prompt_args)
    assert resumed[:kept] == new[:kept]


# Codex's other MCP servers (jobs/harnesses/codex_config.py)


def test_every_mcp_server_of_codexs_config_but_aegis_is_switched_off(tmp_path, monkeypatch):
    home = tmp_path / "codex-home"
    home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(home))
    (home / "config.toml").write_text(
        '[mcp_servers.github]\nurl = "https://example.org/mcp"\n'
        '[mcp_servers.shell-tools]\ncommand = "npx"\n'
        '[mcp_servers.aegis]\nurl = "http://127.0.0.1:1/mcp"\n'
    )
    project = tmp_path / "repo" / "sub"
    project.mkdir(parents=True)
    off = foreign_servers_off(project, keep="aegis")
    assert off == [
        "-c",
        "mcp_servers.github.enabled=false",
        "-c",
        "mcp_servers.shell-tools.enabled=false",
    ]
    rundir = tmp_path / "run"
    rundir.mkdir()
    kind = HarnessKind.CODEX
    argv, _ = _command(CLIS[kind], profile(kind, project), rundir, 8743, "tok-789")
    assert "mcp_servers.github.enabled=false" in argv and argv[-1] == "-"
    # A project's own servers: refused, not switched off (Codex may never have loaded them).
    (tmp_path / "repo" / ".codex").mkdir()
    (tmp_path / "repo" / ".codex" / "config.toml").write_text('[mcp_servers.x]\nurl = "y"\n')
    with pytest.raises(HarnessFailed, match=r"repo/\.codex/config\.toml declares MCP servers"):
        foreign_servers_off(project, keep="aegis")


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("[mcp_servers\n", "which aegis cannot read"),
        ('[mcp_servers."two words"]\nurl = "x"\n', "cannot switch off"),
    ],
)
def test_a_codex_config_aegis_cannot_read_or_name_refuses_the_run(
    tmp_path, monkeypatch, text, refused
):
    monkeypatch.setenv("CODEX_HOME", str(tmp_path))
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(HarnessFailed, match=refused):
        foreign_servers_off(tmp_path, keep="aegis")
