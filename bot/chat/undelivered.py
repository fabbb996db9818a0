"""A message that cannot be sent is set aside, and the owner is told so once, in words.

A chat's messages go out in order, so one that fails at every try would hold back every message
queued behind it (issue 21). A delivery sets such a message aside (its row ``failed``, with the
reason) and goes on with the chat; this module does that and queues the one notice about it.

The notice never says what the message said: what made Telegram fail on it may be in its text,
and a notice that failed the same way would help nobody. It is keyed by the failed row, so it is
queued once however many deliveries reach the same end, and a notice that cannot be sent in its
turn is set aside without a notice of its own: nothing about it can loop.
"""

from __future__ import annotations

import logging
import re

from bot.chat.outbox import Outbox
from bot.chat.outgoing import OutboxKind, OutgoingMessage

logger = logging.getLogger(__name__)
NOTICE_KEY = "undelivered:"  # + the failed row's id
# A request the Bot API failed on (a 500) moments ago may go through now, so the row is tried
# again after 1, 2, 4 and 8 seconds (AEGIS_OUTBOX_RETRY_SECONDS is the first wait); a fifth
# failure in a row, some 15 s after the first, says the message itself is the trouble. A bound in
# tries, not in time: a worker that was down in between does not use up the row's chances. 15 s
# is short next to the 90 s and more a chat was measured frozen for (issue 21), and long next to
# a Bot API hiccup.
SERVER_ERRORS_IN_A_ROW = 5
# The count lives in the row's last error, so it survives a worker's death and needs no column
# of its own: any other outcome (a network error, a 429) writes another error and starts it anew.
_SERVER_ERROR = re.compile(r"^HTTP (\d{3}), (\d+) in a row: ")


def server_error(status: int, description: str, count: int) -> str:
    """The row's last error after its ``count``-th server error in a row."""
    return f"HTTP {status}, {count} in a row: {description}"


def server_errors_in_a_row(last_error: str | None) -> int:
    """How many server errors in a row ``last_error`` counts (0: it was something else)."""
    found = _SERVER_ERROR.match(last_error or "")
    return int(found.group(2)) if found else 0


def seconds_before_next_try(count: int, first: float = 1.0) -> float:
    return first * 2.0 ** (count - 1)


def is_notice(message: OutgoingMessage) -> bool:
    return (message.idempotency_key or "").startswith(NOTICE_KEY)


async def set_aside(
    outbox: Outbox, message: OutgoingMessage, reason: str, *, tell_owner: bool = True
) -> bool:
    """Fail ``message`` for good with ``reason`` and queue the notice about it; False when the
    row was no longer this delivery's (another one took it over, and decides)."""
    if not await outbox.deliveries.mark_failed(message.id, reason, held=message):
        return False
    logger.warning("outbox %s set aside: %s", message.id, reason)
    if tell_owner and _worth_a_notice(message):
        await outbox.send(
            message.chat_id,
            notice_text(message, reason),
            key=f"{NOTICE_KEY}{message.id}",
            reply_to=message.reply_to_message_id,
        )
    return True


def _worth_a_notice(message: OutgoingMessage) -> bool:
    """Not about a notice (it could loop), nor about an edit: a card that kept its old text is
    still there to read, and an edit refused because its message was deleted is routine."""
    return not is_notice(message) and message.kind is not OutboxKind.EDIT


def notice_text(message: OutgoingMessage, reason: str) -> str:
    what = "A file" if message.kind is OutboxKind.FILE else "A message"
    return (
        f"⚠️ {what} I had for you could not be sent, so I have set it aside "
        f"(outbox #{message.id}): {reason}. What I had queued after it is on its way."
    )
