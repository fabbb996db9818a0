"""The MCP server's port, held from the start; the server itself loaded on its first caller.

The ``mcp`` SDK costs about half a second and 50 MB to import, and most hours no agent calls.
So the web process binds the loopback port at once (a port in use is reported at start, and
the kernel queues the first connections), and only when a client connects does it import the
SDK, off the event loop, and serve on that same socket (aegis/mcp/server.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)
MCP_PATH = "/mcp"
BACKLOG = 128


def bind_loopback(port: int) -> socket.socket:
    """The listening socket on 127.0.0.1:``port``; OSError, in words, if it cannot be had."""
    # IPPROTO_TCP said outright: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose
    # protocol says TCP, and with it on a streamed reply waits 40 ms for the client's ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise OSError(
            f"the MCP server cannot listen on 127.0.0.1:{port} ({exc.strerror}; is the port in "
            "use? set AEGIS_MCP_PORT)"
        ) from None
    sock.setblocking(False)
    return sock


@dataclass
class Listener:
    """Whether the MCP server can answer: its port is held and it has not failed."""

    live: bool = True


@contextlib.asynccontextmanager
async def listening(port: int, tools: Any) -> AsyncIterator[Listener]:
    """Hold the port while the block runs; serve ``tools`` (aegis.mcp.server.ServedTools' parts)
    from the first connection on."""
    sock = bind_loopback(port)
    listener = Listener()
    task = asyncio.create_task(_serve_when_called(sock, tools, listener))
    try:
        yield listener
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=6)
        sock.close()


async def _serve_when_called(sock: socket.socket, parts: Any, listener: Listener) -> None:
    loop = asyncio.get_running_loop()
    called = asyncio.Event()
    loop.add_reader(sock.fileno(), called.set)  # a listening socket is readable: a connection
    try:
        await called.wait()
    finally:
        loop.remove_reader(sock.fileno())
    try:
        server = await asyncio.to_thread(importlib.import_module, "aegis.mcp.server")
        async with server.serving(server.ServedTools(**parts), sock):
            logger.info("an MCP client connected: the MCP server is loaded and serving")
            await asyncio.Event().wait()  # until cancelled
    except Exception:
        # Refuse connections rather than leave them hanging on a port nobody serves; the
        # bot goes on, and /healthz says the MCP server is down.
        logger.exception("the MCP server could not start; agents cannot reach aegis over MCP")
        listener.live = False
        sock.close()
