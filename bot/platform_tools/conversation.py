"""Asking the owner and talking to other agents (owner.ask, owner.answer, messages.send,
messages.read)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.actions import ToolFunction
    from bot.platform import Platform

TOOLS: tuple = ()


def toolbox(platform: Platform) -> dict[str, ToolFunction]:
    return {}
