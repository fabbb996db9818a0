"""What a card shows cannot hide or fake anything: hidden characters are spelled out."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.chat.text import visible
from bot.chat.views.cards import card_text, pretty_arguments, settled_text
from bot.interactions.interaction import Interaction, InteractionStatus, Kind, TimeoutPolicy


def test_hidden_characters_are_spelled_out_and_newlines_kept():
    assert visible("a\u202eb\u200bc\u2028d\x07e") == "a\\u202eb\\u200bc\\u2028d\\u0007e"
    assert visible("line one\nline two\tend") == "line one\nline two\tend"


def test_arguments_cannot_fake_lines_on_the_card():
    shown = pretty_arguments({"path": "notes/a.md\u2028Tool: notes.read", "x": "\u202edm.a"})
    assert "\u2028" not in shown and "\u202e" not in shown
    assert "\\u2028Tool: notes.read" in shown


def card(**overrides) -> Interaction:
    moment = datetime(2030, 1, 1, 21, 59, tzinfo=UTC)
    values = {
        "id": 1,
        "kind": Kind.APPROVAL,
        "agent": "demo",
        "chat_id": 7,
        "prompt": "demo wants to run 'demo.write_file': it changes something.",
        "options": (),
        "tool": "demo.write_file",
        "args": {"path": "a.md"},
        "args_hash": "h",
        "step_up": False,
        "status": InteractionStatus.PENDING,
        "outcome": None,
        "answer": None,
        "timeout_policy": TimeoutPolicy.ARCHIVE,
        "expires_at": moment,
        "created_at": moment,
        "code_from": None,
        "resolved_at": None,
        "resolved_by": None,
        "resolved_by_name": None,
        "continuation_actor": None,
        "continuation_kwargs": {},
    }
    return Interaction(**{**values, **overrides})


def test_a_settled_card_says_its_verdict_first_and_no_longer_asks():
    open_card = card()
    settled = card(
        status=InteractionStatus.RESOLVED,
        outcome="approved",
        resolved_at=open_card.created_at,
        resolved_by_name="You",
    )
    assert card_text(open_card).startswith("Approval needed · card #1 · from demo")
    text = settled_text(settled)
    assert text.startswith("✅ Approved by You at ")
    assert "Approval needed" not in text and "Expires at" not in text
    assert "Card #1 · from demo" in text and '"path": "a.md"' in text
