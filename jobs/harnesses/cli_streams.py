"""Reading the JSON streams the coding CLIs print, one line at a time, into progress and a result.

Each reader is fed one line of stdout at a time and answers the steps worth showing (a tool
used, the text being written). A line that is not a JSON object is skipped and counted, never
fatal: what decides whether a run succeeded is whether a result could be read at the end.
Events a reader does not know are ignored, so a newer CLI with more kinds of event still runs.

The formats, as documented by each vendor and read from their sources:

- Claude Code, ``claude -p --output-format stream-json --verbose``: ``{"type": "system",
  "subtype": "init", "model": …}``; ``{"type": "assistant", "message": {"content": [{"type":
  "text", "text": …} | {"type": "tool_use", "name": …, "input": {…}}]}}``; ``{"type": "user",
  …}`` carrying tool results; and last ``{"type": "result", "subtype": "success" |
  "error_max_turns" | "error_during_execution", "is_error": bool, "result": "…", "usage": {…}}``.
- Codex, ``codex exec --json`` (codex-rs/exec/src/exec_events.rs): ``thread.started``,
  ``turn.started``, ``item.started`` / ``item.updated`` / ``item.completed`` with an ``item``
  whose ``type`` is ``agent_message`` (``text``), ``reasoning``, ``command_execution``
  (``command``), ``file_change`` (``changes``), ``mcp_tool_call`` (``server``, ``tool``),
  ``web_search`` (``query``), ``todo_list`` or ``error``; then ``turn.completed`` (``usage``)
  or ``turn.failed`` (``error.message``); ``error`` (``message``) for a fatal stream error. The
  answer is the last ``agent_message``.
- OpenCode, ``opencode run --format json`` (packages/opencode/src/cli/cmd/run.ts): every event
  is ``{"type", "timestamp", "sessionID", …}``: ``step_start``, ``text`` (a finished text
  ``part``), ``tool_use`` (a finished tool ``part``: ``tool``, ``state.status``,
  ``state.input``), ``reasoning``, ``step_finish`` (``part.reason``, ``part.tokens``),
  ``error`` (``error.name``, ``error.data.message``) and, in recent versions, ``done``. The
  answer is the text of the last step that did not end in ``tool-calls``.
"""

from __future__ import annotations

import abc
import json
import re
from dataclasses import dataclass
from typing import Any

STEP_CHARS = 80  # a progress step is one short line
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}\Z")
ERROR_CHARS = 500


@dataclass(frozen=True)
class EndedCall:
    tool: str  # as the stream names it: Read, mcp__aegis__tasks-create, command_execution …
    failed: bool
    shown: str  # what it was, in a few words
    reason: str | None  # why it failed

    def words(self) -> str:
        return f"{self.shown}: {self.reason}"


