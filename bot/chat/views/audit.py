"""What /audit shows: the gate's latest decisions, oldest first, a decision to a paragraph.

Each reads time first, then what happened in words, whose call, and who decided (you, a paired
owner by the name they paired with, else the account's number); the record's own sentence
follows on its line.
"""

from __future__ import annotations

from bot.actions.audit import AuditEntry, AuditEvent
from bot.chat.text import Html, bold, clip, html, visible
from bot.timeutil import short_time

DETAIL_CHARS = 200  # of each record's sentence: the latest decisions fit one message

# The events in words. An event added later reads as its own name until it is given words here.
WORDS = {
    AuditEvent.ALLOWED: "ran unasked",
    AuditEvent.GATED: "asked you",
    AuditEvent.DENIED: "refused by the gate",
    AuditEvent.WAITING: "still waiting for you",
    AuditEvent.GRANTED: "approved",
    AuditEvent.DECLINED: "denied",
    AuditEvent.USED: "ran, approved",
    AuditEvent.FAILED: "failed",
    AuditEvent.RESOLVED: "answered",
    AuditEvent.EXPIRED: "expired unanswered",
    AuditEvent.CODE_ASKED: "code asked for",
    AuditEvent.CODE_REFUSED: "code refused",
    AuditEvent.TAP_REFUSED: "tap refused",
    AuditEvent.NOTE: "note kept",
    AuditEvent.PEER_REFUSED: "peer refused",
    AuditEvent.PEER_CHANGED: "peer link changed",
}


def audit_text(entries: list[AuditEntry], names: dict[int, str]) -> Html:
    """``entries`` newest first, as the audit returns them; shown oldest first."""
    if not entries:
        return Html("The audit trail is empty so far.")
    decisions = [audit_entry(entry, names) for entry in reversed(entries)]
    return Html("\n\n").join([bold("Latest decisions of the gate, oldest first"), *decisions])


def audit_entry(entry: AuditEntry, names: dict[int, str]) -> Html:
    what = WORDS.get(entry.event, entry.event.value.replace("_", " "))
    head = html("<b>{}</b> · {}", short_time(entry.at), what)
    if entry.agent:
        head += html(" · {}", entry.agent)
    if entry.tool:
        head += html(" · <code>{}</code>", visible(entry.tool))
    if entry.user_id:
        head += html(" · by {}", visible(names.get(entry.user_id) or f"owner {entry.user_id}"))
    return head + "\n" + visible(clip(entry.detail, DETAIL_CHARS))
