"""aegis's MCP server: the platform's tools for coding agents, gated here, on the server.

Streamable HTTP at ``http://127.0.0.1:<AEGIS_MCP_PORT>/mcp`` (loopback only), served by the web
process next to the bot. Every request carries an agent's bearer token
(``Authorization: Bearer …``); it is checked against the stored hashes before the body is read,
and a request without a valid one gets 401. Each call acts as the agent the token belongs to,
read from the token on every request, never from the arguments or the session.

A tool call goes through the same gate as a run's (bot/actions/actions.py): reads run at once, a
change makes an approval card and is held open while the owner decides (bot/actions/held_calls.py),
and a tool the server does not know is refused, never run. The server is stateless: each
request stands alone, so a retry after a restart is just another request.

``permission_prompt`` is the tool Claude Code asks before it uses one of its own built-in tools
(``--permission-prompt-tool mcp__aegis__permission_prompt``): the same policy decides, under the
tool name ``cli.<Name>``. It is offered only to agents granted ``cli.*`` (those that ask). Claude
Code also asks it about aegis's own tools (``mcp__aegis__<tool>``) when its settings do not allow
them: those are allowed, because the call itself comes here and the gate decides it then.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from aegis.mcp.listener import MCP_PATH
from bot.actions.audit import AuditEvent
from bot.actions.call import CallOutcome, CallStatus, ToolCall
from bot.actions.held_calls import HeldCalls
from bot.agents.tokens import AgentTokens, TokenHolder
from bot.core import Platform
from bot.errors import NameClash
from bot.tools.declarations import MCP_SERVER_NAME, PROMPT_TOOL
from bot.tools.offer import OfferedTool, offered, tool_text, wire_name

logger = logging.getLogger(__name__)
PERMISSION_PROMPT = PROMPT_TOOL
CLI_TOOL_PREFIX = "cli."
# How Claude Code names a tool of this server (``claude mcp add … aegis …``, README).
OWN_TOOL_PREFIX = f"mcp__{MCP_SERVER_NAME}__"
HOLDER = "aegis_token_holder"  # where a verified request keeps who it speaks for
MAX_BODY_BYTES = 1_048_576
INSTRUCTIONS = (
    "aegis's tools for its owner's data and machine. Reads answer at once. A change waits for "
    "the owner's approval: the call is held open up to 25 s, then returns an error that says "
    "nothing was done; retry the identical call at once until it runs or is refused."
)
PERMISSION_SCHEMA = {
    "type": "object",
    "properties": {
        "tool_name": {"type": "string", "maxLength": 200},
        "input": {"type": "object"},
        "tool_use_id": {"type": "string"},
    },
    "required": ["tool_name", "input"],
}


@dataclass
class ServedTools:
    """What the MCP server serves, for one platform."""

    platform: Platform
    tokens: AgentTokens
    held: HeldCalls
    owner_chat: int | None  # where an agent's cards go when it calls outside a run
    # agent -> (the catalog it was made from, its offer): made again only when aegis.yaml is
    _offers: dict[str, tuple[Any, list[OfferedTool]]] = field(default_factory=dict)

    def offer(self, agent: str) -> list[OfferedTool]:
        catalog = self.platform.catalog
        made = self._offers.get(agent)
        if made is not None and made[0] is catalog:
            return made[1]
        tools = self._offer(catalog, agent)
        self._offers[agent] = (catalog, tools)
        return tools

    def _offer(self, catalog, agent: str) -> list[OfferedTool]:
        spec = catalog.agent(agent)
        if spec is None:
            return []
        # A CLI's own built-ins (cli.*) are not tools to call: only permission_prompt asks
        # the gate about them.
        granted = [t for t in spec.granted_in(catalog) if not t.startswith(CLI_TOOL_PREFIX)]
        try:
            return offered(granted, catalog)
        except NameClash:
            logger.error("agent %s: two granted tools share a name; none are offered", agent)
            return []

    def asks_permission(self, agent: str) -> bool:
        """Whether this agent is offered ``permission_prompt``: it is granted ``cli.*`` (a CLI
        that asks aegis about its own built-ins)."""
        spec = self.platform.catalog.agent(agent)
        return spec is not None and any(g.startswith(CLI_TOOL_PREFIX) for g in spec.tools)

    async def list_tools(self, holder: TokenHolder) -> list[types.Tool]:
        tools = [
            types.Tool(
                name=tool.wire,
                description=tool.description,
                input_schema=tool.schema,
                annotations=types.ToolAnnotations(read_only_hint=tool.reads_only or None),
            )
            for tool in self.offer(holder.agent)
        ]
        if self.asks_permission(holder.agent):
            tools.append(
                types.Tool(
                    name=PERMISSION_PROMPT,
                    description="Asked by Claude Code before it uses one of its own tools; "
                    "aegis's policy answers allow or deny.",
                    input_schema=PERMISSION_SCHEMA,
                )
            )
        return tools

    async def call(
        self, holder: TokenHolder, name: str, args: Any, progress
    ) -> types.CallToolResult:
        if name == PERMISSION_PROMPT and self.asks_permission(holder.agent):
            return await self._permission(holder, args, progress)
        tool = {t.wire: t.name for t in self.offer(holder.agent)}.get(name)
        if tool is None:
            outcome = await self._not_offered(holder, name)
        else:
            outcome = await self._held(holder, tool, args, progress)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=tool_text(outcome))],
            is_error=not outcome.ran,
        )

    async def _not_offered(self, holder: TokenHolder, name: str) -> CallOutcome:
        """A name this agent was not offered is refused, never run, and the refusal audited
        (under the declared tool's name when the wire name is one)."""
        declared = {wire_name(tool): tool for tool in self.platform.catalog.tools}
        reason = f"no tool called {name[:100]!r} is offered to {holder.agent}"
        await self.platform.audit.record(
            AuditEvent.DENIED, reason, agent=holder.agent, tool=declared.get(name, name[:200])
        )
        return CallOutcome(CallStatus.DENIED, reason)

    async def _permission(self, holder: TokenHolder, args: Any, progress):
        if not isinstance(args, dict) or not isinstance(args.get("tool_name"), str):
            return _text("tool_name and input are required", error=True)
        tool_input = args.get("input")
        if not isinstance(tool_input, dict):
            return _text("input must be an object", error=True)
        asked = args["tool_name"]
        if asked.startswith(OWN_TOOL_PREFIX):
            # One of this server's own tools: the call itself comes here next, and the gate
            # decides it then; one not offered to this agent is refused now.
            wire = asked.removeprefix(OWN_TOOL_PREFIX)
            if wire in {t.wire for t in self.offer(holder.agent)}:
                return _text(json.dumps({"behavior": "allow", "updatedInput": tool_input}))
            outcome = await self._not_offered(holder, wire)
            return _text(json.dumps({"behavior": "deny", "message": tool_text(outcome)}))
        outcome = await self._held(holder, CLI_TOOL_PREFIX + asked, tool_input, progress)
        if outcome.ran:
            verdict = {"behavior": "allow", "updatedInput": tool_input}
        else:
            verdict = {"behavior": "deny", "message": tool_text(outcome)}
        return _text(json.dumps(verdict))

    async def _held(self, holder: TokenHolder, tool: str, args: Any, progress) -> CallOutcome:
        chat_id = await self._chat_for(holder)
        call = ToolCall(holder.agent, tool, args, chat_id, holder.run_id)
        if holder.run_id is None:
            return await self.held.call(call, progress=progress)
        run_id, held_on = holder.run_id, []

        async def on_hold(card: int) -> None:
            held_on.append(card)
            await self._show_step(run_id, f"waiting for your approval on card #{card}")

        outcome = await self.held.call(call, progress=progress, on_hold=on_hold)
        if held_on and outcome.status is not CallStatus.GATED:  # the wait is over, either way
            ended = "ran" if outcome.ran else "was not done"
            await self._show_step(run_id, f"card #{held_on[-1]} answered: {tool} {ended}")
        return outcome

    async def _show_step(self, run_id: int, step: str) -> None:
        """The run's message says what it waits for, from here: a CLI may print nothing about a
        call until it has ended (OpenCode), and a held call has not."""
        try:
            run = await self.platform.runs.show_step(run_id, step)
            if run is not None:
                await self.platform.show_run(run)
        except Exception:  # showing the wait is worth less than the call itself
            logger.warning("run %s: its step was not shown", run_id, exc_info=True)

    async def _chat_for(self, holder: TokenHolder) -> int | None:
        if holder.run_id is not None:
            run = await self.platform.runs.get(holder.run_id)
            if run is not None:
                return run.chat_id
        return self.owner_chat


def _text(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


def build_server(tools: ServedTools) -> Server:
    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await tools.list_tools(_holder(ctx)))

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        async def progress(done: float, total: float, message: str) -> None:
            await ctx.session.report_progress(done, total, message)

        return await tools.call(_holder(ctx), params.name, params.arguments or {}, progress)

    return Server(
        "aegis",
        version="0.1.0",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=lambda name: None,  # no Mcp-Param headers are declared
    )


def _holder(ctx) -> TokenHolder:
    # Set by RequireAgentToken for every request that reaches the server; a request without
    # it never gets here, so its absence is a bug, and it fails closed.
    return ctx.request.scope["state"][HOLDER]


class RequireAgentToken:
    """ASGI middleware: a request with no valid agent token gets 401 before its body is read."""

    def __init__(self, app: ASGIApp, tokens: AgentTokens) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        holder = await self._holder(scope)
        if holder is None:
            await _unauthorized(send)
            return
        scope.setdefault("state", {})[HOLDER] = holder
        await self.app(scope, receive, send)

    async def _holder(self, scope: Scope) -> TokenHolder | None:
        headers = dict(scope.get("headers") or ())
        raw = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, token = raw.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return await self.tokens.identify(token.strip())


async def _unauthorized(send: Send) -> None:
    body = json.dumps(
        {"error": "unauthorized", "detail": "an agent token is required (aegis agent token SLUG)"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="aegis"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def create_mcp_app(tools: ServedTools) -> Starlette:
    server = build_server(tools)
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        max_request_body_size=MAX_BODY_BYTES,
    )
    app.add_middleware(RequireAgentToken, tokens=tools.tokens)
    return app


class _QuietServer(uvicorn.Server):
    """uvicorn inside the web process's loop: the process's own signal handling stays, and a
    failed start is an error of this server, not the process's exit (uvicorn calls sys.exit)."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield

    async def serve(self, sockets=None) -> None:
        try:
            await super().serve(sockets)
        except SystemExit as exc:
            raise RuntimeError(f"the MCP server did not start (uvicorn: {exc.code})") from None


@contextlib.asynccontextmanager
async def serving(tools: ServedTools, sock: socket.socket) -> AsyncIterator[uvicorn.Server]:
    """Serve the MCP app on ``sock`` (bound to the loopback port) until the block ends."""
    config = uvicorn.Config(
        create_mcp_app(tools), log_level="warning", access_log=False, lifespan="on"
    )
    server = _QuietServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        # uvicorn says it is listening only through this flag.
        while not server.started and not task.done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        if task.done():
            task.result()  # raises why it could not start
            raise RuntimeError("the MCP server stopped as it started")
        yield server
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, timeout=5)