class StreamReader(abc.ABC):
    """What one run's stream said so far. Subclasses read one CLI's events."""

    def __init__(self) -> None:
        self.model: str | None = None  # the model, where the stream names it
        self.result: str | None = None  # the answer, once the stream has given one
        self.failure: str | None = None  # the CLI's own account of why it failed
        self.last_text: str | None = None  # the last assistant text, if no result comes
        self.session: str | None = None  # the CLI's session id, to resume it with
        self.events = 0
        self.malformed = 0
        # Each tool call the CLI made, by how it ended as the CLI saw it: one that was refused
        # (by aegis's gate, by the CLI's own settings, or by the CLI before it reached aegis)
        # or that failed is not a call that worked, whatever the model says afterwards.
        self.calls: list[EndedCall] = []
        self.input_tokens = 0
        self.output_tokens = 0

    def feed(self, line: bytes | str) -> list[str]:
        """Read one line; the progress steps it holds (often none)."""
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        if not line.strip():
            return []
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            self.malformed += 1
            return []
        self.events += 1
        try:
            return [step for step in self.event(event) if step]
        except (AttributeError, TypeError, ValueError):  # JSON, but not in the shape we know
            self.malformed += 1
            return []

    def _session(self, value: Any) -> None:
        """Keep the session id the stream names, if it looks like one: it goes on a later
        command line, so anything that could read as a flag or hold odd characters is not kept."""
        if isinstance(value, str) and SESSION_ID.match(value):
            self.session = value

    @abc.abstractmethod
    def event(self, event: dict[str, Any]) -> list[str]:
        """The steps worth showing for one event of this CLI's stream."""

    def answer(self) -> str | None:
        """The run's result: the final result event, else the last assistant message."""
        if self.result is not None and self.result.strip():
            return self.result
        if self.last_text is not None and self.last_text.strip():
            return self.last_text
        return None

    def _wrote(self, text: Any) -> str | None:
        if not isinstance(text, str) or not text.strip():
            return None
        self.last_text = text
        return "writing: " + one_line(text)

    def _ended_call(self, tool: Any, failed: bool, why: Any = None, shown: Any = None) -> None:
        """A call has ended: ``tool`` as the stream names it (what decides whether it only
        reads), ``shown`` as the owner is told (a command's text), and why it failed."""
        reason = (clip_error(_text_of(why)) or "it failed") if failed else None
        self.calls.append(EndedCall(str(tool), failed, one_line(str(shown or tool), 60), reason))


