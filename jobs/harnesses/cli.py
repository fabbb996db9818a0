"""The coding-CLI harness: Claude Code, Codex or OpenCode started headless in the agent's workdir.

One harness, told by a :class:`CliSpec` how each vendor's CLI is driven (data, never a branch on
a name). A run:

1. mints a bearer token for this run (bot/agent_tokens.py) and writes what the CLI reads into
   a private directory of its own (0700, files 0600, removed at the end): the token reaches
   aegis's MCP server as ``Authorization: Bearer …`` through a config file or the CLI's
   environment, never its command line, a log line or an error message;
2. starts the CLI in ``workdir`` in a session (process group) of its own, the request on its
   stdin, the agent's instructions and model on its command line or in its config;
3. reads its JSON stream line by line (jobs/harnesses/cli_streams.py) into progress steps and
   a result, keeping a bounded amount of stdout and stderr in memory;
4. stops it at the run's deadline or on cancellation by killing the whole process group
   (SIGTERM, then SIGKILL after a short grace), and always reaps it, so no child outlives the
   run; the token is revoked when the run's stretch ends, however it ends.

A CLI run is not resumed mid-way: a run taken over from a dead worker starts the CLI again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.agent_tokens import AgentTokens
from bot.agents import AgentProfile, HarnessKind
from bot.harness import HarnessFailed, RunContext
from jobs.harnesses.cli_streams import ClaudeStream, CodexStream, OpencodeStream, StreamReader

logger = logging.getLogger(__name__)

MCP_SERVER_NAME = "aegis"  # how each CLI names aegis's MCP server (Claude's tools: mcp__aegis__*)
# The name of a variable (not a secret): a CLI that reads its bearer token from the environment.
TOKEN_ENV = "AEGIS_MCP_TOKEN"  # noqa: S105
TOKEN_SLACK = timedelta(minutes=1)  # a run's token outlives its deadline by this much
KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL (below the runner's CANCEL_GRACE)
CEILING_GRACE = 1.0  # after our own ceiling, how long the runner has to call it timed out
DRAIN_GRACE = 1.0  # after the CLI exits, how long its stdout may take to run dry
STEP_EVERY = 1.0  # seconds between progress steps saved to the run's row
READ_CHUNK = 65_536
MAX_LINE_BYTES = 8 * 1024 * 1024  # one JSON event; a longer line is dropped and counted
STDERR_KEEP_BYTES = 16_384  # the tail of stderr kept for an error message
STDERR_SHOWN_LINES = 5
STDERR_SHOWN_CHARS = 600
RESULT_CHARS = 200_000  # a longer answer is cut, with a note of how much
PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class CliSpec:
    """How one vendor's CLI is run headless. Strings may hold placeholders, filled per run:
    ``{model}``, ``{instructions}``, ``{instructions_toml}`` (a TOML string),
    ``{instructions_file}``, ``{mcp_url}``, ``{mcp_url_toml}``, ``{config_file}``, and
    ``{token}``, which only ``config`` and ``env`` may hold, never the command line."""

    executable: str  # the CLI's own name, used when the agent names no ``command``
    args: tuple[str, ...]  # headless, JSON stream, the request read from stdin
    reader: type[StreamReader]
    model_args: tuple[str, ...] = ()  # added when the agent names a model
    instructions_args: tuple[str, ...] = ()  # added when the agent has instructions
    mcp_args: tuple[str, ...] = ()
    config: Mapping[str, Any] | None = None  # written as JSON to {config_file}, mode 0600
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.executable


# Claude Code: ``claude -p`` prints one answer and exits; stream-json needs --verbose in print
# mode. The prompt is read from stdin when none is given. --mcp-config takes a JSON file of
# {"mcpServers": {name: {"type": "http", "url", "headers"}}}; --strict-mcp-config ignores every
# other MCP server, so every tool the agent reaches goes through aegis's gate; --allowedTools
# mcp__aegis lets the headless run use aegis's tools without a prompt (the gate decides).
CLAUDE_CODE = CliSpec(
    executable="claude",
    args=("-p", "--output-format", "stream-json", "--verbose"),
    reader=ClaudeStream,
    model_args=("--model", "{model}"),
    instructions_args=("--append-system-prompt", "{instructions}"),
    mcp_args=(
        "--mcp-config",
        "{config_file}",
        "--strict-mcp-config",
        "--allowedTools",
        f"mcp__{MCP_SERVER_NAME}",
    ),
    config={
        "mcpServers": {
            MCP_SERVER_NAME: {
                "type": "http",
                "url": "{mcp_url}",
                "headers": {"Authorization": "Bearer {token}"},
            }
        }
    },
)

# Codex: ``codex exec --json`` prints JSONL events; ``-`` reads the prompt from stdin. It has no
# MCP config file flag: servers are ``-c mcp_servers.<name>.*`` overrides (values are TOML),
# and a streamable-HTTP server's token is read from the variable ``bearer_token_env_var`` names
# (Codex refuses an inline bearer_token). ``developer_instructions`` adds the agent's own
# instructions to Codex's. --skip-git-repo-check: the workdir aegis.yaml names is the owner's
# choice, and need not be a git repository.
CODEX = CliSpec(
    executable="codex",
    args=("exec", "--json", "--skip-git-repo-check"),
    reader=CodexStream,
    model_args=("--model", "{model}"),
    instructions_args=("-c", "developer_instructions={instructions_toml}"),
    mcp_args=(
        "-c",
        f"mcp_servers.{MCP_SERVER_NAME}.url={{mcp_url_toml}}",
        "-c",
        f'mcp_servers.{MCP_SERVER_NAME}.bearer_token_env_var="{TOKEN_ENV}"',
        "-",
    ),
    env={TOKEN_ENV: "{token}"},
)

# OpenCode: ``opencode run --format json`` prints JSON events; a piped stdin is the message.
# OPENCODE_CONFIG names an extra config file, merged over the user's: a remote MCP server is
# {"mcp": {name: {"type": "remote", "url", "headers", "enabled"}}} (the layout of the released
# 1.x config; V2 moves servers under mcp.servers), and "instructions" lists files added to the
# agent's context. Models are named provider/model.
OPENCODE = CliSpec(
    executable="opencode",
    args=("run", "--format", "json"),
    reader=OpencodeStream,
    model_args=("--model", "{model}"),
    config={
        "$schema": "https://opencode.ai/config.json",
        "mcp": {
            MCP_SERVER_NAME: {
                "type": "remote",
                "url": "{mcp_url}",
                "headers": {"Authorization": "Bearer {token}"},
                "enabled": True,
            }
        },
        "instructions": ["{instructions_file}"],
    },
    env={"OPENCODE_CONFIG": "{config_file}"},
)

CLIS: dict[HarnessKind, CliSpec] = {
    HarnessKind.CLAUDE_CODE: CLAUDE_CODE,
    HarnessKind.CODEX: CODEX,
    HarnessKind.OPENCODE: OPENCODE,
}


class CliHarness:
    """Runs one agent's request through a coding CLI; see the module's docstring."""

    def __init__(
        self, spec: CliSpec, *, mcp_port: int | None = None, tokens: AgentTokens | None = None
    ) -> None:
        self.spec = spec
        self.mcp_port = mcp_port
        self.tokens = tokens

    async def run(self, ctx: RunContext) -> str:
        workdir = _workdir(ctx.agent, self.spec)
        executable = _executable(ctx.agent, self.spec)
        tokens, mcp_port = await self._wiring()
        ttl = timedelta(seconds=max(ctx.remaining(), 0)) + TOKEN_SLACK
        token = await tokens.mint_for_run(ctx.agent.slug, ctx.run.id, ttl)
        rundir = Path(tempfile.mkdtemp(prefix=f"aegis-run-{ctx.run.id}-"))
        try:
            argv, env = _command(self.spec, ctx.agent, rundir, mcp_port, token)
            process = CliProcess(self.spec, ctx, token)
            return await process.run([executable, *argv], workdir, env)
        finally:
            shutil.rmtree(rundir, ignore_errors=True)
            try:
                await tokens.revoke_run(ctx.run.id)
            except Exception:  # the token still expires on its own, shortly after the deadline
                logger.exception("run %s: its MCP token could not be revoked", ctx.run.id)

    async def _wiring(self) -> tuple[AgentTokens, int]:
        if self.tokens is not None and self.mcp_port is not None:
            return self.tokens, self.mcp_port
        from jobs.resources import resources

        res = await resources()
        return self.tokens or AgentTokens(res.store), self.mcp_port or res.settings.mcp_port


def _workdir(agent: AgentProfile, spec: CliSpec) -> Path:
    if agent.workdir is None:
        raise HarnessFailed(
            f"{agent.slug} has no workdir in aegis.yaml; a {spec.name} agent needs the "
            "directory it works in."
        )
    if not agent.workdir.is_dir():
        raise HarnessFailed(f"{agent.slug}'s workdir {agent.workdir} is not a directory.")
    return agent.workdir


def _executable(agent: AgentProfile, spec: CliSpec) -> str:
    wanted = str(Path(agent.command).expanduser()) if agent.command else spec.executable
    found = shutil.which(wanted)
    if found is None:
        raise HarnessFailed(
            f"{agent.slug}'s command {wanted!r} was not found or is not executable "
            f"(is {spec.name} installed, and on the worker's PATH?)"
        )
    return found


def _command(
    spec: CliSpec, agent: AgentProfile, rundir: Path, mcp_port: int, token: str
) -> tuple[list[str], dict[str, str]]:
    """The CLI's arguments and environment for this run; writes the files they name."""
    mcp_url = f"http://127.0.0.1:{mcp_port}/mcp"
    values = {
        "model": agent.model,
        "instructions": agent.instructions,
        "instructions_toml": json.dumps(agent.instructions, ensure_ascii=False),
        "instructions_file": str(rundir / "instructions.md"),
        "mcp_url": mcp_url,
        "mcp_url_toml": json.dumps(mcp_url),
        "config_file": str(rundir / "config.json"),
    }
    _write_private(rundir / "instructions.md", agent.instructions)
    if spec.config is not None:
        config = _fill(spec.config, {**values, "token": token})
        _write_private(rundir / "config.json", json.dumps(config, indent=2))
    argv = list(spec.args)
    if agent.model:
        argv += spec.model_args
    if agent.instructions.strip():
        argv += spec.instructions_args
    argv = _fill(argv + list(spec.mcp_args), values)
    if any(token in arg for arg in argv):  # a spec that would show the token to `ps`
        raise HarnessFailed(f"the {spec.name} command line would carry the MCP token; refused")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AEGIS_")}
    env["PWD"] = str(agent.workdir)  # OpenCode takes its project root from PWD before cwd
    env.update(_fill(dict(spec.env), {**values, "token": token}))
    return argv, env


