"""How the forum of agents' topics (bot/chat/topics.py) reads in /status."""

from __future__ import annotations

from bot.chat.topics import Forum


def status_line(forum: Forum | None, topics: int) -> str | None:
    """None when no forum was ever set: everything is in the private chat, as always."""
    if forum is None:
        return None
    if forum.on:
        return f"Topics: in {forum.title}, {topics} agent topic(s)"
    return (
        f"Topics: off ({forum.problem}): agents write in the private chat; send /here in "
        "the group to try again"
    )
