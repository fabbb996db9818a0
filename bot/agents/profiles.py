"""Agents as data: what ``aegis.yaml`` says each agent is and how it runs.

The gate sees an agent as an :class:`~policies.tools.AgentSpec` (its slug and granted tools);
everything else a run needs lives here: its harness, model and providers, its own instructions,
its deadline and working directory, what it does with an assigned task. Nothing in the code
branches on an agent's name: two agents with the same profile behave the same.

    agents:
      scout:
        name: Scout
        tags: [research]                # capabilities other features resolve to this agent
        harness: http                   # script | http | claude-code | codex | opencode
        model: small-model
        providers:                      # http: tried in order; a failure falls to the next
          - {url: "http://127.0.0.1:9000/v1", model: small-model, key_env: MODEL_KEY}
        instructions: You read links and summarise them.   # or instructions_file: scout.md
        tools: [demo.read_clock]
        deadline: 10m                   # a whole run, read from the clock at each check
        workdir: ~/src/site             # CLIs start here
        expensive: false                # the assigned-task sweep caps expensive runs
        budget_tokens: 200000           # rolling 24 hours; spent, new runs are refused
        steps:                          # script harness: deterministic steps
          - say: Looking at the clock
          - call: demo.read_clock
            args: {}
        tasks:                          # what to do with a task assigned to it, by origin
          - when: {origin: [forward, channel], labels: [read]}
            do: "Summarise this for me: {text}"
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_DEADLINE_SECONDS = 600


class HarnessKind(enum.StrEnum):
    SCRIPT = "script"
    HTTP = "http"
    CLAUDE_CODE = "claude-code"
    CODEX = "codex"
    OPENCODE = "opencode"

    @property
    def is_cli(self) -> bool:
        return self in CLI_COMMANDS

    @property
    def default_command(self) -> str | None:
        """The vendor CLI's executable, looked up on PATH unless the agent names ``command``."""
        return CLI_COMMANDS.get(self)


CLI_COMMANDS = {
    HarnessKind.CLAUDE_CODE: "claude",
    HarnessKind.CODEX: "codex",
    HarnessKind.OPENCODE: "opencode",
}


@dataclass(frozen=True)
class Provider:
    """One OpenAI-compatible endpoint of an http agent's fallback chain."""

    url: str  # the base URL; ``/chat/completions`` is appended
    model: str
    key_env: str | None = None  # the environment variable holding the API key, never the key
    name: str = ""  # how the ledger names it; default: the URL's host and port


@dataclass(frozen=True)
class ScriptStep:
    """One step of a script agent: say something, call a tool, or wait."""

    say: str | None = None
    call: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    sleep: float | None = None

    @property
    def what(self) -> str:
        if self.call is not None:
            return f"calling {self.call}"
        if self.sleep is not None:
            return f"waiting {self.sleep:g}s"
        return "writing to you"


@dataclass(frozen=True)
class TaskHandler:
    """What an agent does with an assigned task, chosen by where the task came from."""

    origins: tuple[str, ...]  # origin kinds (forward, channel, message …); empty: any
    labels: tuple[str, ...]  # every one must be on the task; empty: any
    request: str  # a template: {title}, {text}, {link}, {labels}, {id}

    def matches(self, origin_kind: str, labels: list[str]) -> bool:
        if self.origins and origin_kind not in self.origins:
            return False
        return all(label in labels for label in self.labels)


@dataclass(frozen=True)
class AgentProfile:
    slug: str
    name: str
    harness: HarnessKind | None = None  # None: the agent is only a gate identity, never run
    tags: frozenset[str] = frozenset()
    model: str = ""
    providers: tuple[Provider, ...] = ()
    instructions: str = ""
    tools: frozenset[str] = frozenset()
    deadline_seconds: int = DEFAULT_DEADLINE_SECONDS
    workdir: Path | None = None
    command: str | None = None  # a CLI harness's executable; default: the CLI's own name
    expensive: bool = False
    budget_tokens: int | None = None
    steps: tuple[ScriptStep, ...] = ()
    task_handlers: tuple[TaskHandler, ...] = ()

    @property
    def runnable(self) -> bool:
        return self.harness is not None

    def handler_for(self, origin_kind: str, labels: list[str]) -> TaskHandler | None:
        return next((h for h in self.task_handlers if h.matches(origin_kind, labels)), None)


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule the file declares: run ``agent`` (or whoever holds ``capability``) every
    ``interval_seconds``, or at the times of ``cron`` in the owner's zone, with ``request``."""

    name: str
    interval_seconds: int  # 0 when it runs at times of day
    request: str
    agent: str | None = None
    capability: str | None = None
    enabled: bool = True
    cron: str | None = None  # ``at:``/``days:`` are written as cron too


def with_tag(agents: dict[str, AgentProfile], tag: str) -> AgentProfile | None:
    """Capability routing: the first runnable agent (by slug) holding ``tag``."""
    for slug in sorted(agents):
        agent = agents[slug]
        if tag in agent.tags and agent.runnable:
            return agent
    return None
