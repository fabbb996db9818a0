"""The OpenAI Responses API (``POST /v1/responses``, streamed), as Codex uses it.

platform.openai.com/docs/api-reference/responses-streaming: response.created, then per output
item response.output_item.added, its deltas (response.output_text.delta, or
response.function_call_arguments.delta / .done) and response.output_item.done, then
response.completed. Codex treats a stream that ends before response.completed as a failure.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from aiohttp import web

from tests.helpers.vendor_models import sse
from tests.helpers.vendor_models.script import Call, Say, Seen, ToolResult, text_of

PATH = "/v1/responses"
_ids = itertools.count(1)
_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


def parse(path: str, body: dict[str, Any]) -> Seen:
    names: dict[str, str] = {}
    results = []
    for item in body.get("input", []):
        kind = item.get("type")
        if kind in _CALLS:
            name = item.get("name", kind)
            namespace = item.get("namespace")
            names[item.get("call_id", "")] = f"{namespace}__{name}" if namespace else name
        elif kind in _OUTPUTS:
            call_id = item.get("call_id", "")
            output = item.get("output")
            if isinstance(output, dict):  # older Codex: {"content": ..., "success": ...}
                output = output.get("content")
            results.append(ToolResult(call_id, names.get(call_id), text_of(output)))
    tools = tool_names(body.get("tools", []))
    return Seen(path, body, main=bool(tools), tool_names=tools, tool_results=results)


def tool_names(tools: list[dict[str, Any]]) -> list[str]:
    """The tools offered: a function by its name, a member of a ``namespace`` tool (Codex puts
    each MCP server's tools in one, ``mcp__<server>``) as ``<namespace>__<name>``, a hosted
    tool (web_search) by its type."""
    names = []
    for tool in tools:
        if tool.get("type") == "namespace":
            names.extend(f"{tool['name']}__{member['name']}" for member in tool.get("tools", []))
        else:
            names.append(tool.get("name", tool.get("type", "?")))
    return names


def _resolve(tools: list[dict[str, Any]], name: str) -> tuple[str | None, str]:
    """(namespace, name) for a call of ``name`` as tool_names lists it."""
    for tool in tools:
        if tool.get("type") == "namespace":
            for member in tool.get("tools", []):
                if name == f"{tool['name']}__{member['name']}":
                    return tool["name"], member["name"]
    return None, name


async def respond(
    request: web.Request, body: dict[str, Any], step: Say | Call
) -> web.StreamResponse:
    response = await sse.open_stream(request)
    number = next(_ids)
    head = {"id": f"resp_{number}", "object": "response", "model": body.get("model", "scripted")}

    async def send(kind: str, **data: Any) -> None:
        await sse.send(response, {"type": kind, **data}, event=kind)

    await send("response.created", response={**head, "status": "in_progress", "output": []})
    if isinstance(step, Say):
        item = {"type": "message", "id": f"msg_{number}", "role": "assistant", "content": []}
        await send(
            "response.output_item.added", output_index=0, item={**item, "status": "in_progress"}
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        await send("response.content_part.added", **where, part=part)
        await send("response.output_text.delta", **where, delta=step.text)
        await send("response.output_text.done", **where, text=step.text)
        done = {**item, "status": "completed", "content": [{**part, "text": step.text}]}
    else:
        arguments = json.dumps(step.arguments)
        item = {
            "type": "function_call",
            "id": f"fc_{number}",
            "call_id": f"call_{number}",
            "name": step.name,
            "arguments": "",
        }
        namespace, item["name"] = _resolve(body.get("tools", []), step.name)
        if namespace:
            item["namespace"] = namespace
        await send(
            "response.output_item.added", output_index=0, item={**item, "status": "in_progress"}
        )
        where = {"item_id": item["id"], "output_index": 0}
        await send("response.function_call_arguments.delta", **where, delta=arguments)
        await send("response.function_call_arguments.done", **where, arguments=arguments)
        done = {**item, "status": "completed", "arguments": arguments}
    await send("response.output_item.done", output_index=0, item=done)
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    await send(
        "response.completed",
        response={**head, "status": "completed", "output": [done], "usage": usage},
    )
    await response.write_eof()
    return response
