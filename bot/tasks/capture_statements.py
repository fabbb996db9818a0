"""A new capture's statements on Postgres, written out whole, and what their parameters are made
of: two round trips through the driver (Store.driver), each its own transaction, where the
general way (bot/tasks/tasks.py) is BEGIN, two statements and COMMIT through SQLAlchemy. The
tests in tests/bot/tasks/test_tasks.py run both ways on the same captures.
"""

from __future__ import annotations

import enum
import json
from types import SimpleNamespace
from typing import Any

from bot.tasks.task import Task

CAPTURED_COLUMNS = (
    "capture_key", "title", "body", "search_text", "state", "labels", "attachments",
    "origin_kind", "origin_name", "origin_user_id", "origin_chat_id", "origin_message_id",
    "origin_at", "origin_link", "chat_id", "message_id", "captured_by", "assignee",
    "created_at", "updated_at",
)  # fmt: skip


# Postgres, through the driver (``_capture_new_on_postgres``), written out whole. $1 the capture
# key: NULL when a task has it, else the new task's id (drawn only then, so a message captured
# before uses up no id).
PG_NEW_TASK_ID = """
SELECT CASE WHEN EXISTS (SELECT 1 FROM tasks WHERE capture_key = $1) THEN NULL
    ELSE nextval(pg_get_serial_sequence('tasks', 'id')) END
"""

# $1 the id, then CAPTURED_COLUMNS in their order. No row when the key was taken meanwhile.
PG_INSERT_TASK = """
INSERT INTO tasks (id, capture_key, title, body, search_text, state, labels, attachments,
    origin_kind, origin_name, origin_user_id, origin_chat_id, origin_message_id, origin_at,
    origin_link, chat_id, message_id, captured_by, assignee, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
    $20, $21)
ON CONFLICT (capture_key) DO NOTHING
RETURNING id
"""

# PG_INSERT_TASK's parameters, then the receipt's (Outbox.row_of) as RECEIPT_COLUMNS: the task
# and its receipt, one statement; the receipt only if the task went in, and only once for its
# key (insert_unless_keyed's rule). No row when the task's key was taken meanwhile.
RECEIPT_COLUMNS = (
    "chat_id", "thread_id", "idempotency_key", "kind", "parts", "reply_markup",
    "reply_to_message_id", "reply_to_outbox", "status", "parts_sent", "telegram_message_ids",
    "attempts", "created_at",
)  # fmt: skip
PG_INSERT_TASK_AND_RECEIPT = """
WITH task AS (
    INSERT INTO tasks (id, capture_key, title, body, search_text, state, labels, attachments,
        origin_kind, origin_name, origin_user_id, origin_chat_id, origin_message_id, origin_at,
        origin_link, chat_id, message_id, captured_by, assignee, created_at, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
        $19, $20, $21)
    ON CONFLICT (capture_key) DO NOTHING
    RETURNING id
), receipt AS (
    INSERT INTO outbox (chat_id, thread_id, idempotency_key, kind, parts, reply_markup,
        reply_to_message_id, reply_to_outbox, status, parts_sent, telegram_message_ids,
        attempts, created_at)
    SELECT $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34 FROM task
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
)
SELECT task.id, (SELECT id FROM receipt) AS receipt_id FROM task
"""


def new_task(task_id: int, values: dict[str, Any]) -> Task:
    """The task ``values`` make once inserted as ``task_id``: what inserting it would return."""
    unset = {"triaged_by": None, "triage_interaction_id": None, "closed_at": None}
    return Task.from_row(SimpleNamespace(id=task_id, closed_as=None, **unset, **values))


def driver_value(value: Any) -> Any:
    """A parameter as asyncpg takes it: JSON (lists, mappings, None in a JSON column) as text,
    through the codec SQLAlchemy installs (Store.driver); a state as its string."""
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value) if isinstance(value, enum.Enum) else value
