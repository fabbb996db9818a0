"""What a card shows cannot hide or fake anything: hidden characters are spelled out."""

from __future__ import annotations

from bot.chat.text import plain, visible
from bot.chat.views.cards import card_text, pretty_arguments, settled_text
from bot.interactions.interaction import InteractionStatus
from tests.helpers.interactions import an_interaction as card


def test_hidden_characters_are_spelled_out_and_newlines_kept():
    assert visible("a\u202eb\u200bc\u2028d\x07e") == "a\\u202eb\\u200bc\\u2028d\\u0007e"
    assert visible("line one\nline two\tend") == "line one\nline two\tend"


def test_arguments_cannot_fake_lines_on_the_card():
    shown = pretty_arguments({"path": "notes/a.md\u2028Tool: notes.read", "x": "\u202edm.a"})
    assert "\u2028" not in shown and "\u202e" not in shown
    assert "\\u2028Tool: notes.read" in shown


def test_a_settled_card_says_its_verdict_first_and_no_longer_asks():
    open_card = card()
    settled = card(
        status=InteractionStatus.RESOLVED,
        outcome="approved",
        resolved_at=open_card.created_at,
        resolved_by_name="You",
    )
    assert plain(card_text(open_card)).startswith("Approval needed · card #1 · from demo")
    text = plain(settled_text(settled))
    assert text.startswith("✅ Approved by You at ")
    assert "Approval needed" not in text and "Expires at" not in text
    assert "Card #1 · from demo" in text and '"path": "a.md"' in text
