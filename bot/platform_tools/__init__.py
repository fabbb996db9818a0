"""The platform's own tools, as agents reach them (over MCP, or from a run's harness).

Each module declares its tools (``TOOLS``: name, effect, argument schema, description) and
builds their functions over the platform (``toolbox(platform)``); every call comes through the
gate (bot/actions.py), which knows nothing of what a tool does beyond its declared effect.
A tool reads who asks from its ``Caller``, never from its arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.platform_tools import cli_builtins, conversation, deploy, records, workdir

if TYPE_CHECKING:
    from bot.actions import Explainer, ToolFunction
    from bot.platform import Platform

MODULES = (records, conversation, workdir, deploy, cli_builtins)
TOOLS = tuple(tool for module in MODULES for tool in module.TOOLS)


def explainers(platform: Platform) -> dict[str, Explainer]:
    """What a card says a call would do, for the tools whose arguments do not show it."""
    found: dict[str, Explainer] = {}
    for module in MODULES:
        if hasattr(module, "explainers"):
            found.update(module.explainers(platform))
    return found


def toolbox(platform: Platform) -> dict[str, ToolFunction]:
    functions: dict[str, ToolFunction] = {}
    for module in MODULES:
        functions.update(module.toolbox(platform))
    return functions
