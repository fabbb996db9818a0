"""The scripted model server: one aiohttp app on a free loopback port that answers all three
wire formats (a CLI only ever asks one), run in the test's loop or in a thread of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field

from aiohttp import web

from tests.helpers.vendor_models import anthropic, chat, responses
from tests.helpers.vendor_models.script import Script, Seen, Step, ToolResult

WIRES = {wire.PATH: wire for wire in (anthropic, responses, chat)}


@dataclass
class ScriptedModel:
    """A running server: ``url`` (no ``/v1``), what it was asked, and the script's state."""

    url: str
    script: Script
    # Requests to paths no wire format knows (answered 404): a CLI reaching for something new.
    unknown: list[tuple[str, str]] = field(default_factory=list)

    @property
    def requests(self) -> list[Seen]:
        """The main requests, one per step taken (and any after the script ran out)."""
        return self.script.requests

    @property
    def side_requests(self) -> list[Seen]:
        return self.script.side_requests

    @property
    def tool_results(self) -> list[ToolResult]:
        return self.script.tool_results

    @property
    def tool_result_texts(self) -> list[str]:
        return [result.text for result in self.script.tool_results]

    @property
    def ran_out(self) -> bool:
        return self.script.ran_out

    def reached_model(self, text: str) -> bool:
        return self.script.reached_model(text)


def _app(model: ScriptedModel) -> web.Application:
    async def turn(request: web.Request) -> web.StreamResponse:
        wire = WIRES[request.path]
        body = json.loads(await request.read())
        step = model.script.answer(wire.parse(request.path, body))
        return await wire.respond(request, body, step)

    async def unknown(request: web.Request) -> web.Response:
        model.unknown.append((request.method, request.path))
        return web.json_response({"error": {"message": "not scripted"}}, status=404)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    for path in WIRES:
        app.router.add_post(path, turn)
    app.router.add_post("/v1/messages/count_tokens", anthropic.count_tokens)
    app.router.add_route("*", "/{tail:.*}", unknown)
    return app


@contextlib.asynccontextmanager
async def scripted_model(steps: Sequence[Step]) -> AsyncIterator[ScriptedModel]:
    """Serve ``steps`` on 127.0.0.1 (a free port) in the running loop until the block ends."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    model = ScriptedModel(f"http://127.0.0.1:{sock.getsockname()[1]}", Script(list(steps)))
    runner = web.AppRunner(_app(model), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        yield model
    finally:
        await runner.cleanup()
    if model.script.errors:
        raise model.script.errors[0]


@contextlib.contextmanager
def scripted_model_in_thread(steps: Sequence[Step]) -> Iterator[ScriptedModel]:
    """``scripted_model`` in a loop of its own thread, for a test that blocks on a subprocess."""
    started: concurrent.futures.Future[ScriptedModel] = concurrent.futures.Future()
    stopped: concurrent.futures.Future[None] = concurrent.futures.Future()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def serve() -> None:
        # What goes wrong is handed to the test's thread, never raised in this one.
        try:
            async with scripted_model(steps) as model:
                started.set_result(model)
                await stop.wait()
        except BaseException as exc:
            (stopped if started.done() else started).set_exception(exc)
        else:
            stopped.set_result(None)

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    try:
        yield started.result(timeout=10)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        loop.close()
    stopped.result(timeout=0)  # a step function's failure, once the block ended without one
