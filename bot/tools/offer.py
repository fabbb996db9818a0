"""The tools an agent is offered, under names every client accepts.

A model's function names and an MCP client's tool names allow letters, digits, ``_`` and ``-``
(Claude's API refuses a dot), so each tool the agent is granted is offered under a wire name,
one to one: the http harness and the MCP server both offer tools this way, and both map a
wire name back to the tool it stands for before the gate sees it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bot.actions.call import CallOutcome, CallStatus
from bot.errors import NameClash
from policies.tools import Catalog, Effect

WIRE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")  # what every client accepts as a name
PLAIN_NAME = re.compile(r"^[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*\Z")
ANY_OBJECT = {"type": "object"}
RESULT_CAP = 16_000  # characters of one tool result the model reads


def wire_name(tool: str) -> str:
    """The name ``tool`` is offered under, one to one.

    A plain dotted name reads the same with dashes (``demo.read_clock`` is
    ``demo-read_clock``); such a name never holds two dashes in a row. Any other name (a dash,
    a space, too long) becomes ``t--<its letters>-<hash>``, which does, so the two kinds never
    meet; the tool's description carries its real name.
    """
    if PLAIN_NAME.match(tool) and len(tool) <= 64:
        return tool.replace(".", "-")
    letters = re.sub(r"[^A-Za-z0-9_]+", "_", tool)[:30]
    return f"t--{letters}-{hashlib.sha256(tool.encode()).hexdigest()[:24]}"


@dataclass(frozen=True)
class OfferedTool:
    wire: str
    name: str
    description: str
    schema: dict[str, Any]
    unattended: bool  # read and talk run at once; everything else waits for the owner
    reads_only: bool  # changes nothing (what MCP's readOnlyHint promises)


def offered(tools: Iterable[str], catalog: Catalog) -> list[OfferedTool]:
    """``tools`` as offered: each under its wire name, with its schema and what it does.
    Raises NameClash rather than guess which of two tools a name means."""
    result: list[OfferedTool] = []
    by_wire: dict[str, str] = {}
    for tool in sorted(tools):
        wire = wire_name(tool)
        if by_wire.setdefault(wire, tool) != tool:
            raise NameClash(f"{tool} and {by_wire[wire]} cannot be told apart by name")
        spec = catalog.tool(tool)
        about = spec.description if spec and spec.description else tool
        if wire != tool:
            about = f"{tool}: {about}"
        unattended = spec is not None and spec.effect in (Effect.READ, Effect.TALK)
        if not unattended:
            about += " (each call waits for the owner's approval)"
        schema = dict(spec.schema) if spec else dict(ANY_OBJECT)
        reads_only = spec is not None and spec.effect is Effect.READ
        result.append(OfferedTool(wire, tool, about, schema, unattended, reads_only))
    return result


def tool_text(outcome: CallOutcome, limit: int = RESULT_CAP) -> str:
    """What the model reads of a call's outcome: the result itself, or why there is none."""
    if outcome.status is CallStatus.RAN:
        result = outcome.result
        text = (
            result
            if isinstance(result, str)
            else json.dumps(result, default=str, ensure_ascii=False)
        )
        return capped(text, limit)
    if outcome.status is CallStatus.DENIED:
        return capped(f"Refused: {outcome.reason}. Nothing was done.", limit)
    if outcome.status is CallStatus.GATED:
        return capped(outcome.reason, limit)
    return capped(f"Failed: {outcome.reason}", limit)


def capped(text: str, limit: int = RESULT_CAP) -> str:
    """Design rule 7: what survives the cap is the payload itself, with a note of the cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[… {len(text) - limit:,} more characters cut]"
