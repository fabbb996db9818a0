"""What the interaction tests (tests/bot/interactions/) ask: an ``Ask`` of any kind, and the
continuation its card resumes when it is settled."""

from __future__ import annotations

from bot.interactions.interaction import Ask, Kind
from tests.helpers.interactions import CHAT

RESUME = {"continuation_actor": "resume", "continuation_kwargs": {"task": 7}}


def ask(kind: Kind, **overrides) -> Ask:
    values = {"kind": kind, "agent": "scribe", "chat_id": CHAT, "prompt": "Which one?"}
    values.update(overrides)
    return Ask(**values)
