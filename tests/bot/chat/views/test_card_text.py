"""What a card shows cannot hide or fake anything: hidden characters are spelled out."""

from __future__ import annotations

from bot.chat.text import visible
from bot.chat.views.cards import pretty_arguments


def test_hidden_characters_are_spelled_out_and_newlines_kept():
    assert visible("a\u202eb\u200bc\u2028d\x07e") == "a\\u202eb\\u200bc\\u2028d\\u0007e"
    assert visible("line one\nline two\tend") == "line one\nline two\tend"


def test_arguments_cannot_fake_lines_on_the_card():
    shown = pretty_arguments({"path": "notes/a.md\u2028Tool: notes.read", "x": "\u202edm.a"})
    assert "\u2028" not in shown and "\u202e" not in shown
    assert "\\u2028Tool: notes.read" in shown
