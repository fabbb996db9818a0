"""The built-in demo agent: one read, one write and one irreversible action, so a newcomer sees
the gate at work with no setup (``/demo``).

Its tools are real and harmless: they read the clock, write a small file and delete it, all
inside ``<data dir>/demo``; the file name is held to a plain name by the argument schema, so no
argument can reach outside that folder.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.actions.call import Caller
from bot.agents.profiles import AgentProfile, HarnessKind, ScriptStep
from bot.timeutil import now
from policies.tools import AgentSpec, Effect, ToolSpec, object_schema

AGENT = "demo"
# "\\Z", not "$": Python's re (which jsonschema uses) lets "$" match before a final newline.
FILE_NAME = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,39}\\Z"}

TOOLS = (
    ToolSpec("demo.read_clock", Effect.READ, object_schema(), "Tell the time on the server."),
    ToolSpec(
        "demo.write_file",
        Effect.WRITE,
        object_schema(
            {"name": FILE_NAME, "text": {"type": "string", "maxLength": 10_000}}, "name", "text"
        ),
        "Write a small text file in the demo folder.",
    ),
    ToolSpec(
        "demo.delete_file",
        Effect.IRREVERSIBLE,
        object_schema({"name": FILE_NAME}, "name"),
        "Delete a file from the demo folder.",
    ),
)
AGENTS = (AgentSpec(AGENT, frozenset(tool.name for tool in TOOLS), name="Demo agent"),)
# ``/run demo <words>``: a script agent that reads the clock, then asks to write your words to a
# file of the run's own (a card; the run parks and continues when you tap).
PROFILES = (
    AgentProfile(
        AGENT,
        "Demo agent",
        HarnessKind.SCRIPT,
        tags=frozenset({"demo"}),
        instructions="Show how a run reads, asks and continues.",
        tools=AGENTS[0].tools,
        deadline_seconds=3600,
        steps=(
            ScriptStep(say="Reading the clock first (a read: no card)."),
            ScriptStep(call="demo.read_clock"),
            ScriptStep(
                call="demo.write_file", args={"name": "run-{run}.txt", "text": "{request}\n"}
            ),
            ScriptStep(say="Wrote your words to run-{run}.txt in the demo folder."),
        ),
    ),
)


@dataclass(frozen=True)
class DemoStep:
    tool: str
    args: dict[str, Any]
    what: str


def steps(run: str) -> tuple[DemoStep, ...]:
    """The demo's three steps. Each run has a file of its own, so two runs at once ask for
    different calls, each with its own card (identical calls would share one card)."""
    name = f"hello-{run}.txt"[-40:].lstrip("-.") or "hello.txt"
    return (
        DemoStep("demo.read_clock", {}, "read the server clock (a read: runs without asking)"),
        DemoStep(
            "demo.write_file",
            {"name": name, "text": "Hello from the aegis demo agent.\n"},
            f"write {name} (a write: waits for your tap)",
        ),
        DemoStep(
            "demo.delete_file",
            {"name": name},
            f"delete {name} (irreversible: waits for your tap and a code)",
        ),
    )


def toolbox(data_dir: Path) -> dict:
    folder = data_dir / "demo"

    async def read_clock(args: dict, caller: Caller) -> str:
        return f"the server clock says {now().isoformat(timespec='seconds')}"

    async def write_file(args: dict, caller: Caller) -> str:
        def write() -> None:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / args["name"]).write_text(args["text"])

        await asyncio.to_thread(write)
        return f"wrote {len(args['text'])} characters to {args['name']}"

    async def delete_file(args: dict, caller: Caller) -> str:
        path = folder / args["name"]
        existed = await asyncio.to_thread(path.exists)
        await asyncio.to_thread(path.unlink, missing_ok=True)
        return f"deleted {args['name']}" if existed else f"{args['name']} was already gone"

    return {
        "demo.read_clock": read_clock,
        "demo.write_file": write_file,
        "demo.delete_file": delete_file,
    }
