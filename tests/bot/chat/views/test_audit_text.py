"""/audit in words (bot/chat/views/audit.py): time first, what happened, whose call and who
decided, then the record's own sentence, shown as written."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.actions.audit import AuditEntry, AuditEvent
from bot.chat.text import plain
from bot.chat.views.audit import WORDS, audit_text
from emulator.formatting import parse_text

AT = datetime(2030, 1, 1, 14, 2, tzinfo=UTC)


def entry(event: AuditEvent, detail: str, **fields) -> AuditEntry:
    values = {"agent": None, "tool": None, "interaction_id": None, "user_id": None, **fields}
    return AuditEntry(id=1, at=AT, event=event, detail=detail, **values)


def test_every_event_has_words():
    assert set(WORDS) == set(AuditEvent)


def test_a_decision_reads_in_words_with_who_decided():
    granted = entry(
        AuditEvent.GRANTED, "card #3: one call", agent="demo", tool="demo.write_file", user_id=7
    )
    text = plain(audit_text([granted], {7: "you"}))
    assert text.splitlines()[2:] == [
        "2030-01-01 14:02 UTC · approved · demo · demo.write_file · by you",
        "card #3: one call",
    ]


def test_what_an_agent_wrote_is_shown_as_written_and_oldest_comes_first():
    newer = entry(AuditEvent.DENIED, "path </b> & <i>", agent="x", user_id=9)
    older = entry(AuditEvent.TAP_REFUSED, "no card #4", user_id=9)
    shown, _ = parse_text(audit_text([newer, older], {}), "HTML")
    assert shown.index("tap refused · by owner 9") < shown.index("refused by the gate")
    assert "path </b> & <i>" in shown


def test_an_empty_trail_says_so():
    assert audit_text([], {}) == "The audit trail is empty so far."


def test_the_latest_decisions_fit_one_message_however_long_their_records():
    from bot.chat.text import MESSAGE_LIMIT
    from handlers.interactions import AUDIT_LINES

    long = entry(AuditEvent.DENIED, "x" * 2000, agent="a" * 40, tool="t" * 60, user_id=123456789)
    shown = plain(audit_text([long] * AUDIT_LINES, {}))
    assert len(shown) <= MESSAGE_LIMIT
    assert "x" * 199 + "…" in shown
