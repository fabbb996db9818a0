"""The Anthropic Messages API (``POST /v1/messages``, ``stream: true``), as Claude Code uses it.

docs.anthropic.com/en/api/messages-streaming: message_start, then per content block
content_block_start / content_block_delta (text_delta, or input_json_delta for a tool_use) /
content_block_stop, then message_delta with the stop_reason, then message_stop.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from aiohttp import web

from tests.helpers.vendor_models import sse
from tests.helpers.vendor_models.script import Call, Say, Seen, ToolResult, text_of

PATH = "/v1/messages"
_ids = itertools.count(1)


def parse(path: str, body: dict[str, Any]) -> Seen:
    names: dict[str, str] = {}
    results = []
    for message in body.get("messages", []):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_use":
                names[block["id"]] = block["name"]
            elif block.get("type") == "tool_result":
                call_id = block.get("tool_use_id", "")
                results.append(
                    ToolResult(call_id, names.get(call_id), text_of(block.get("content")))
                )
    tools = [tool["name"] for tool in body.get("tools", []) if "name" in tool]
    return Seen(path, body, main=bool(tools), tool_names=tools, tool_results=results)


async def respond(
    request: web.Request, body: dict[str, Any], step: Say | Call
) -> web.StreamResponse:
    if not body.get("stream"):
        return web.json_response(_message(body, [_block(step)], _stop_reason(step)))
    response = await sse.open_stream(request)
    start = _message(body, [], None)

    async def send(data: dict[str, Any]) -> None:
        await sse.send(response, data, event=data["type"])

    await send({"type": "message_start", "message": start})
    block = _block(step)
    if isinstance(step, Say):
        await send(
            {"type": "content_block_start", "index": 0, "content_block": {**block, "text": ""}}
        )
        delta = {"type": "text_delta", "text": step.text}
    else:
        await send(
            {"type": "content_block_start", "index": 0, "content_block": {**block, "input": {}}}
        )
        delta = {"type": "input_json_delta", "partial_json": json.dumps(step.arguments)}
    await send({"type": "content_block_delta", "index": 0, "delta": delta})
    await send({"type": "content_block_stop", "index": 0})
    await send(
        {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(step), "stop_sequence": None},
            "usage": {"output_tokens": 5},
        }
    )
    await send({"type": "message_stop"})
    await response.write_eof()
    return response


async def count_tokens(request: web.Request) -> web.Response:
    return web.json_response({"input_tokens": 10})


def _block(step: Say | Call) -> dict[str, Any]:
    if isinstance(step, Say):
        return {"type": "text", "text": step.text}
    return {
        "type": "tool_use",
        "id": f"toolu_{next(_ids):04d}",
        "name": step.name,
        "input": step.arguments,
    }


def _stop_reason(step: Say | Call) -> str:
    return "end_turn" if isinstance(step, Say) else "tool_use"


def _message(body: dict[str, Any], content: list, stop_reason: str | None) -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