def _fill(template: Any, values: Mapping[str, str]) -> Any:
    """Placeholders replaced in every string of ``template``; the values are inserted as they
    are (braces in an agent's instructions are not placeholders)."""
    if isinstance(template, str):
        return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)
    if isinstance(template, Mapping):
        return {_fill(key, values): _fill(item, values) for key, item in template.items()}
    if isinstance(template, list | tuple):
        return [_fill(item, values) for item in template]
    return template


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)


class CliProcess:
    """One CLI process: started, read, stopped and reaped."""

    def __init__(self, spec: CliSpec, ctx: RunContext, token: str) -> None:
        self.spec = spec
        self.ctx = ctx
        self.token = token
        self.reader = spec.reader()
        self.stdout_bytes = 0
        self.oversized = 0
        self.stderr = bytearray()
        self.stderr_bytes = 0
        self.last_step_at = float("-inf")

    async def run(self, command: list[str], workdir: Path, env: dict[str, str]) -> str:
        try:
            process = await asyncio.create_subprocess_exec(
                *command,
                cwd=workdir,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group, killed as one
            )
        except OSError as exc:
            raise HarnessFailed(
                f"{self.spec.name} could not be started ({type(exc).__name__}: {exc.strerror})"
            ) from None
        pumps = [
            asyncio.create_task(self._feed(process)),
            asyncio.create_task(self._read_stdout(process)),
            asyncio.create_task(self._read_stderr(process)),
        ]
        try:
            await self._wait(process, pumps)
        finally:
            await _kill_group(process, grace=0)  # whatever it left running in its group
            await asyncio.wait(pumps, timeout=DRAIN_GRACE)  # what is left in the pipes
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        return self._outcome(process.returncode)

    async def _wait(self, process: asyncio.subprocess.Process, pumps: list) -> None:
        ceiling = max(self.ctx.remaining(), 0.0)
        try:
            async with asyncio.timeout(ceiling):
                await process.wait()
        except TimeoutError:
            await _kill_group(process, grace=KILL_GRACE)
            # The runner cancels us at the same deadline and calls the run timed out; this
            # ceiling only matters if it cannot, so it leaves the runner a moment to.
            await asyncio.sleep(CEILING_GRACE)
            raise HarnessFailed(
                f"{self.spec.name} was stopped at the run's deadline ({ceiling:.0f}s left)"
            ) from None
        except asyncio.CancelledError:
            await _kill_group(process, grace=KILL_GRACE)
            raise
        # Exited: what it printed last may still be in the pipe (unless a child holds it).
        await asyncio.wait(pumps[1:], timeout=DRAIN_GRACE)

    async def _feed(self, process: asyncio.subprocess.Process) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            process.stdin.write(self.ctx.request.encode("utf-8"))
            await process.stdin.drain()
            process.stdin.close()

    async def _read_stdout(self, process: asyncio.subprocess.Process) -> None:
        async for line in _lines(process.stdout, self):
            if line is None:
                self.oversized += 1
                continue
            for step in self.reader.feed(line):
                await self._progress(step)

    async def _read_stderr(self, process: asyncio.subprocess.Process) -> None:
        while chunk := await process.stderr.read(READ_CHUNK):
            self.stderr_bytes += len(chunk)
            self.stderr += chunk
            del self.stderr[:-STDERR_KEEP_BYTES]

    async def _progress(self, step: str) -> None:
        """A step for the run's message, saved at most every STEP_EVERY seconds."""
        self.ctx.effects["cli_tool_uses"] = self.reader.tool_uses
        moment = asyncio.get_running_loop().time()
        if moment - self.last_step_at < STEP_EVERY:
            return
        self.last_step_at = moment
        step = self._scrub(step)
        try:
            await self.ctx.checkpoint(step)
            await self.ctx.step(step)
        except Exception:  # progress is worth showing, never worth stopping the CLI for
            logger.warning("run %s: progress not saved", self.ctx.run.id, exc_info=True)

    def _outcome(self, returncode: int | None) -> str:
        reader, name = self.reader, self.spec.name
        self.ctx.effects["cli_tool_uses"] = reader.tool_uses
        if returncode != 0:
            why = f"{name} {_exit_words(returncode)}"
            if reader.failure:
                why += f": {reader.failure}"
            raise HarnessFailed(self._scrub(why + self._stderr_words()))
        if self.stdout_bytes == 0:
            raise HarnessFailed(self._scrub(f"{name} printed nothing" + self._stderr_words()))
        if reader.failure:
            raise HarnessFailed(self._scrub(f"{name} reported a failure: {reader.failure}"))
        answer = reader.answer()
        if answer is None:
            raise HarnessFailed(
                f"the output of {name} could not be read: {reader.events} events, "
                f"{reader.malformed + self.oversized} unreadable lines, and no result"
            )
        return self._scrub(_cap(answer))

    def _stderr_words(self) -> str:
        lines = self.stderr.decode("utf-8", errors="replace").strip().splitlines()
        if not lines:
            return ""
        shown = "\n".join(lines[-STDERR_SHOWN_LINES:])
        cut = (
            self.stderr_bytes > len(self.stderr)
            or len(lines) > STDERR_SHOWN_LINES
            or len(shown) > STDERR_SHOWN_CHARS
        )
        shown = shown[-STDERR_SHOWN_CHARS:]
        return f"; the {'end' if cut else 'whole'} of its stderr: {shown}"

    def _scrub(self, text: str) -> str:
        """Whatever the CLI echoed, the token never reaches the chat or a log."""
        return text.replace(self.token, "[token]")


