"""The outbox's hot statements, built once, and the raw-SQL read that mirrors one of them.

A statement built anew for each call costs more to build and to look up in SQLAlchemy's cache of
compiled SQL than SQLite needs to run it, and a delivery runs these with the file's write lock
held. ``OLDEST_IN_CHAT_SQL`` says what ``next_in_chat_of`` picks, for Store.read_now (on SQLite
only: elsewhere the claim itself finds nothing to take).
"""

from __future__ import annotations

from sqlalchemy import and_, bindparam, func, literal_column, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from bot.chat.outgoing import OutboxStatus, OutgoingMessage
from bot.store.tables import outbox

# The condition ix_outbox_unsent is built on, word for word: SQLite uses a partial index only for
# a query that repeats its condition, and a bound parameter in its place would not match. A query
# with it reads the rows not yet sent (owed or failed), never every message ever sent.
UNSENT = outbox.c.status != literal_column("'sent'")

# The chat's oldest undelivered row, for Store.read_now: what next_in_chat_of picks.
OLDEST_IN_CHAT_SQL = (
    "SELECT status, lease_until FROM outbox WHERE id = (SELECT min(id) FROM outbox"
    " WHERE chat_id = (SELECT chat_id FROM outbox WHERE id = ?)"
    " AND status IN ('pending', 'sending'))"
)


def still_held(held: OutgoingMessage | None) -> tuple:
    if held is None:
        return ()
    return (outbox.c.status == OutboxStatus.SENDING, outbox.c.lease_until == held.lease_until)


def next_in_chat_of(message_id: int, moment):
    """The chat's oldest undelivered row, which ``_claim`` takes only if it is claimable now.

    Never a younger row while an older one waits: not while it is being sent (a live lease),
    and not while it is held back after a rate limit or a 429, or order would be lost.
    """
    chat = select(outbox.c.chat_id).where(outbox.c.id == message_id).scalar_subquery()
    candidate = outbox.alias("candidate")
    oldest = (
        select(func.min(candidate.c.id))
        .where(
            candidate.c.chat_id == chat,
            # Two plain comparisons, not IN: an IN list is expanded anew at every execution.
            or_(
                candidate.c.status == OutboxStatus.PENDING,
                candidate.c.status == OutboxStatus.SENDING,
            ),
        )
        .scalar_subquery()
    )
    return outbox.c.id == oldest


# A keyed row queued again inserts nothing and returns no id (both databases speak it).
_INSERT_UNLESS_KEYED = {
    name: dialect.insert(outbox)
    .on_conflict_do_nothing(index_elements=["idempotency_key"])
    .returning(outbox.c.id)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}


def insert_unless_keyed(dialect: str):
    return _INSERT_UNLESS_KEYED["postgresql" if dialect == "postgresql" else "sqlite"]


HELD = (
    outbox.c.id == bindparam("id_"),
    outbox.c.status == OutboxStatus.SENDING,
    outbox.c.lease_until == bindparam("held_lease", type_=outbox.c.lease_until.type),
)


def record_statement(*also: str):
    """A part recorded as sent by the delivery holding the row; ``also``: the other columns set
    (the next lease, or the row's end)."""
    columns = ("parts_sent", "telegram_message_ids", *also)
    return update(outbox).where(*HELD).values({name: bindparam(name) for name in columns})


RECORD_PART = record_statement("lease_until")
RECORD_LAST_PART = record_statement("status", "sent_at", "last_error")


def claim_statement():
    moment = bindparam("moment", type_=outbox.c.lease_until.type)
    return (
        update(outbox)
        .where(
            next_in_chat_of(bindparam("of_message"), moment),
            claimable(outbox, moment),
        )
        .values(
            status=OutboxStatus.SENDING,
            lease_until=bindparam("lease_until", type_=outbox.c.lease_until.type),
            attempts=outbox.c.attempts + 1,
        )
        .returning(*outbox.c)
    )


