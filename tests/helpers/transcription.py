"""A fake OpenAI-compatible transcription server over real HTTP (aiohttp, in-process, on a
free port), answering from a script: each request takes the next step (an answer, an error
status, a hang past the client's ceiling), and the last step answers every request after it.
Every request is kept (model, file name, bytes, Authorization header) for the test to check."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from tests.helpers.stack import free_port

Step = Callable[[web.Request], Awaitable[web.StreamResponse]]
PATH = "/v1/audio/transcriptions"


def answer(text: str) -> Step:
    async def step(request: web.Request) -> web.StreamResponse:
        return web.json_response({"text": text})

    return step


def status(code: int) -> Step:
    async def step(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": f"status {code}"}}, status=code)

    return step


@dataclass
class Received:
    model: str
    filename: str
    content_type: str
    audio: bytes
    authorization: str | None


@dataclass
class FakeTranscriptionServer:
    script: list[Step] = field(default_factory=list)
    requests: list[Received] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hang(self) -> Step:
        """Answer nothing until the server stops (the client's ceiling ends the wait)."""

        async def step(request: web.Request) -> web.StreamResponse:
            await self.released.wait()
            return web.json_response({"text": "too late"})

        return step

    def then(self, *steps: Step) -> None:
        self.script.extend(steps)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload = form["file"]
        self.requests.append(
            Received(
                model=str(form["model"]),
                filename=upload.filename,
                content_type=upload.content_type,
                audio=upload.file.read(),
                authorization=request.headers.get("Authorization"),
            )
        )
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return await step(request)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FakeTranscriptionServer]:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(PATH, self._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        try:
            yield self
        finally:
            self.released.set()
            await runner.cleanup()
