"""The coding-CLI harness: Claude Code, Codex or OpenCode started headless in the agent's workdir.

One harness, told by a :class:`CliSpec` how each vendor's CLI is driven (data, never a branch on
a name; the specs and the vendors' reasons are in jobs/harnesses/cli_specs.py). A run:

1. mints a bearer token for this run (bot/agents/tokens.py) and writes what the CLI reads into
   a private directory of its own (0700, files 0600, removed at the end): the token reaches
   aegis's MCP server as ``Authorization: Bearer …`` through a config file or the CLI's
   environment, never its command line, a log line or an error message;
2. starts the CLI in ``workdir`` in a session (process group) of its own, the request on its
   stdin, the agent's instructions and model on its command line or in its config;
3. reads its JSON stream line by line (jobs/harnesses/cli_streams.py) into progress steps and
   a result, keeping a bounded amount of stdout and stderr in memory;
4. stops it at the run's deadline or on cancellation by killing the whole process group, and
   always reaps it, so no child outlives the run (jobs/harnesses/cli_process.py); the token is
   revoked when the run's stretch ends, however it ends.

A CLI's own built-in tools never act on their own (design.md: read-only tools may run, anything
that changes something goes through aegis's gate). Each CLI is started with only its reading
built-ins on, by an allow list where the CLI has one (a built-in a later release adds stays off
until it is listed), in the way its vendor documents as winning over the owner's own settings
(cli_specs.py): it may read its workdir and call aegis's MCP tools, whose calls the gate
decides; it cannot write a file, run a shell command that writes, or fetch a URL by itself. A
project config that could widen this and that no flag can beat is refused.

A CLI run is not resumed mid-way: a run taken over from a dead worker starts the CLI again.
A run that asked aegis to watch a process for it (``monitors.watch_process``) ends its turn and
is parked; when the process ends, the CLI's own session is resumed (each spec's
``resume_args``) with the outcome as its next message.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.agents.ledger import Ledger
from bot.agents.profiles import AgentProfile
from bot.agents.tokens import AgentTokens
from bot.errors import HarnessFailed
from bot.tools.declarations import MCP_SERVER_NAME
from bot.tools.offer import wire_name
from jobs.harness import RunContext
from jobs.harnesses.cli_process import CliProcess
from jobs.harnesses.cli_specs import CliSpec
from jobs.harnesses.cli_streams import SESSION_ID
from policies.tools import Catalog, Effect

logger = logging.getLogger(__name__)

TOKEN_SLACK = timedelta(minutes=1)  # a run's token outlives its deadline by this much
PLACEHOLDER = re.compile(r"\{(\w+)\}")
CLI_SESSION = "cli_session"  # state: the CLI's own session id, to resume it after a watch


class CliHarness:
    """Runs one agent's request through a coding CLI; see the module's docstring."""

    def __init__(self, spec: CliSpec, *, wiring: Wiring | None = None) -> None:
        self.spec = spec
        self.wiring = wiring

    async def run(self, ctx: RunContext) -> str:
        workdir = _workdir(ctx.agent, self.spec)
        executable = _executable(ctx.agent, self.spec)
        if self.spec.preflight is not None:
            self.spec.preflight(workdir)
        wiring = self.wiring or await Wiring.of_this_worker()
        _keeps_out_of(wiring.private, ctx.agent, workdir)
        ttl = timedelta(seconds=max(ctx.remaining(), 0)) + TOKEN_SLACK
        token = await wiring.tokens.mint_for_run(ctx.agent.slug, ctx.run.id, ttl)
        session, prompt = _resuming(ctx)
        reads = _reads(self.spec, wiring.catalog)
        process = CliProcess(self.spec.name, self.spec.reader(), ctx, token, prompt, reads=reads)
        started = time.monotonic()
        rundir = None
        try:
            rundir = Path(tempfile.mkdtemp(prefix=f"aegis-run-{ctx.run.id}-"))
            argv, env = _command(
                self.spec,
                ctx.agent,
                rundir,
                wiring.mcp_port,
                token,
                private=wiring.private,
                session=session,
            )
            return await process.run([executable, *argv], workdir, env)
        finally:
            if process.reader.session is not None:
                ctx.state[CLI_SESSION] = process.reader.session
            if rundir is not None:
                shutil.rmtree(rundir, ignore_errors=True)
            await _after(ctx, wiring, process, time.monotonic() - started)


def _resuming(ctx: RunContext) -> tuple[str | None, str]:
    """The session to resume and what the CLI reads on stdin. Back from a process it asked
    aegis to watch, the CLI's own session goes on with the outcome as the next message; when
    its stream never named a session, a new one starts with the request and the outcome."""
    outcome = ctx.resumed_with
    if not outcome:
        return None, ctx.request
    session = ctx.state.get(CLI_SESSION)
    if isinstance(session, str) and SESSION_ID.match(session):
        return session, outcome
    return None, f"{ctx.request}\n\n{outcome}"


@dataclass(frozen=True)
class Wiring:
    """What a CLI run needs of aegis: where its MCP server listens, the token store, and the
    ledger its model use is written to."""

    mcp_port: int
    tokens: AgentTokens
    ledger: Ledger
    private: tuple[Path, ...] = ()  # aegis's data dir and .env: no agent reads there
    catalog: Catalog | None = None  # the declared tools, for which of aegis's only read

    @classmethod
    async def of_this_worker(cls) -> Wiring:
        from jobs.worker.resources import resources

        platform = (await resources()).platform
        settings = platform.settings
        return cls(
            settings.mcp_port,
            platform.tokens,
            platform.ledger,
            settings.private_paths,
            platform.catalog,
        )


# How each CLI's stream names a tool of aegis's MCP server: Claude Code, Codex, OpenCode.
AEGIS_TOOL_PREFIXES = (f"mcp__{MCP_SERVER_NAME}__", f"{MCP_SERVER_NAME}.", f"{MCP_SERVER_NAME}_")


def _reads(spec: CliSpec, catalog: Catalog | None) -> Callable[[str], bool]:
    """Whether a call, as ``spec``'s stream names it, only reads: one of the CLI's reading
    built-ins, or one of aegis's tools declared a read. Anything else is a change (fail closed:
    a built-in no list names, a tool aegis does not know)."""
    effects = {}
    for tool in catalog.tools.values() if catalog is not None else ():
        effects[wire_name(tool.name).replace("-", "_")] = tool.effect

    def reads(tool: str) -> bool:
        if tool in spec.reading_tools:
            return True
        for prefix in AEGIS_TOOL_PREFIXES:
            if tool.startswith(prefix):
                wire = tool.removeprefix(prefix).replace("-", "_")  # Codex's names: no dashes
                return effects.get(wire) is Effect.READ
        return False

    return reads


async def _after(ctx: RunContext, wiring: Wiring, process: CliProcess, seconds: float) -> None:
    """However the stretch ended: its token revoked, its model use in the ledger (one row for
    the whole CLI run, with the tokens its stream reported)."""
    try:
        await wiring.tokens.revoke_run(ctx.run.id)
    except Exception:  # the token still expires on its own, shortly after the deadline
        logger.exception("run %s: its MCP token could not be revoked", ctx.run.id)
    reader, status = process.reader, process.status
    if status == "cancelled" and ctx.remaining() <= 0:
        status = "timeout"  # the runner cancels at the deadline too
    try:
        await wiring.ledger.record(
            provider=ctx.agent.harness.value,
            model=ctx.agent.model or reader.model or "default",
            status=status,
            latency_ms=round(seconds * 1000),
            agent=ctx.agent.slug,
            run_id=ctx.run.id,
            prompt_tokens=reader.input_tokens,
            completion_tokens=reader.output_tokens,
        )
    except Exception:
        logger.exception("run %s: its model use could not be recorded", ctx.run.id)


def _workdir(agent: AgentProfile, spec: CliSpec) -> Path:
    if agent.workdir is None:
        raise HarnessFailed(
            f"{agent.slug} has no workdir in aegis.yaml; a {spec.name} agent needs the "
            "directory it works in."
        )
    if not agent.workdir.is_dir():
        raise HarnessFailed(f"{agent.slug}'s workdir {agent.workdir} is not a directory.")
    return agent.workdir


def _keeps_out_of(private: Sequence[Path], agent: AgentProfile, workdir: Path) -> None:
    """A CLI reads its workdir without asking (OpenCode's grep and Codex's shell among others,
    which no rule keeps from a folder inside it), so a workdir that holds aegis's secrets
    (``private``: its data dir, its .env file) is refused before anything starts."""
    for path in private:
        if path.is_relative_to(workdir.resolve()):
            raise HarnessFailed(
                f"aegis's {_what(path)} {path} lies inside {agent.slug}'s workdir {workdir}, "
                "where the CLI reads without asking; move it out (aegis doctor checks)"
            )


def _what(path: Path) -> str:
    return "settings file" if path.is_file() else "data dir"


def executable_of(agent: AgentProfile, spec: CliSpec) -> tuple[str, str | None]:
    """The command an agent's CLI is started with (its ``command``, else the CLI's name), and
    where it was found on PATH (None: nowhere)."""
    wanted = str(Path(agent.command).expanduser()) if agent.command else spec.executable
    return wanted, shutil.which(wanted)


def _executable(agent: AgentProfile, spec: CliSpec) -> str:
    wanted, found = executable_of(agent, spec)
    if found is None:
        raise HarnessFailed(
            f"{agent.slug}'s command {wanted!r} was not found or is not executable "
            f"(is {spec.name} installed, and on the worker's PATH?)"
        )
    return found


def _command(
    spec: CliSpec,
    agent: AgentProfile,
    rundir: Path,
    mcp_port: int,
    token: str,
    *,
    private: Sequence[Path] = (),
    session: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The CLI's arguments and environment for this run; writes the files they name.
    ``private``: what the CLI's own reading tools must not enter (aegis's data dir, .env);
    ``session``: the CLI's session to resume rather than start a new one."""
    mcp_url = f"http://127.0.0.1:{mcp_port}/mcp"
    values = {
        "profile": f"aegis-{secrets.token_hex(6)}",  # new for each run: no config adds to it
        "model": agent.model,
        "instructions": agent.instructions,
        "instructions_toml": _toml_string(agent.instructions),
        "instructions_file": str(rundir / "instructions.md"),
        "mcp_url": mcp_url,
        "mcp_url_toml": _toml_string(mcp_url),
        "config_file": str(rundir / "config.json"),
        "session": session or "",
    }
    extra = spec.config_args(agent.workdir) if spec.config_args is not None else []
    if private:
        entries = ", ".join(f'{_toml_string(str(path))} = "none"' for path in private)
        values["private_toml"] = "{" + entries + "}"
        if any("{private_rules}" in arg for arg in spec.private_args):
            values["private_rules"] = ",".join(_claude_private_rules(private))
    _write_private(rundir / "instructions.md", agent.instructions)
    if spec.config is not None:
        config = _fill(spec.config, {**values, "token": token})
        _write_private(rundir / "config.json", json.dumps(config, indent=2))
    argv = list(spec.args)
    if agent.model:
        argv += spec.model_args
    if agent.instructions.strip():
        argv += spec.instructions_args
    argv += spec.mcp_args
    if private:
        argv += spec.private_args
    argv += extra
    argv += spec.resume_args if session else spec.prompt_args
    argv = _fill(argv, values)
    if any(token in arg for arg in argv):  # a spec that would show the token to `ps`
        raise HarnessFailed(f"the {spec.name} command line would carry the MCP token; refused")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AEGIS_")}
    env["PWD"] = str(agent.workdir)  # OpenCode takes its project root from PWD before cwd
    env.update(_fill(dict(spec.env), {**values, "token": token}))
    return argv, env


def _claude_private_rules(private: Sequence[Path]) -> list[str]:
    """Claude Code's deny rules for reading what is ``private`` (``//`` starts an absolute path
    in its permission rules; a Read rule also governs Grep and Glob). Its rule list is split at
    commas and spaces, and its rules take wildcards, so a path holding one cannot be named:
    refused."""
    rules = []
    for path in private:
        if any(mark in str(path) for mark in ", ()*?[]{}!\\"):
            raise HarnessFailed(
                f"aegis's {_what(path)} {path} holds a comma, a space, a bracket or a wildcard, "
                "so Claude Code cannot be told to keep out of it; move it"
            )
        tail = "" if path.is_file() else "/**"
        rules.append(f"Read(//{str(path).lstrip('/')}{tail})")
    return rules


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


def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but TOML also wants DEL escaped."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)
