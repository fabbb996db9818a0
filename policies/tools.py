"""Tools and agents as data: what each tool does to the world, and who may ask for it.

A tool's effect is what the gate reads: ``read`` runs unattended, ``write`` waits for a tap,
``irreversible`` waits for a tap and a TOTP code. A tool's arguments are checked against its
JSON schema before anything else looks at them. The built-ins are declared here; ``aegis.yaml``
adds the user's own (see bot/config/file.py).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from bot.errors import PolicyConfigError, SchemaRefused


class Effect(enum.StrEnum):
    READ = "read"
    TALK = "talk"  # speaks inside aegis only: asks the owner a question, writes to an agent
    WRITE = "write"
    IRREVERSIBLE = "irreversible"


@dataclass(frozen=True)
class ToolSpec:
    name: str
    effect: Effect
    schema: Mapping[str, Any]
    description: str = ""
    validator: Draft202012Validator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            Draft202012Validator.check_schema(self.schema)
        except SchemaError as exc:
            raise SchemaRefused(self.name, exc.message) from exc
        unresolved = _unresolved_reference(self.schema)
        if unresolved is not None:
            raise SchemaRefused(self.name, f"$ref {unresolved!r} points nowhere in the schema")
        object.__setattr__(self, "validator", Draft202012Validator(self.schema))

    def argument_error(self, args: Any) -> str | None:
        """The first way ``args`` breaks the schema, as a sentence; None when it fits."""
        try:
            error = next(iter(self.validator.iter_errors(args)), None)
        except Exception as exc:  # a schema that cannot be evaluated refuses, never passes
            return f"the schema cannot be evaluated ({type(exc).__name__})"
        if error is None:
            return None
        where = "/".join(str(part) for part in error.absolute_path) or "the arguments"
        return f"{where}: {error.message}"


def _unresolved_reference(schema: Any) -> str | None:
    """The first ``$ref`` that is not a JSON pointer into this very schema and resolving there.

    Remote references are refused too: the gate never fetches anything to decide a call.
    """
    for reference in _references(schema):
        if not reference.startswith("#"):
            return reference
        node: Any = schema
        for token in filter(None, unquote(reference[1:]).split("/")):
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return reference
    return None


def _references(node: Any):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _references(value)
    elif isinstance(node, list):
        for item in node:
            yield from _references(item)


@dataclass(frozen=True)
class AgentSpec:
    """An agent as the gate sees it: its slug, the tools it is granted, and whether it acts
    for a federated peer (everything a peer asks for needs a TOTP code).

    A grant ending in ``.*`` grants every tool under that prefix (``tasks.*``: ``tasks.list``,
    ``tasks.create`` …); granting is not allowing, so each call still goes through the gate.
    """

    slug: str
    tools: frozenset[str]
    name: str = ""
    peer: bool = False

    def grants(self, tool: str) -> bool:
        if tool in self.tools:
            return True
        return any(
            grant.endswith(".*") and tool.startswith(grant[:-1]) and len(tool) > len(grant) - 1
            for grant in self.tools
        )

    def granted_in(self, catalog: Catalog) -> list[str]:
        """The tools this agent may ask for: its plain grants, and every declared tool a
        pattern of it covers."""
        named = {grant for grant in self.tools if not grant.endswith(".*")}
        covered = {name for name in catalog.tools if self.grants(name)}
        return sorted(named | covered)


def object_schema(properties: Mapping[str, Any] | None = None, *required: str) -> dict:
    """The usual argument schema: an object with these properties and nothing else."""
    return {
        "type": "object",
        "properties": dict(properties or {}),
        "required": list(required),
        "additionalProperties": False,
    }


class Catalog:
    """The declared tools and agents; the gate's whole view of the world."""

    def __init__(self, tools: Iterable[ToolSpec] = (), agents: Iterable[AgentSpec] = ()) -> None:
        self.tools: dict[str, ToolSpec] = {}
        self.agents: dict[str, AgentSpec] = {}
        for tool in tools:
            self.add_tool(tool)
        for agent in agents:
            self.add_agent(agent)

    def add_tool(self, tool: ToolSpec) -> None:
        if tool.name in self.tools:
            raise PolicyConfigError(f"the tool {tool.name} is declared twice")
        self.tools[tool.name] = tool

    def add_agent(self, agent: AgentSpec) -> None:
        if agent.slug in self.agents:
            raise PolicyConfigError(f"the agent {agent.slug} is declared twice")
        self.agents[agent.slug] = agent

    def tool(self, name: str) -> ToolSpec | None:
        return self.tools.get(name)

    def agent(self, slug: str) -> AgentSpec | None:
        return self.agents.get(slug)
