"""The real Claude Code, Codex and OpenCode (tests/helpers/vendor_clis.py) against the scripted
model servers (tests/helpers/vendor_models/): a text answer, a call of the CLI's own read
tool, and a call of a real MCP server's tool each make the round trip, so the wire formats
and environments aegis's end-to-end tests stand on are known to work with the pinned CLIs.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.echo_mcp import echo_mcp_in_thread
from tests.helpers.vendor_models import (
    Call,
    ScriptedModel,
    call,
    claude_environment,
    codex_environment,
    opencode_environment,
    say,
    scripted_model_in_thread,
)

RUN_TIMEOUT = 60  # seconds; a wire mistake shows as a CLI that waits for more
NOTES = "the launch code is 4711\n"


@dataclass(frozen=True)
class Vendor:
    fixture: str  # the fixture that installs the CLI
    # (cli, model, home, workdir, mcp_url or None, extra args) -> the finished process
    run: Callable[..., subprocess.CompletedProcess[str]]
    read: Callable[[Path], Call]  # a call of the CLI's own read tool for a file
    mcp_tool: Callable[[str, str], str]  # (server, tool) -> the name the model calls
    answers: Callable[[str], list[str]]  # the final texts in the CLI's JSON output


def _run(command: list[str], env: dict[str, str], workdir: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        command,
        input="Read notes.txt, please.",
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert done.returncode == 0, (
        f"exit {done.returncode}: {done.stderr[-2000:]} {done.stdout[-3000:]}"
    )
    return done


def _json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def run_claude(cli, model, home, workdir, mcp_url, extra=()):
    env = claude_environment(model, home)  # makes home
    command = [str(cli), "-p", "--output-format", "stream-json", "--verbose", *extra]
    if mcp_url:
        config = home / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"t": {"type": "http", "url": mcp_url}}}))
        command += ["--mcp-config", str(config), "--strict-mcp-config", "--allowedTools", "mcp__t"]
    return _run(command, env, workdir)


def run_codex(cli, model, home, workdir, mcp_url, extra=()):
    command = [str(cli), "exec", "--json", "--skip-git-repo-check", *extra]
    if mcp_url:
        command += ["-c", f"mcp_servers.t.url={json.dumps(mcp_url)}"]
    return _run([*command, "-"], codex_environment(model, home), workdir)


def run_opencode(cli, model, home, workdir, mcp_url, extra=()):
    config = {"permission": {"*": "allow"}}
    if mcp_url:
        config["mcp"] = {"t": {"type": "remote", "url": mcp_url, "enabled": True}}
    command = [str(cli), "run", "--format", "json", *extra]
    return _run(command, opencode_environment(model, home, config), workdir)


VENDORS = {
    "claude": Vendor(
        "claude_cli",
        run_claude,
        lambda path: call("Read", {"file_path": str(path)}),
        lambda server, tool: f"mcp__{server}__{tool}",
        lambda out: [e["result"] for e in _json_lines(out) if e.get("type") == "result"],
    ),
    "codex": Vendor(
        "codex_cli",
        run_codex,
        # Codex 0.171 offers no read tool of its own: its shell is exec_command (a PTY).
        lambda path: call("exec_command", {"cmd": f"cat {path.name}"}),
        # Each MCP server is a Responses API namespace ``mcp__<server>``; the model calls
        # the tool by its own name inside it (vendor_models/responses.py joins them so).
        lambda server, tool: f"mcp__{server}__{tool}",
        lambda out: [
            e["item"]["text"]
            for e in _json_lines(out)
            if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
        ],
    ),
    "opencode": Vendor(
        "opencode_cli",
        run_opencode,
        lambda path: call("read", {"filePath": str(path)}),
        lambda server, tool: f"{server}_{tool}",
        lambda out: [e["part"]["text"] for e in _json_lines(out) if e.get("type") == "text"],
    ),
}


@pytest.fixture(params=sorted(VENDORS))
def vendor(request: pytest.FixtureRequest) -> tuple[Vendor, Path]:
    chosen = VENDORS[request.param]
    return chosen, request.getfixturevalue(chosen.fixture)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "notes.txt").write_text(NOTES)
    return folder


def _drive(vendor, workdir, steps, *, mcp_url=None, extra=()) -> tuple[ScriptedModel, str]:
    chosen, cli = vendor
    with scripted_model_in_thread(steps) as model:
        done = chosen.run(cli, model, workdir.parent / "home", workdir, mcp_url, extra)
    return model, done.stdout


def test_a_text_answer_is_what_the_cli_prints(vendor, workdir):
    model, stdout = _drive(vendor, workdir, [say("Forty-two, as scripted.")])

    assert vendor[0].answers(stdout) == ["Forty-two, as scripted."]
    assert len(model.requests) == 1 and not model.ran_out
    assert model.reached_model("Read notes.txt, please.")


def test_the_cli_reads_a_file_with_its_own_tool_and_the_model_gets_it(vendor, workdir):
    steps = [vendor[0].read(workdir / "notes.txt"), say("Read it.")]
    model, stdout = _drive(vendor, workdir, steps)

    assert "the launch code is 4711" in model.tool_result_texts[0]
    assert len(model.requests) == 2 and not model.ran_out
    assert vendor[0].answers(stdout) == ["Read it."]


def test_an_mcp_tool_call_reaches_the_server_and_its_result_the_model(vendor, workdir):
    chosen = vendor[0]
    echo_name = chosen.mcp_tool("t", "echo")

    def check_offered(request):
        assert echo_name in request.tool_names, request.tool_names
        return call(echo_name, {"text": "ping"})

    with echo_mcp_in_thread() as echo:
        model, _ = _drive(vendor, workdir, [check_offered, say("Echoed.")], mcp_url=echo.url)

    assert echo.calls == [("echo", {"text": "ping"})]
    assert "echo: ping" in model.tool_result_texts[0]
    assert model.tool_results[0].name == echo_name


@pytest.mark.parametrize(
    ("approval", "reaches_server"),
    [
        (None, False),  # "auto", the default: only a tool marked read-only runs
        ('mcp_servers.t.default_tools_approval_mode="writes"', False),
        ('mcp_servers.t.default_tools_approval_mode="approve"', True),
        ('mcp_servers.t.tools.write.approval_mode="approve"', True),
    ],
)
def test_codex_runs_an_mcp_tool_not_marked_read_only_only_when_approved_in_config(
    codex_cli, workdir, approval, reaches_server
):
    # As aegis runs it (jobs/harnesses/cli_specs.py): approval policy never, no reviewer.
    extra = ["--sandbox", "read-only", "-c", 'approval_policy="never"']
    extra += ["-c", 'approvals_reviewer="user"', *(["-c", approval] if approval else [])]
    steps = [call("mcp__t__write", {"text": "x"}), say("Done.")]
    with echo_mcp_in_thread() as echo:
        model, _ = _drive(
            (VENDORS["codex"], codex_cli), workdir, steps, mcp_url=echo.url, extra=extra
        )

    result = model.tool_result_texts[0]
    if reaches_server:
        assert echo.calls == [("write", {"text": "x"})] and "wrote: x" in result
    else:
        assert echo.calls == []
        assert "requires approval, but approval policy is never" in result
