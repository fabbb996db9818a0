"""A tiny real MCP server for tests that drive a coding CLI: streamable HTTP (stateless) on a
free loopback port, served by uvicorn in a thread of its own, with two tools:

- ``echo(text)``: read-only (``readOnlyHint: true``), answers ``echo: <text>``;
- ``write(text)``: no hints, so a client must take it as one that may change things; answers
  ``wrote: <text>``.

Each call is kept in ``calls`` (tool name, arguments), so a test can tell whether a CLI's call
reached the server at all or was refused before it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server import MCPServer
from mcp.types import ToolAnnotations

PATH = "/mcp"


@dataclass
class EchoMcp:
    url: str  # the streamable HTTP endpoint, ``http://127.0.0.1:<port>/mcp``
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def _server(echo: EchoMcp) -> MCPServer:
    server = MCPServer("echo")

    @server.tool(name="echo", annotations=ToolAnnotations(read_only_hint=True))
    def echo_tool(text: str) -> str:
        """Echo the text back."""
        echo.calls.append(("echo", {"text": text}))
        return f"echo: {text}"

    @server.tool(name="write")
    def write_tool(text: str) -> str:
        """Pretend to write the text somewhere."""
        echo.calls.append(("write", {"text": text}))
        return f"wrote: {text}"

    return server


@contextlib.contextmanager
def echo_mcp_in_thread() -> Iterator[EchoMcp]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    echo = EchoMcp(f"http://127.0.0.1:{sock.getsockname()[1]}{PATH}")
    app = _server(echo).streamable_http_app(streamable_http_path=PATH, stateless_http=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        # uvicorn says it is listening only through this flag.
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the echo MCP server did not start")
            time.sleep(0.01)
        yield echo
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
