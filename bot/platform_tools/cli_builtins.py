"""A coding CLI's own built-in tools, as the gate sees them (``cli.<Name>``).

Claude Code asks aegis's ``permission_prompt`` tool before it uses a built-in that is neither
allowed nor refused on its command line; the gate then decides ``cli.<Name>`` like any call.
Only the built-ins that read are declared, so they run unattended; any other (Bash, Edit,
Write, WebFetch, one added in a later release …) is undeclared, so it waits for a tap and a
code. When the gate lets one through, nothing runs here: the answer is the CLI's permission to
run it itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policies.tools import Effect, ToolSpec

if TYPE_CHECKING:
    from bot.actions import Caller, ToolFunction
    from bot.platform import Platform

FAMILY = "cli.*"
PROMPT_TOOL = "permission_prompt"  # the MCP tool Claude Code asks (mcp__aegis__permission_prompt)
READING = {
    "Read": "Read a file.",
    "Grep": "Search file contents.",
    "Glob": "Find files by name pattern.",
    "LS": "List a directory.",
    "NotebookRead": "Read a Jupyter notebook.",
}
ANY_INPUT = {"type": "object"}
TOOLS = tuple(
    ToolSpec(f"cli.{name}", Effect.READ, ANY_INPUT, f"The CLI's own {name}: {about}")
    for name, about in READING.items()
)


def toolbox(platform: Platform) -> dict[str, ToolFunction]:
    async def permitted(args: dict, caller: Caller) -> str:
        return "permitted: the CLI runs it itself"

    return {FAMILY: permitted}
