"""What a person wrote is shown as written wherever the bot shows it, on SQLite and Postgres:
a task whose title looks like HTML comes back the same in the receipt, the lists, /task, /find,
a run's message and its card, and never as formatting (the chat is written in Telegram's HTML,
bot/chat/text.py, so one unescaped value would be a tag or a refused message)."""

from __future__ import annotations

from tests.helpers.runs import buttons
from tests.helpers.task_chat import say, tap

HOSTILE = "pay <b>rent</b> & <i>fees</i> </pre> &amp; 2<3"


def formatted(message: dict) -> set[str]:
    """The kinds of formatting Telegram applied to the message."""
    return {entity["type"] for entity in message.get("entities") or []}


async def test_a_title_that_looks_like_html_is_shown_as_written_everywhere(stack):
    _, receipt = await say(stack, HOSTILE)
    assert receipt["text"].startswith(f"Captured as task 1: {HOSTILE}")
    assert formatted(receipt) <= {"bold", "bot_command"}  # the bot's own words only
    bold = receipt["text"][: receipt["entities"][0]["length"]]
    assert bold == "Captured as task 1"

    await tap(stack, receipt, "@next")
    for command in ("/next", "/task 1", "/find rent"):
        _, shown = await say(stack, command)
        assert HOSTILE in shown["text"], command
        # Its own bold heading: a view that forgot to escape would be refused by Telegram and
        # sent as written, without any formatting.
        assert "bold" in formatted(shown), command
        assert "italic" not in formatted(shown) and "pre" not in formatted(shown), command

    _, run = await say(stack, f"/run demo {HOSTILE}")
    assert HOSTILE in run["text"] and "bold" in formatted(run)
    card = await _card(stack)
    assert HOSTILE in card["text"] and "Approve" in buttons(card)
    assert "bold" in formatted(card) and "italic" not in formatted(card)


async def _card(stack) -> dict:
    from tests.helpers.stack import eventually

    async def found():
        for message in await stack.bot_messages():
            if (message["text"] or "").startswith("Approval needed"):
                return message
        return None

    return await eventually(found, timeout=20)
