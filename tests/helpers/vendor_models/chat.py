"""OpenAI Chat Completions (``POST /v1/chat/completions``, ``stream: true``), as OpenCode's
``@ai-sdk/openai-compatible`` provider uses it: ``chat.completion.chunk`` events whose deltas
carry the text or the tool_calls (name and id first, then the arguments), a last chunk with
the finish_reason, a usage chunk when ``stream_options.include_usage`` asks, then ``[DONE]``.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from aiohttp import web

from tests.helpers.vendor_models import sse
from tests.helpers.vendor_models.script import Call, Say, Seen, ToolResult, text_of

PATH = "/v1/chat/completions"
_ids = itertools.count(1)


def parse(path: str, body: dict[str, Any]) -> Seen:
    names: dict[str, str] = {}
    results = []
    for message in body.get("messages", []):
        for tool_call in message.get("tool_calls") or []:
            names[tool_call.get("id", "")] = tool_call.get("function", {}).get("name")
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id", "")
            results.append(ToolResult(call_id, names.get(call_id), text_of(message.get("content"))))
    tools = [tool["function"]["name"] for tool in body.get("tools", []) if "function" in tool]
    return Seen(path, body, main=bool(tools), tool_names=tools, tool_results=results)


async def respond(
    request: web.Request, body: dict[str, Any], step: Say | Call
) -> web.StreamResponse:
    number = next(_ids)
    if isinstance(step, Say):
        delta: dict[str, Any] = {"role": "assistant", "content": step.text}
        finish = "stop"
    else:
        function = {"name": step.name, "arguments": json.dumps(step.arguments)}
        call = {"index": 0, "id": f"call_{number}", "type": "function", "function": function}
        delta, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    head = {"id": f"chatcmpl-{number}", "created": 0, "model": body.get("model", "scripted")}
    if not body.get("stream"):
        message = {key: value for key, value in delta.items()}
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return web.json_response(
            {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
        )
    response = await sse.open_stream(request)
    chunk = {**head, "object": "chat.completion.chunk"}
    await sse.send(
        response, {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    )
    await sse.send(
        response, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    )
    if (body.get("stream_options") or {}).get("include_usage"):
        await sse.send(response, {**chunk, "choices": [], "usage": usage})
    await sse.send(response, "[DONE]")
    await response.write_eof()
    return response
