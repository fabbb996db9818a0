"""The tables, as SQLAlchemy Core. Migrations in ``bot/store/migrations`` create exactly these;
``tests/bot/store/test_migrations.py`` fails if the two drift apart."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from bot.store.types import UTCDateTime

metadata = MetaData()

# Telegram updates, recorded (unique update_id) before they are handled; see bot/chat/updates.py.
updates = Table(
    "updates",
    metadata,
    Column("bot_id", BigInteger, primary_key=True, autoincrement=False),
    Column("update_id", BigInteger, primary_key=True, autoincrement=False),
    Column("kind", String(40), nullable=False),
    Column("sender_id", BigInteger),
    Column("payload", JSON, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("error", Text),
    Column("received_at", UTCDateTime(), nullable=False),
    Column("retry_at", UTCDateTime(), nullable=False),
    Column("handled_at", UTCDateTime()),
    Index("ix_updates_status", "status", "retry_at"),
)

# Accounts paired with the TOTP secret; AEGIS_OWNER_IDS are owners without a row here.
owners = Table(
    "owners",
    metadata,
    Column("user_id", BigInteger, primary_key=True, autoincrement=False),
    Column("display_name", String(200)),
    Column("paired_at", UTCDateTime(), nullable=False),
)

# Every code offered for pairing or step-up, so five wrong ones lock the account.
code_attempts = Table(
    "code_attempts",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("user_id", BigInteger, nullable=False),
    Column("purpose", String(40), nullable=False),
    Column("accepted", Boolean, nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    Index("ix_code_attempts_user", "user_id", "purpose", "at"),
)

# The last TOTP time step accepted per secret: a code is good once, and never an older step.
totp_steps = Table(
    "totp_steps",
    metadata,
    Column("secret_name", String(40), primary_key=True),
    Column("last_step", BigInteger, nullable=False),
)

# Senders who are not owners: recorded, refused at most once an hour.
unknown_senders = Table(
    "unknown_senders",
    metadata,
    Column("user_id", BigInteger, primary_key=True, autoincrement=False),
    Column("display_name", String(200)),
    Column("first_seen_at", UTCDateTime(), nullable=False),
    Column("last_seen_at", UTCDateTime(), nullable=False),
    Column("updates_seen", Integer, nullable=False),
    Column("last_refused_at", UTCDateTime()),
)

# Every message the bot sends goes through here; see bot/chat/outbox.py and jobs/delivery.py.
outbox = Table(
    "outbox",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("chat_id", BigInteger, nullable=False),
    Column("thread_id", BigInteger),  # the forum topic it goes to, in a forum chat
    Column("idempotency_key", String(200), unique=True),
    Column("kind", String(16), nullable=False),
    Column("parts", JSON, nullable=False),
    Column("reply_markup", JSON),
    # A reply: the Telegram message it answers; an edit without edit_of: the one it replaces.
    Column("reply_to_message_id", BigInteger),
    Column("caption", Text),  # a document's caption, when it is not the text's first lines
    Column("reply_to_outbox", Integer),  # a reply to the message this earlier row sent
    Column("edit_of", Integer),  # an edit: the outbox row whose sent message it replaces
    Column("status", String(16), nullable=False),
    Column("lease_until", UTCDateTime()),
    Column("parts_sent", Integer, nullable=False, default=0),
    Column("telegram_message_ids", JSON, nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("last_error", Text),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("sent_at", UTCDateTime()),
    Index("ix_outbox_chat_status", "chat_id", "status", "id"),
    # Only the rows still owed or failed: /status, /metrics and retention read them without
    # walking every message ever sent. A query uses it by repeating UNSENT word for word.
    Index(
        "ix_outbox_unsent",
        "status",
        "created_at",
        sqlite_where=text("status != 'sent'"),
        postgresql_where=text("status != 'sent'"),
    ),
)

# One row per job that ran: what, when, how it ended and what it changed.
runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("job", String(100), nullable=False),
    Column("message_id", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("summary", JSON, nullable=False),
    Column("error", Text),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("finished_at", UTCDateTime()),
    Index("ix_runs_started", "started_at"),
)

# What the clock enqueues, and when; see bot/upkeep/schedules.py.
schedules = Table(
    "schedules",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("actor", String(100), nullable=False),
    Column("interval_seconds", Integer, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("next_run_at", UTCDateTime(), nullable=False),
    Column("last_enqueued_at", UTCDateTime()),
    Column("kwargs", JSON),  # what the actor is given besides the schedule's name
    Column("source", String(16)),  # "builtin" or "file" (aegis.yaml); None: builtin
    Column("skipped", Integer, nullable=False, server_default=text("0")),
    Column("last_skipped_at", UTCDateTime()),
    Column("cron", String(100)),  # at these times in the owner's zone; None: every interval
    Column("missed", Integer, nullable=False, server_default=text("0")),  # while aegis was down
    Column("last_missed_at", UTCDateTime()),
)

# Live processes; each writes its row every few seconds, /status reads the recent ones.
heartbeats = Table(
    "heartbeats",
    metadata,
    Column("process_id", String(120), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("seen_at", UTCDateTime(), nullable=False),
    Column("rss_bytes", BigInteger),  # its resident memory at the last beat (None: unknown)
)

# Leases: a role only one process may play at a time across every machine (the clock), held by
# renewing ``expires_at`` before it passes; see bot/upkeep/leases.py.
leases = Table(
    "leases",
    metadata,
    Column("name", String(40), primary_key=True),
    Column("holder", String(120), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
)


# Every human handoff: an approval, a choice, an acknowledgement or a question; see
# bot/interactions/interactions.py. Resolved with one compare-and-set on ``status``; the
# continuation (an actor and its keyword arguments) is enqueued when it resolves or expires.
interactions = Table(
    "interactions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("agent", String(100), nullable=False),
    Column("chat_id", BigInteger, nullable=False),
    Column("thread_id", BigInteger),  # the asking agent's forum topic, if it has one
    Column("prompt", Text, nullable=False),
    Column("options", JSON, nullable=False),
    Column("tool", String(200)),
    Column("args", JSON),
    Column("args_hash", String(64)),
    Column("step_up", Boolean, nullable=False),
    Column("status", String(16), nullable=False),
    Column("outcome", String(100)),
    Column("answer", Text),
    Column("timeout_policy", String(16), nullable=False),
    Column("expires_at", UTCDateTime()),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("code_from", BigInteger),  # the owner who tapped Approve and owes the code
    Column("resolved_at", UTCDateTime()),
    Column("resolved_by", BigInteger),
    Column("resolved_by_name", String(200)),
    Column("continuation_actor", String(100)),
    Column("continuation_kwargs", JSON, nullable=False),
    Column("continuation_sent_at", UTCDateTime()),
    Column("continued_at", UTCDateTime()),
    Index("ix_interactions_status", "status", "expires_at"),
    Index("ix_interactions_hash", "args_hash", "status"),
)

# The messages that carry a card: the first from the call that asked, more from /pending.
interaction_cards = Table(
    "interaction_cards",
    metadata,
    Column("outbox_id", Integer, primary_key=True, autoincrement=False),
    Column("interaction_id", Integer, nullable=False),
    Column("chat_id", BigInteger, nullable=False),
    Index("ix_interaction_cards_interaction", "interaction_id"),
    Index("ix_interaction_cards_chat", "chat_id", "outbox_id"),
)

# Approvals granted: bound to the argument hash, good for 15 minutes, used at most once.
grants = Table(
    "grants",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("interaction_id", Integer, nullable=False, unique=True),
    Column("agent", String(100), nullable=False),
    Column("tool", String(200), nullable=False),
    Column("args_hash", String(64), nullable=False),
    Column("step_up", Boolean, nullable=False),  # granted with a code
    Column("granted_by", BigInteger, nullable=False),
    Column("granted_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    Column("used_at", UTCDateTime()),
    Index("ix_grants_hash", "args_hash", "used_at", "expires_at"),
)

# What the gate decided and what people did about it: decisions, grants, uses, refusals.
audit_events = Table(
    "audit_events",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("at", UTCDateTime(), nullable=False),
    Column("event", String(32), nullable=False),
    Column("agent", String(100)),
    Column("tool", String(200)),
    Column("args_hash", String(64)),
    Column("interaction_id", Integer),
    Column("user_id", BigInteger),
    Column("detail", Text, nullable=False),
    Index("ix_audit_events_at", "at"),
)

# Everything captured: a forwarded or written message becomes one task. It always carries exactly
# one state label (see bot/tasks/tasks.py); closing it (done, dropped, filed as reference) keeps it.
tasks = Table(
    "tasks",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("capture_key", String(200), unique=True),  # the same message captured twice is one task
    Column("title", String(200), nullable=False),
    Column("body", Text, nullable=False),
    Column("search_text", Text, nullable=False),  # see bot/store/search.py
    Column("state", String(16), nullable=False),
    Column("labels", JSON, nullable=False),
    Column("assignee", String(100)),
    Column("attachments", JSON, nullable=False),
    # Where it came from: who wrote it, in which chat, which message, when, its public link.
    Column("origin_kind", String(16), nullable=False),
    Column("origin_name", String(200)),
    Column("origin_user_id", BigInteger),
    Column("origin_chat_id", BigInteger),
    Column("origin_message_id", BigInteger),
    Column("origin_at", UTCDateTime()),
    Column("origin_link", String(300)),
    # The message in our chat that captured it (edits follow it) and the owner who sent it.
    Column("chat_id", BigInteger),
    Column("message_id", BigInteger),
    Column("captured_by", BigInteger),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("triaged_at", UTCDateTime()),
    Column("triaged_by", String(120)),  # "owner 1234", "rule reading", ...
    Column("triage_interaction_id", Integer),  # the card that asks where it goes
    Column("closed_at", UTCDateTime()),
    Column("closed_as", String(16)),
    # Open tasks by state label, in id order: /next and the other lists, read page by page.
    Index(
        "ix_tasks_open",
        "state",
        "id",
        sqlite_where=text("closed_at IS NULL"),
        postgresql_where=text("closed_at IS NULL"),
    ),
    Index("ix_tasks_message", "chat_id", "message_id"),
    Index("ix_tasks_assignee", "assignee", "state"),
)

# Searchable notes: @reference items filed from tasks, and what the owner told an agent by
# replying to one of its cards (shown to its later runs).
notes = Table(
    "notes",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("agent", String(100)),
    Column("task_id", Integer),
    Column("interaction_id", Integer),
    Column("user_id", BigInteger),
    Column("text", Text, nullable=False),
    Column("search_text", Text, nullable=False),  # see bot/store/search.py
    Column("created_at", UTCDateTime(), nullable=False),
    Index("ix_notes_agent", "agent", "id"),
)

# Agent runs: one row per run of an agent (bot/agents/agent_runs.py), from /run, an assigned task or
# a schedule. ``state`` is the harness's own (conversation so far, step reached), so a parked
# or interrupted run continues where it stopped; ``effects`` counts what it changed.
agent_runs = Table(
    "agent_runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("agent", String(100), nullable=False),
    Column("request", Text, nullable=False),
    Column("origin", String(16), nullable=False),  # command | task | schedule
    Column("task_id", Integer),
    Column("schedule", String(100)),
    Column("chat_id", BigInteger, nullable=False),
    Column("thread_id", BigInteger),  # the agent's forum topic, if it has one
    Column("idempotency_key", String(200), unique=True),
    Column("status", String(16), nullable=False),
    Column("step", String(200), nullable=False),
    Column("state", JSON, nullable=False),
    Column("effects", JSON, nullable=False),
    Column("result", Text),
    Column("error", Text),
    Column("waiting_on", Integer),  # the interaction a parked run waits for
    Column("watching", Integer),  # or the process watch it waits for (process_watches)
    Column("progress_outbox_id", Integer),  # the message edited in place as the run goes
    Column("deadline_seconds", Integer, nullable=False),
    Column("deadline_at", UTCDateTime()),  # set when a stretch of work begins
    Column("attempts", Integer, nullable=False),
    Column("cancel_requested", Boolean, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("started_at", UTCDateTime()),
    Column("heartbeat_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    Index("ix_agent_runs_status", "status", "heartbeat_at"),
    Index("ix_agent_runs_task", "task_id", "created_at"),
    Index("ix_agent_runs_schedule", "schedule", "status"),
    Index("ix_agent_runs_agent", "agent", "id"),
)

# Every model call (bot/agents/ledger.py): "when did this model last succeed" is one query, and the
# rolling token budgets are sums over it.
model_calls = Table(
    "model_calls",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", Integer),
    Column("agent", String(100), nullable=False),
    Column("provider", String(200), nullable=False),
    Column("model", String(200), nullable=False),
    Column("status", String(40), nullable=False),  # ok, http 500, timeout, error …
    Column("latency_ms", Integer, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    Index("ix_model_calls_model", "provider", "model", "status", "at"),
    Index("ix_model_calls_agent", "agent", "at"),
)

# Agents' MCP bearer tokens, stored as sha256 hashes (never the token). A token made for one run
# (``run_id``) expires with it; ``aegis agent token SLUG`` makes a lasting one.
agent_tokens = Table(
    "agent_tokens",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("agent", String(100), nullable=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("run_id", Integer),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime()),
    Column("revoked_at", UTCDateTime()),
    Index("ix_agent_tokens_agent", "agent"),
)

# Messages between agents (bot/tools/conversation.py): an agent reads what is addressed
# to it, oldest unread first, and a reply names the message it answers (``reply_to``).
agent_messages = Table(
    "agent_messages",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("sender", String(100), nullable=False),
    Column("recipient", String(100), nullable=False),
    Column("text", Text, nullable=False),
    Column("reply_to", Integer),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("read_at", UTCDateTime()),
    Index("ix_agent_messages_recipient", "recipient", "read_at", "id"),
)


# What aegis watches (bot/monitors/monitors.py): one row per monitor, its spec as JSON, its
# verdict and the counters that lead to the next one, and the slot its next check is due at.
monitors = Table(
    "monitors",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(60), nullable=False, unique=True),
    Column("kind", String(8), nullable=False),
    Column("identity_hash", String(64), nullable=False, unique=True),  # kind and target
    Column("spec", JSON, nullable=False),
    Column("source", String(120), nullable=False),  # chat | file | agent:<slug>
    Column("paused", Boolean, nullable=False),
    Column("state", String(8), nullable=False),
    Column("failures", Integer, nullable=False),
    Column("successes", Integer, nullable=False),
    Column("state_since", UTCDateTime()),
    Column("flips", JSON, nullable=False),  # when a check disagreed with the one before (1 h)
    Column("flapping_since", UTCDateTime()),
    Column("next_check_at", UTCDateTime(), nullable=False),
    Column("last_check_at", UTCDateTime()),
    Column("last_ok", Boolean),
    Column("last_latency_ms", Float),
    Column("last_error", Text),
    Column("created_at", UTCDateTime(), nullable=False),
    Index("ix_monitors_due", "paused", "next_check_at"),
)

# Checks per monitor per hour, for uptime over 24 hours and 7 days without a row per check.
monitor_hours = Table(
    "monitor_hours",
    metadata,
    Column("monitor_id", Integer, primary_key=True, autoincrement=False),
    Column("hour", UTCDateTime(), primary_key=True),
    Column("checks", Integer, nullable=False),
    Column("ups", Integer, nullable=False),
)

# Incidents (bot/monitors/incidents.py): a monitor down, a monitor flapping, or the watchdog's
# finding about aegis itself. ``open_key`` is the subject while open and NULL once closed, so
# the unique constraint allows one open incident per subject, however many checks race.
incidents = Table(
    "incidents",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("subject", String(160), nullable=False),
    Column("open_key", String(160), unique=True),
    Column("kind", String(16), nullable=False),  # down | flapping | watchdog
    Column("monitor_id", Integer),
    Column("chat_id", BigInteger, nullable=False),
    Column("title", Text, nullable=False),
    Column("detail", Text),  # the last error
    Column("agents", JSON, nullable=False),  # the agents its card offers to run
    Column("opened_at", UTCDateTime(), nullable=False),
    Column("closed_at", UTCDateTime()),
    Column("close_note", Text),
    Column("acked_at", UTCDateTime()),
    Column("acked_by_name", String(200)),
    Column("silenced_until", UTCDateTime()),
    Column("next_remind_at", UTCDateTime()),
    Column("reminders", Integer, nullable=False),
    Column("restart_notice", Boolean, nullable=False),  # one "still down" owed after a restart
    Column("card_outbox_id", Integer),  # the card, edited in place as the incident goes
    Index("ix_incidents_monitor", "monitor_id", "closed_at"),
    Index("ix_incidents_open", "closed_at", "next_remind_at"),
)

# Long processes an agent's run asked aegis to watch for it (bot/monitors/process_watches.py):
# its commands, its deadline, what the last check saw, and how it ended; the run that asked
# is parked on it (agent_runs.watching) and continued with the result.
process_watches = Table(
    "process_watches",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("agent", String(100), nullable=False),
    Column("run_id", Integer, nullable=False),
    Column("chat_id", BigInteger, nullable=False),
    Column("spec", JSON, nullable=False),
    Column("status", String(12), nullable=False),  # watching | passed | failed | timed_out …
    Column("checks", Integer, nullable=False),
    Column("progress", Text),  # the progress command's last line
    Column("outcome", Text),  # what the agent is told, once it ended
    Column("next_check_at", UTCDateTime(), nullable=False),
    Column("deadline_at", UTCDateTime(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("ended_at", UTCDateTime()),
    Index("ix_process_watches_due", "status", "next_check_at"),
    Index("ix_process_watches_run", "run_id", "status"),
)

# One-shot reminders made in chat (bot/reminders/reminders.py): waiting until due, then claimed by
# the clock (due), then their card is queued (sent); Done closes one, a snooze makes it wait again.
reminders = Table(
    "reminders",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("chat_id", BigInteger, nullable=False),
    Column("text", Text, nullable=False),
    Column("status", String(12), nullable=False),
    Column("due_at", UTCDateTime(), nullable=False),
    Column("claimed_at", UTCDateTime()),  # when the clock enqueued it
    Column("fired_at", UTCDateTime()),  # when its card was queued
    Column("card_outbox_id", Integer),
    Column("snoozes", Integer, nullable=False, server_default=text("0")),
    Column("created_at", UTCDateTime(), nullable=False),
    Index("ix_reminders_due", "status", "due_at"),
)

# The forum group (a supergroup with topics) where each agent has a topic (bot/chat/topics.py):
# one row, set by /here or AEGIS_OWNER_CHAT_ID. ``home_chat_id`` is the private chat everything
# falls back to; ``state`` is "on", or "lost" when Telegram refused a topic (``problem`` says why).
forum = Table(
    "forum",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("chat_id", BigInteger, nullable=False),
    Column("title", String(200), nullable=False),
    Column("home_chat_id", BigInteger, nullable=False),
    Column("state", String(8), nullable=False),
    Column("problem", Text),
    Column("set_at", UTCDateTime(), nullable=False),
    Column("changed_at", UTCDateTime(), nullable=False),
)

# Each agent's topic in a forum: its message_thread_id there.
topics = Table(
    "topics",
    metadata,
    Column("agent", String(100), primary_key=True),
    Column("chat_id", BigInteger, primary_key=True),
    Column("thread_id", BigInteger, nullable=False),
    Column("name", String(128), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    UniqueConstraint("chat_id", "thread_id", name="uq_topics_thread"),
)

# Links with other aegis instances (federation/links.py): ``direction`` is "out" (we call them,
# at ``url``) or "in" (they call us); a peer both ways is two rows of one name. ``us`` and
# ``them`` are the two names the link's signatures carry. An "in" link is "invited" until its
# first signed request, and dies unclaimed at ``expires_at``. The secrets are files in the data
# dir, never here. ``refusals`` counts refused requests by reason; ``skew_seconds`` is their
# clock minus ours at the last contact.
peers = Table(
    "peers",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("direction", String(3), primary_key=True),
    Column("url", String(500)),
    Column("us", String(63), nullable=False),
    Column("them", String(63), nullable=False),
    Column("state", String(8), nullable=False),
    Column("invitation", String(32), nullable=False, unique=True),
    Column("expires_at", UTCDateTime()),
    Column("previous_until", UTCDateTime()),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("last_contact_at", UTCDateTime()),
    Column("skew_seconds", Float),
    Column("refusals", JSON, nullable=False),
)

# Requests between linked instances (federation/requests.py). "out": ours to a peer, kept until
# it has answered for good (the per-peer outbox, sent in ``id`` order); "in": a peer's to us, run
# under our gate. ``request_id`` is chosen by the asking side, so a request sent again is the
# same row at each end. ``agent`` is who asked there; ``card`` the approval card at the asked
# side; ``chat_id`` and ``outbox_id`` (out only) the message that tells the owner how it went.
peer_requests = Table(
    "peer_requests",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("direction", String(3), nullable=False),
    Column("peer", String(63), nullable=False),
    Column("request_id", String(32), nullable=False),
    Column("action", String(20), nullable=False),
    Column("args", JSON, nullable=False),
    Column("agent", String(100), nullable=False),
    Column("state", String(8), nullable=False),
    Column("reason", Text),
    Column("result", JSON),
    Column("card", Integer),
    Column("chat_id", BigInteger),
    Column("outbox_id", Integer),
    Column("tries", Integer, nullable=False, default=0),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("finished_at", UTCDateTime()),
    UniqueConstraint("direction", "peer", "request_id", name="uq_peer_requests_id"),
    Index("ix_peer_requests_open", "direction", "state", "peer", "id"),
)
