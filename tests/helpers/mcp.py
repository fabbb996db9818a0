"""An MCP client as a coding agent holds one: the real ``mcp`` SDK over streamable HTTP, with
an agent's bearer token."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from aegis.mcp.listener import MCP_PATH
from bot.config.settings import Settings


def mcp_url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.mcp_port}{MCP_PATH}"


@contextlib.asynccontextmanager
async def mcp_client(
    settings: Settings, token: str | None, *, timeout: float = 60.0
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout))
    async with http:
        transport = streamable_http_client(mcp_url(settings), http_client=http)
        async with Client(transport, read_timeout_seconds=timeout) as client:
            yield client


async def agent_of(tokens, token) -> str | None:
    """The slug of the agent a token speaks for, or None: what the MCP server's check sees."""
    holder = await tokens.identify(token)
    return holder.agent if holder else None