async def _lines(stream: asyncio.StreamReader, process: CliProcess):
    """Lines of ``stream``; None for a line longer than MAX_LINE_BYTES, which is not kept."""
    pending = bytearray()
    dropping = False
    while chunk := await stream.read(READ_CHUNK):
        process.stdout_bytes += len(chunk)
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if dropping:
                dropping = False
                yield None
            else:
                pending += chunk[start:end]
                yield bytes(pending)
            pending.clear()
            start = end + 1
        if not dropping:
            pending += chunk[start:]
            if len(pending) > MAX_LINE_BYTES:
                pending.clear()
                dropping = True
    if dropping:
        yield None
    elif pending:
        yield bytes(pending)


async def _kill_group(process: asyncio.subprocess.Process, *, grace: float) -> None:
    """Stop the CLI and everything it started: SIGTERM to its group, then SIGKILL."""
    try:
        if grace > 0 and process.returncode is None:
            _signal_group(process, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(process.wait()), timeout=grace)
    finally:  # even if cancelled again meanwhile
        _signal_group(process, signal.SIGKILL)  # whatever ignored SIGTERM or outlived the CLI
    await process.wait()  # reaped: no zombie


def _signal_group(process: asyncio.subprocess.Process, signum: int) -> None:
    # The group outlives its leader while any member lives, and its id is not reused until
    # then, so this reaches a CLI's children even after the CLI itself has exited.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _exit_words(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _cap(answer: str) -> str:
    if len(answer) <= RESULT_CHARS:
        return answer
    cut = len(answer) - RESULT_CHARS
    return answer[:RESULT_CHARS] + f"\n… [{cut} more characters cut]"