def claimable(table, moment):
    """Pending and not held back (``lease_until`` on a pending row is "not before"), or being
    sent by a delivery whose lease ran out (a crashed worker)."""
    return or_(
        and_(
            table.c.status == OutboxStatus.PENDING,
            or_(table.c.lease_until.is_(None), table.c.lease_until <= moment),
        ),
        and_(table.c.status == OutboxStatus.SENDING, table.c.lease_until < moment),
    )


CLAIM_NEXT_IN_CHAT = claim_statement()


# Postgres runs the delivery's statements through the driver itself (Store.driver): one round
# trip each, no transaction around them, no SQLAlchemy work per call. They say what
# CLAIM_NEXT_IN_CHAT, RECORD_PART and RECORD_LAST_PART say (written out, not composed: SQL built
# from strings is SQL nobody can read whole), and the outbox tests run on both databases. Both
# return the columns ``_from_driver`` (bot/chat/deliveries.py) makes an OutgoingMessage of. JSON
# parameters are passed as text (json.dumps): the codec SQLAlchemy installs sends text as is.

# $1 a row of the chat, $2 now, $3 the lease's end.
PG_CLAIM_NEXT_IN_CHAT = """
UPDATE outbox SET status = 'sending', lease_until = $3, attempts = attempts + 1
WHERE id = (
    SELECT min(id) FROM outbox
    WHERE chat_id = (SELECT chat_id FROM outbox WHERE id = $1)
    AND status IN ('pending', 'sending')
) AND (
    status = 'pending' AND (lease_until IS NULL OR lease_until <= $2)
    OR status = 'sending' AND lease_until < $2
)
RETURNING id, chat_id, thread_id, idempotency_key, kind, parts, reply_markup,
    reply_to_message_id, caption, reply_to_outbox, edit_of, lease_until, parts_sent,
    telegram_message_ids, attempts, last_error
"""

# $1 id, $2 the held lease, $3 parts sent, $4 the Telegram ids (JSON text), $5 the next lease.
PG_RECORD_PART = """
UPDATE outbox SET parts_sent = $3, telegram_message_ids = $4, lease_until = $5
WHERE id = $1 AND status = 'sending' AND lease_until = $2
"""

# The last part recorded and, with $7, the chat's next row claimed, in one statement: a
# delivery draining a chat spends one round trip per message. Both halves see the rows as they
# were before the statement, so to the claim the row just recorded is still 'sending': it is
# left out by its id (it is sent now). Nothing is claimed unless the record applied.
# $1 id, $2 the held lease, $3 parts sent, $4 the Telegram ids (JSON text), $5 now, $6 the
# next row's lease, $7 whether to claim. One row: whether it was recorded, and the claimed
# row's columns (NULL when none was).
PG_RECORD_LAST_PART = """
WITH recorded AS (
    UPDATE outbox SET status = 'sent', parts_sent = $3, telegram_message_ids = $4,
        last_error = NULL, sent_at = $5
    WHERE id = $1 AND status = 'sending' AND lease_until = $2
    RETURNING chat_id
), claimed AS (
    UPDATE outbox SET status = 'sending', lease_until = $6, attempts = attempts + 1
    WHERE $7 AND id = (
        SELECT min(id) FROM outbox
        WHERE chat_id = (SELECT chat_id FROM recorded)
        AND status IN ('pending', 'sending') AND id <> $1
    ) AND (
        status = 'pending' AND (lease_until IS NULL OR lease_until <= $5)
        OR status = 'sending' AND lease_until < $5
    )
    RETURNING id, chat_id, thread_id, idempotency_key, kind, parts, reply_markup,
        reply_to_message_id, caption, reply_to_outbox, edit_of, lease_until, parts_sent,
        telegram_message_ids, attempts, last_error
)
SELECT (SELECT count(*) FROM recorded) AS recorded, claimed.*
FROM (SELECT 1) AS one LEFT JOIN claimed ON true
"""
