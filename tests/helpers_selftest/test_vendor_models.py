"""The scripted model server on its own (no CLI, so these run where npm is missing): the steps
advance on main requests only, tool results are read back in each wire format, and a step
function that fails fails the test."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from tests.helpers.vendor_models import (
    RAN_OUT_TEXT,
    call,
    say,
    scripted_model,
    scripted_model_in_thread,
)

TOOLS = {
    "/v1/messages": [{"name": "Read", "input_schema": {}}],
    "/v1/responses": [{"type": "function", "name": "exec_command", "parameters": {}}],
    "/v1/chat/completions": [{"type": "function", "function": {"name": "read"}}],
}


async def _events(response: aiohttp.ClientResponse) -> list:
    text = await response.text()
    return [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]


async def test_anthropic_streams_a_tool_use_then_text_and_side_requests_do_not_advance():
    async with scripted_model([call("Read", {"file_path": "a"}), say("ok")]) as model:
        async with aiohttp.ClientSession() as http:
            url = model.url + "/v1/messages"
            main = {"stream": True, "tools": TOOLS["/v1/messages"], "messages": []}
            async with http.post(url, json={"stream": True, "messages": []}) as side:
                assert RAN_OUT_TEXT in "".join(await _events(side))
            async with http.post(url, json=main) as first:
                events = [json.loads(data) for data in await _events(first)]
            result = {"type": "tool_result", "tool_use_id": "toolu_x", "content": "file text"}
            use = {"type": "tool_use", "id": "toolu_x", "name": "Read", "input": {}}
            main["messages"] = [
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [result]},
            ]
            async with http.post(url, json=main) as second:
                assert '"text": "ok"' in "".join(await _events(second))

    kinds = [event["type"] for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert events[2]["delta"] == {"type": "input_json_delta", "partial_json": '{"file_path": "a"}'}
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert len(model.requests) == 2 and len(model.side_requests) == 1
    assert model.tool_results[0].name == "Read" and model.tool_result_texts == ["file text"]
    assert not model.ran_out


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions"])
async def test_openai_formats_stream_and_the_script_runs_out_to_done(path):
    async with scripted_model([say("hello")]) as model:
        async with aiohttp.ClientSession() as http:
            body = {"stream": True, "tools": TOOLS[path], "input": [], "messages": []}
            for _ in range(2):
                async with http.post(model.url + path, json=body) as response:
                    events = await _events(response)

    assert RAN_OUT_TEXT in "".join(events)
    assert len(model.requests) == 2 and model.ran_out
    if path == "/v1/responses":
        assert json.loads(events[-1])["type"] == "response.completed"
    else:
        assert events[-1] == "[DONE]"


async def test_a_failing_step_function_fails_the_test_when_the_server_stops():
    def wrong(request):
        raise AssertionError("not what I expected")

    with pytest.raises(AssertionError, match="not what I expected"):
        async with scripted_model([wrong]) as model:
            async with aiohttp.ClientSession() as http:
                body = {"stream": True, "tools": TOOLS["/v1/messages"], "messages": []}
                async with http.post(model.url + "/v1/messages", json=body) as response:
                    assert "scripted step failed" in "".join(await _events(response))


def test_in_a_thread_too_a_failing_step_function_fails_the_test():
    def wrong(request):
        raise AssertionError("not what I expected")

    async def ask(url: str) -> None:
        async with aiohttp.ClientSession() as http:
            body = {"stream": True, "tools": TOOLS["/v1/messages"], "messages": []}
            async with http.post(url + "/v1/messages", json=body) as response:
                await response.read()

    with pytest.raises(AssertionError, match="not what I expected"):
        with scripted_model_in_thread([wrong]) as model:
            asyncio.run(ask(model.url))
