"""Work in a run's working directory (shell.run, files.send) and the deploy recipes of
aegis.yaml (deploy.run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.actions import ToolFunction
    from bot.platform import Platform

TOOLS: tuple = ()


def toolbox(platform: Platform) -> dict[str, ToolFunction]:
    return {}
