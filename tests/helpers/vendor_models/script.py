"""What a scripted model answers, and what it was asked: the steps a test gives, and the
requests the server kept. Wire formats live beside this (anthropic.py, responses.py, chat.py);
each turns a request body into a ``Seen`` and a step into its own stream of events.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# What the model says once the script has run out: the CLI ends its turn, the test can still
# assert (``model.ran_out`` tells it happened).
RAN_OUT_TEXT = "done"


@dataclass(frozen=True)
class Say:
    """A final text answer: the CLI's turn ends."""

    text: str


@dataclass(frozen=True)
class Call:
    """A tool call, named as the CLI offered the tool to the model; the CLI runs it and sends
    the result in its next request."""

    name: str
    arguments: dict[str, Any]


def say(text: str) -> Say:
    return Say(text)


def call(name: str, arguments: dict[str, Any] | None = None) -> Call:
    return Call(name, dict(arguments or {}))


@dataclass(frozen=True)
class ToolResult:
    """A tool's result as the CLI sent it back to the model."""

    call_id: str
    name: str | None  # the tool the model called (from the same request), where it is there
    text: str


@dataclass
class Seen:
    """One request the server got, parsed by its wire format."""

    path: str
    body: dict[str, Any]
    main: bool  # a turn of the conversation (it offers tools); else a side request (a title …)
    tool_names: list[str] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The whole body as text, for ``in`` checks."""
        return json.dumps(self.body, ensure_ascii=False)


Step = Say | Call | Callable[[Seen], Say | Call]


@dataclass
class Script:
    """The steps, consumed one per main request, and every request kept, in order.

    Handlers run on the server's loop while a test may read from another thread, so the
    lists are only appended to, under a lock."""

    steps: list[Step]
    requests: list[Seen] = field(default_factory=list)  # main requests
    side_requests: list[Seen] = field(default_factory=list)
    ran_out: bool = False
    # What a step function raised: the CLI is told "scripted step failed" so it ends its turn,
    # and the server raises the first of these when its block ends.
    errors: list[BaseException] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, seen: Seen) -> Say | Call:
        """The step for ``seen``: the next one for a main request, a short text for others."""
        with self._lock:
            if not seen.main:
                self.side_requests.append(seen)
                return Say(RAN_OUT_TEXT)
            self.requests.append(seen)
            if not self.steps:
                self.ran_out = True
                return Say(RAN_OUT_TEXT)
            step = self.steps.pop(0)
        if isinstance(step, Say | Call):
            return step
        try:
            return step(seen)
        except Exception as exc:
            self.errors.append(exc)
            return Say(f"scripted step failed: {exc!r}")

    @property
    def tool_results(self) -> list[ToolResult]:
        """Every tool result the main requests carried, once each (a CLI resends the whole
        conversation every turn), in the order they first came."""
        seen_ids: set[str] = set()
        results = []
        for request in list(self.requests):
            for result in request.tool_results:
                if result.call_id not in seen_ids:
                    seen_ids.add(result.call_id)
                    results.append(result)
        return results

    def reached_model(self, text: str) -> bool:
        """Whether ``text`` appears anywhere in any request the model got, side ones too."""
        return any(text in seen.text for seen in [*self.requests, *self.side_requests])


def text_of(content: Any) -> str:
    """The text of a content value: a string, or a list of parts with ``text`` (Anthropic's
    blocks, the Responses API's input_text, Chat's parts), joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return text_of(content.get("text", content.get("content")))
    if isinstance(content, Iterable):
        return "\n".join(text_of(part) for part in content)
    return str(content)
