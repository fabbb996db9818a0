"""A scripted OpenAI-compatible model server for tests: a real aiohttp server on a free local
port that answers ``POST /v1/chat/completions`` with what the test queued (a final text, tool
calls, an error status, a body that is not JSON, a wait), and keeps every request it got.

A request that finds nothing queued is answered 500 and kept in ``unexpected``; leaving
``running_fake_model`` with one there fails the test, so a harness that asks more often than
the test meant is caught, never papered over.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.helpers.stack import free_port


@dataclass
class Got:
    """One request the fake was sent."""

    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body["messages"]

    @property
    def tool_names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.body.get("tools", [])]


@dataclass
class FakeModel:
    port: int = field(default_factory=free_port)
    script: deque = field(default_factory=deque)
    requests: list[Got] = field(default_factory=list)
    unexpected: list[Got] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=itertools.count)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # What to answer, in order

    def answer(self, text: str, *, prompt_tokens: int = 10, completion_tokens: int = 5) -> None:
        message = {"role": "assistant", "content": text}
        self.script.append(("json", 200, _completion(message, prompt_tokens, completion_tokens)))

    def call(
        self,
        name: str,
        args: dict[str, Any] | str,
        *,
        text: str | None = None,
        prompt_tokens: int = 10,
        completion_tokens: int = 5,
    ) -> None:
        """A tool call of ``name`` (the name as offered); a str ``args`` is sent as written."""
        arguments = args if isinstance(args, str) else json.dumps(args)
        call = {
            "id": f"call_{next(self._ids)}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        message = {"role": "assistant", "content": text, "tool_calls": [call]}
        self.script.append(("json", 200, _completion(message, prompt_tokens, completion_tokens)))

    def fail(self, status: int, text: str = "scripted failure") -> None:
        self.script.append(("json", status, {"error": {"message": text}}))

    def garbage(self) -> None:
        self.script.append(("raw", 200, b"<html>not a completion</html>"))

    def hang(self, seconds: float) -> None:
        self.script.append(("hang", 200, seconds))

    def drop(self) -> None:
        """Close the connection without an answer."""
        self.script.append(("drop", 0, None))

    # Serving

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        got = Got(await request.json(), dict(request.headers))
        self.requests.append(got)
        if not self.script:
            self.unexpected.append(got)
            return web.json_response({"error": {"message": "nothing scripted"}}, status=500)
        kind, status, payload = self.script.popleft()
        if kind == "hang":
            await asyncio.sleep(payload)
            return web.json_response({"error": {"message": "too late"}}, status=500)
        if kind == "drop":
            request.transport.close()
            return web.Response(status=500)
        if kind == "raw":
            return web.Response(body=payload, status=status, content_type="text/html")
        return web.json_response(payload, status=status)

    async def wait_for(self, count: int, timeout: float = 15.0) -> list[Got]:
        """The first ``count`` requests, once that many have arrived."""
        deadline = asyncio.get_running_loop().time() + timeout
        while len(self.requests) < count:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{len(self.requests)} of {count} requests came")
            await asyncio.sleep(0.02)
        return self.requests[:count]


def _completion(message: dict, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


@contextlib.asynccontextmanager
async def running_fake_model() -> AsyncIterator[FakeModel]:
    fake = FakeModel()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake._completions)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", fake.port).start()
    try:
        yield fake
    finally:
        await runner.cleanup()
    assert not fake.unexpected, f"the model was asked {len(fake.unexpected)} times unscripted"
