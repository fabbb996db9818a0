"""The platform's own tools as one toolbox: each family's functions built over the platform, what
a card says a call would do where its arguments do not show it, and what refuses a call before
any card is asked (arguments a schema cannot judge)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.tools import cli_builtins, conversation, deploy, monitors, peers, records, workdir

if TYPE_CHECKING:
    from bot.actions.call import Explainer, ToolFunction, Vetter
    from bot.core import Platform

FAMILIES = (records, conversation, workdir, deploy, cli_builtins, monitors, peers)


def platform_explainers(platform: Platform) -> dict[str, Explainer]:
    found: dict[str, Explainer] = {}
    for family in FAMILIES:
        if hasattr(family, "explainers"):
            found.update(family.explainers(platform))
    return found


def platform_vetters(platform: Platform) -> dict[str, Vetter]:
    found: dict[str, Vetter] = {}
    for family in FAMILIES:
        if hasattr(family, "vetters"):
            found.update(family.vetters(platform))
    return found


def platform_functions(platform: Platform) -> dict[str, ToolFunction]:
    functions: dict[str, ToolFunction] = {}
    for family in FAMILIES:
        functions.update(family.toolbox(platform))
    return functions
