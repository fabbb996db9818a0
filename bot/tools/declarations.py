"""What each of the platform's own tools is: its name, its effect, its argument schema and what
it says of itself, apart from what it does.

``aegis.yaml`` (bot/config/file.py) and the gate read these; the implementations beside this
module (records, conversation, workdir, deploy, cli_builtins) import them. Nothing here imports
an implementation, so reading the configuration never loads a tool.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from bot.tasks.task import State
from policies.tools import Effect, ToolSpec, object_schema

# The owner's records: tasks, notes and runs (bot/tools/records.py).

TASK_ID = {"type": "integer", "minimum": 1}
TEXT = {"type": "string", "minLength": 1, "maxLength": 20_000}
LABELS = {"type": "array", "items": {"type": "string", "maxLength": 32}, "maxItems": 10}
OPEN_STATES = [State.INBOX, State.NEXT, State.SOMEDAY, State.WAITING]
LIMIT = {"type": "integer", "minimum": 1, "maximum": 50}
RECORDS = (
    ToolSpec(
        "tasks.list",
        Effect.READ,
        object_schema(
            {
                "state": {"enum": [*OPEN_STATES, State.REFERENCE]},
                "query": {"type": "string", "maxLength": 200},
                "page": {"type": "integer", "minimum": 0, "maximum": 1000},
                "limit": LIMIT,
            }
        ),
        "List open tasks in one state (default @next), or find tasks by words (query).",
    ),
    ToolSpec(
        "tasks.get",
        Effect.READ,
        object_schema({"id": TASK_ID}, "id"),
        "One task in full, with its latest comments.",
    ),
    ToolSpec(
        "tasks.create",
        Effect.WRITE,
        object_schema(
            {
                "title": {"type": "string", "maxLength": 200},
                "body": {"type": "string", "maxLength": 20_000},
                "state": {"enum": OPEN_STATES},
                "labels": LABELS,
            },
            "title",
        ),
        "Write down a new task (in the inbox unless a state is given).",
    ),
    ToolSpec(
        "tasks.update",
        Effect.WRITE,
        object_schema(
            {
                "id": TASK_ID,
                "state": {"enum": [*OPEN_STATES[1:], State.REFERENCE]},
                "add_labels": LABELS,
                "remove_labels": LABELS,
                "assignee": {"type": ["string", "null"], "maxLength": 100},
            },
            "id",
        ),
        "Move an open task to another state, change its labels or its assignee.",
    ),
    ToolSpec(
        "tasks.comment",
        Effect.WRITE,
        object_schema({"id": TASK_ID, "text": TEXT}, "id", "text"),
        "Add a comment to a task.",
    ),
    ToolSpec(
        "tasks.complete",
        Effect.WRITE,
        object_schema({"id": TASK_ID, "comment": {"type": "string", "maxLength": 20_000}}, "id"),
        "Close a task as done, with an optional last comment.",
    ),
    ToolSpec(
        "notes.search",
        Effect.READ,
        object_schema({"query": {"type": "string", "maxLength": 200}, "limit": LIMIT}, "query"),
        "Find notes holding every word of the query, newest first.",
    ),
    ToolSpec(
        "notes.add",
        Effect.WRITE,
        object_schema({"text": TEXT, "task_id": TASK_ID}, "text"),
        "Keep a note (searchable later), optionally about a task.",
    ),
    ToolSpec(
        "runs.list",
        Effect.READ,
        object_schema({"agent": {"type": "string", "maxLength": 100}, "limit": LIMIT}),
        "The latest agent runs, newest first (of one agent when given).",
    ),
    ToolSpec(
        "runs.status",
        Effect.READ,
        object_schema({"id": {"type": "integer", "minimum": 1}}, "id"),
        "One run: its state, step, what it changed, and its result or error.",
    ),
    ToolSpec(
        "runs.start",
        Effect.WRITE,
        object_schema(
            {
                "agent": {"type": "string", "minLength": 1, "maxLength": 100},
                "request": {"type": "string", "minLength": 1, "maxLength": 4000},
            },
            "agent",
            "request",
        ),
        "Start a run of an agent with a request, as /run does; its messages go to the owner's "
        "chat. Returns the run's id; runs.status follows it.",
    ),
)

# Asking the owner and talking to other agents (bot/tools/conversation.py).

SLUG = {"type": "string", "minLength": 1, "maxLength": 100}
ROW_ID = {"type": "integer", "minimum": 1}
CONVERSATION = (
    ToolSpec(
        "owner.ask",
        Effect.TALK,
        object_schema(
            {
                "question": {"type": "string", "minLength": 1, "maxLength": 2000},
                "options": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": 40},
                    "minItems": 1,
                    "maxItems": 8,
                    "uniqueItems": True,
                },
                "timeout_minutes": {"type": "integer", "minimum": 1, "maximum": 1440},
            },
            "question",
        ),
        "Ask the owner a question (a free-text answer), or a choice between options, on a card "
        "in their chat. Returns at once with the card's id; read the answer with owner.answer. "
        "Unanswered, the card expires after timeout_minutes (default 60).",
    ),
    ToolSpec(
        "owner.answer",
        Effect.READ,
        object_schema(
            {"card": ROW_ID, "wait_seconds": {"type": "number", "minimum": 0, "maximum": 25}},
            "card",
        ),
        "The owner's answer to a card you asked: pending, answered (with the text), chosen "
        "(with the option), skipped or expired. wait_seconds holds the call until the card is "
        "settled or the time is up.",
    ),
    ToolSpec(
        "messages.send",
        Effect.TALK,
        object_schema(
            {
                "to": SLUG,
                "text": {"type": "string", "minLength": 1, "maxLength": 20_000},
                "reply_to": ROW_ID,
            },
            "text",
        ),
        "Send a message to another agent by its slug; with reply_to, answer a message you "
        "received (it goes back to its sender).",
    ),
    ToolSpec(
        "messages.read",
        Effect.READ,
        object_schema(
            {
                "unread_only": {"type": "boolean"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                "from": SLUG,
            }
        ),
        "Messages other agents sent you, oldest first, marked read as they are returned. "
        "By default the oldest unread; with unread_only false, the latest ones.",
    ),
)

# Work in the caller's working directory (bot/tools/workdir.py).

WORKDIR = (
    ToolSpec(
        "shell.run",
        Effect.IRREVERSIBLE,
        object_schema(
            {
                "command": {"type": "string", "minLength": 1, "maxLength": 4000},
                "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": 300},
            },
            "command",
        ),
        "Run a command with /bin/sh in your working directory (default timeout 60 s). Returns "
        "its exit code and its output (stdout and stderr together; past 12 KB the middle is "
        "cut, and cut_bytes says how much).",
    ),
    ToolSpec(
        "files.send",
        Effect.WRITE,
        object_schema(
            {
                "path": {"type": "string", "minLength": 1, "maxLength": 4096},
                "caption": {"type": "string", "maxLength": 1000},
            },
            "path",
        ),
        "Send a file of your working directory (a path relative to it, at most 50 MB) to the "
        "owner's chat, with an optional caption.",
    ),
)

# The deploy recipes of aegis.yaml (bot/tools/deploy.py).

DEFAULT_TIMEOUT_SECONDS = 600
MAX_TIMEOUT_SECONDS = 3600


@dataclass(frozen=True)
class DeployRecipe:
    name: str
    command: tuple[str, ...]  # argv: the program, then its arguments
    workdir: Path
    description: str = ""
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS

    def shown(self) -> str:
        """What its approval card says it runs; the approval holds only for that."""
        return f"It runs {shlex.join(self.command)} in {self.workdir}."

    def describe(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "command": list(self.command),
            "workdir": str(self.workdir),
            "timeout_seconds": self.timeout_seconds,
        }


DEPLOY = (
    ToolSpec(
        "deploy.recipes",
        Effect.READ,
        object_schema(),
        "The deploy recipes aegis.yaml declares: what each runs, and where.",
    ),
    ToolSpec(
        "deploy.run",
        Effect.IRREVERSIBLE,
        object_schema({"recipe": {"type": "string", "minLength": 1, "maxLength": 100}}, "recipe"),
        "Run a deploy recipe of aegis.yaml by name. Returns its exit code and output "
        "(past 12 KB the middle is cut, and cut_bytes says how much).",
    ),
)

# A coding CLI's own built-ins, as the gate sees them (bot/tools/cli_builtins.py).

CLI_FAMILY = "cli.*"
PROMPT_TOOL = "permission_prompt"  # the MCP tool Claude Code asks (mcp__aegis__permission_prompt)
# How the coding CLIs name aegis's MCP server (Claude Code's tools: mcp__aegis__<tool>).
MCP_SERVER_NAME = "aegis"
READING = {
    "Read": "Read a file.",
    "Grep": "Search file contents.",
    "Glob": "Find files by name pattern.",
    "LS": "List a directory.",
    "NotebookRead": "Read a Jupyter notebook.",
}
ANY_INPUT = {"type": "object"}
CLI_BUILTINS = tuple(
    ToolSpec(f"cli.{name}", Effect.READ, ANY_INPUT, f"The CLI's own {name}: {about}")
    for name, about in READING.items()
)

# What aegis watches (bot/tools/monitors.py). Watching a program's exit code runs it on this
# server at every check: irreversible, so its card needs a code.

DURATION = {"type": ["string", "integer"], "maxLength": 20}
WATCH_OPTIONS = {
    "name": {"type": "string", "minLength": 1, "maxLength": 60},
    "every": DURATION,
    "timeout": DURATION,
    "fail_after": {"type": "integer", "minimum": 1, "maximum": 20},
    "recover_after": {"type": "integer", "minimum": 1, "maximum": 20},
    "remind_every": DURATION,
    "contains": {"type": "string", "minLength": 1, "maxLength": 500},
}
MONITORS = (
    ToolSpec(
        "monitors.list",
        Effect.READ,
        object_schema({}),
        "Every monitor: what it watches, its state, last check and error, uptime over 24 h.",
    ),
    ToolSpec(
        "monitors.watch",
        Effect.WRITE,
        object_schema(
            {
                "kind": {"enum": ["http", "tcp", "cert"]},
                "target": {"type": "string", "minLength": 1, "maxLength": 2000},
                **WATCH_OPTIONS,
                "status": {"type": "array", "items": {"type": "integer"}, "maxItems": 20},
                "matches": {"type": "string", "minLength": 1, "maxLength": 500},
                "latency": DURATION,
                "warn": DURATION,
            },
            "kind",
            "target",
        ),
        "Watch a URL (http), a port (tcp, host:port) or a certificate (cert, host:port).",
    ),
    ToolSpec(
        "monitors.watch_command",
        Effect.IRREVERSIBLE,
        object_schema(
            {
                "command": {"type": "string", "minLength": 1, "maxLength": 1000},
                **WATCH_OPTIONS,
                "exit": {"type": "integer", "minimum": 0, "maximum": 255},
            },
            "command",
        ),
        "Watch a command's exit code (and output), run on this server at every check.",
    ),
    ToolSpec(
        "monitors.watch_process",
        Effect.IRREVERSIBLE,
        object_schema(
            {
                "done": {"type": "string", "minLength": 1, "maxLength": 1000},
                "fail": {"type": "string", "minLength": 1, "maxLength": 1000},
                "progress": {"type": "string", "minLength": 1, "maxLength": 1000},
                "deadline": DURATION,
                "name": WATCH_OPTIONS["name"],
                "every": DURATION,
                "timeout": DURATION,
            },
            "done",
            "deadline",
        ),
        "Watch a long process for this run, then end your turn: aegis runs `done` (exit 0: it "
        "passed), `fail` (exit 0: it failed) and `progress` (its last line is shown) on this "
        "server every 30 s or `every`, and continues this run with the outcome when it passes, "
        "fails or reaches `deadline` (such as 45m). Do not poll it yourself.",
    ),
    ToolSpec(
        "monitors.remove",
        Effect.WRITE,
        object_schema({"id": ROW_ID}, "id"),
        "Stop watching monitor #id.",
    ),
)

# Other aegis instances this one calls (bot/tools/peers.py). What a peer runs, it gates itself
# with its owner's code; asking it at all waits for a tap here.

PEER_NAME = {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"}
PEERS = (
    ToolSpec(
        "peers.list",
        Effect.READ,
        object_schema(),
        "The other aegis instances this one may ask: each link's name, last contact and clock "
        "skew.",
    ),
    ToolSpec(
        "peers.status",
        Effect.READ,
        object_schema({"peer": PEER_NAME}, "peer"),
        "Ask another aegis for its status: its health, version and queue depths.",
    ),
    ToolSpec(
        "peers.deploy",
        Effect.WRITE,
        object_schema(
            {"peer": PEER_NAME, "recipe": {"type": "string", "minLength": 1, "maxLength": 100}},
            "peer",
            "recipe",
        ),
        "Ask another aegis to run one of its own deploy recipes. Returns at once with the "
        "request's id; the peer runs it once its owner approves it there with a code. Read how "
        "it went with peers.request.",
    ),
    ToolSpec(
        "peers.run",
        Effect.WRITE,
        object_schema(
            {
                "peer": PEER_NAME,
                "agent": {"type": "string", "minLength": 1, "maxLength": 100},
                "request": {"type": "string", "minLength": 1, "maxLength": 4000},
            },
            "peer",
            "agent",
            "request",
        ),
        "Ask another aegis to run one of its agents with a request. Returns at once with the "
        "request's id; the run starts once the peer's owner approves it there with a code, and "
        "peers.request gives its result when it has ended.",
    ),
    ToolSpec(
        "peers.request",
        Effect.READ,
        object_schema(
            {"request": ROW_ID, "wait_seconds": {"type": "number", "minimum": 0, "maximum": 25}},
            "request",
        ),
        "How a request you made to a peer stands: queued (not taken yet), waiting (for the "
        "owner there), done (with its result), refused (nothing was done) or failed. "
        "wait_seconds holds the call until it has ended or the time is up.",
    ),
)

TOOLS = (*RECORDS, *CONVERSATION, *WORKDIR, *DEPLOY, *CLI_BUILTINS, *MONITORS, *PEERS)