class ClaudeStream(StreamReader):
    """A tool's use is an ``assistant`` event's ``tool_use`` block; how it ended, the
    ``tool_result`` block (``is_error``) of a later ``user`` event with the same id."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[Any, Any] = {}  # tool_use id -> tool, until its result comes

    def event(self, event: dict[str, Any]) -> list[str]:
        kind = event.get("type")
        if "session_id" in event:
            self._session(event["session_id"])
        if kind == "system" and event.get("subtype") == "init":
            model = event.get("model")
            self.model = model if isinstance(model, str) else None
            return [f"started ({model})" if self.model else "started"]
        if kind == "assistant":
            content = (event.get("message") or {}).get("content") or []
            steps = []
            for block in content if isinstance(content, list) else []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text":
                    steps.append(self._wrote(block.get("text")))
                elif block.get("type") == "tool_use":
                    self.pending[block.get("id")] = block.get("name")
                    steps.append(one_line(f"using {block.get('name')}{_brief(block.get('input'))}"))
            return steps
        if kind == "user":
            content = (event.get("message") or {}).get("content") or []
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    tool = self.pending.pop(block.get("tool_use_id"), "a tool")
                    self._ended_call(tool, block.get("is_error") is True, block.get("content"))
            return []
        if kind == "result":
            self._usage(event.get("usage") or {})
            text = event.get("result")
            if event.get("is_error") or event.get("subtype") not in (None, "success"):
                self.failure = clip_error(text if isinstance(text, str) and text else None)
                self.failure = self.failure or f"it ended with {event.get('subtype')}"
            elif isinstance(text, str):
                self.result = text
        return []

    def _usage(self, usage: dict[str, Any]) -> None:
        self.input_tokens += _int(usage.get("input_tokens"))
        self.output_tokens += _int(usage.get("output_tokens"))


class CodexStream(StreamReader):
    def event(self, event: dict[str, Any]) -> list[str]:
        kind = event.get("type")
        item = event.get("item") or {}
        if kind == "thread.started":
            self._session(event.get("thread_id"))
        if kind == "item.started":
            return [self._started(item)]
        if kind == "item.completed":
            return [self._completed(item)]
        if kind == "turn.completed":
            usage = event.get("usage") or {}
            self.input_tokens += _int(usage.get("input_tokens"))
            self.output_tokens += _int(usage.get("output_tokens"))
            self.result = self.last_text
        elif kind == "turn.failed":
            self.failure = clip_error((event.get("error") or {}).get("message"))
            self.failure = self.failure or "the turn failed"
        elif kind == "error":
            self.failure = clip_error(event.get("message")) or "the stream reported an error"
        return []

    def _started(self, item: dict[str, Any]) -> str | None:
        kind = item.get("type")
        if kind == "command_execution":
            return "running " + one_line(str(item.get("command", "")))
        if kind == "mcp_tool_call":
            return f"calling {item.get('server')}.{item.get('tool')}"
        if kind == "web_search":
            return "searching " + one_line(str(item.get("query", "")))
        return None

    def _completed(self, item: dict[str, Any]) -> str | None:
        kind = item.get("type")
        if kind == "agent_message":
            return self._wrote(item.get("text"))
        if kind == "reasoning":
            return "thinking"
        if kind in ("command_execution", "mcp_tool_call", "web_search", "file_change"):
            # status: completed, or failed (an MCP call refused by Codex's own approval or by
            # aegis, a command that exited non-zero) or declined.
            status, error = item.get("status"), item.get("error")
            failed = status not in (None, "completed") or error is not None
            why = error.get("message") if isinstance(error, dict) else error
            tool = f"{item.get('server')}.{item.get('tool')}" if kind == "mcp_tool_call" else kind
            self._ended_call(tool, failed, why or _codex_result_text(item), _codex_tool(item))
            if kind == "file_change":
                changes = item.get("changes") or []
                paths = [c.get("path", "") for c in changes if isinstance(c, dict)]
                return one_line("changing " + (", ".join(paths) or "files"))
        return None


class OpencodeStream(StreamReader):
    def __init__(self) -> None:
        super().__init__()
        self.step_text: list[str] = []

    def event(self, event: dict[str, Any]) -> list[str]:
        kind = event.get("type")
        part = event.get("part") or {}
        if "sessionID" in event:
            self._session(event["sessionID"])
        if kind == "step_start":
            self.step_text = []
        elif kind == "text":
            text = part.get("text")
            if isinstance(text, str) and text.strip():
                self.step_text.append(text)
                return [self._wrote("\n".join(self.step_text))]
        elif kind == "tool_use":
            state = part.get("state") or {}
            failed = state.get("status") != "completed"
            self._ended_call(part.get("tool"), failed, state.get("error") or state.get("output"))
            mark = " (failed)" if failed else ""
            return [one_line(f"used {part.get('tool')}{_brief(state.get('input'))}{mark}")]
        elif kind == "step_finish":
            tokens = part.get("tokens") or {}
            self.input_tokens += _int(tokens.get("input"))
            self.output_tokens += _int(tokens.get("output"))
            if part.get("reason") != "tool-calls" and self.step_text:
                self.result = "\n".join(self.step_text)
        elif kind == "error":
            error = event.get("error") or {}
            message = (error.get("data") or {}).get("message") or error.get("name")
            self.failure = clip_error(message) or "it reported an error"
        return []


def one_line(text: str, limit: int = STEP_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def clip_error(text: Any) -> str | None:
    if not isinstance(text, str) or not text.strip():
        return None
    return one_line(text, ERROR_CHARS)


def _text_of(content: Any) -> str | None:
    """A tool result's text: a string, or the text parts of a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict)]
        return " ".join(p for p in parts if isinstance(p, str)) or None
    return None


def _codex_tool(item: dict[str, Any]) -> str:
    if item.get("type") == "mcp_tool_call":
        return f"{item.get('server')}.{item.get('tool')}"
    if item.get("type") == "command_execution":
        return one_line(str(item.get("command", "a command")), 60)
    return str(item.get("type"))


def _codex_result_text(item: dict[str, Any]) -> str | None:
    """What a failed Codex item said: an MCP call's result text, a command's output."""
    result = item.get("result")
    if isinstance(result, dict):
        return _text_of(result.get("content"))
    output = item.get("aggregated_output")
    return output if isinstance(output, str) else None


def _brief(arguments: Any) -> str:
    """The first argument of a tool use, enough to tell one from another (a path, a command)."""
    if not isinstance(arguments, dict) or not arguments:
        return ""
    value = next(iter(arguments.values()))
    return f" {one_line(str(value), 40)}" if isinstance(value, str | int | float) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
