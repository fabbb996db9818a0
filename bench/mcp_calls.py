"""MCP benchmarks: a read-only tool call against a bare ``mcp`` server, and a tap to the held
call's result.

    python bench/mcp_calls.py [--samples 300] [--taps 30] [--database sqlite|postgres]

``aegis up`` runs against the emulator as in bench/fullstack.py (whose machinery this imports),
on a fresh database, with an aegis.yaml granting the agent ``coder`` demo.read_clock,
demo.write_file and tasks.list; the agent's token is minted in that database. Its MCP server
(streamable HTTP, stateless, SSE responses) listens on a free loopback port. Then:

1. A read-only tool call (``--read-tool``, demo-read_clock by default: no store access of its
   own), called over HTTP with the real ``mcp`` client, against the baseline: a bare
   ``mcp.server.lowlevel.Server`` with one tool that returns a constant text, served by uvicorn
   in a process of its own, in the same transport mode. Between them, for the breakdown, the
   same bare server behind aegis's own token check (``RequireAgentToken`` with ``AgentTokens``
   on aegis's database): what the auth lookup alone adds. One client per server, the three
   interleaved call by call (each goes first in turn), after ``--warmup`` rounds.
2. A tap to the held retry returning its result. The agent calls demo-write_file with a fresh
   file name; the call is gated and held open (bot/actions/held_calls.py); when its card reaches the
   emulated chat, after ``--think`` seconds plus a random fraction of the held call's poll
   (so taps do not fall at one phase of it), Approve is tapped through the emulator's
   control API. Timed from just before the tap's POST to the held call returning its result,
   and, for context, to the card's edit "✅ Approved" appearing in the chat.

Numbers are only comparable within one run; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import fullstack
import httpx2
import mcp_types as types
import uvicorn
from aiohttp import web
from capture import fresh_database, with_store
from fullstack import PROBE_USER, heading, percentile
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp_taps import APPROVED, bench_taps, print_taps, settled_at  # the second part

from aegis.mcp.listener import MCP_PATH
from aegis.mcp.server import RequireAgentToken
from bot.agents.tokens import AgentTokens
from bot.store.database import Store
from emulator import create_emulator_app

AGENT = "coder"
READ_TOOLS = {"demo-read_clock": {}, "tasks-list": {"state": "inbox"}}
BARE_TEXT = "the time is now"


def aegis_yaml() -> str:
    tools = ["demo.read_clock", "demo.write_file", "tasks.list"]
    return json.dumps({"agents": {AGENT: {"tools": tools}}}, indent=2)  # JSON is YAML


# The emulator, telling the bench when a card arrives and when it is approved -----------------


@dataclass
class Card:
    seen: float  # time.perf_counter() when the emulator stored it
    message_id: int
    approve: str  # the Approve button's callback data


class Emulator(fullstack.Emulator):
    """fullstack's emulator, keeping its control key (the bench taps through the control API
    as the chat page does) and stamping the cards and edits the bench waits for."""

    def __init__(self, token: str) -> None:
        self.key = secrets.token_hex(8)
        self.cards: dict[str, asyncio.Future] = {}  # file name -> its card
        self.approvals: dict[int, asyncio.Future] = {}  # card's message id -> edit seen
        super().__init__(token)

    async def start(self) -> str:
        app = create_emulator_app(self.state, token=self.token, control_key=self.key)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    def _wrap_add_message(self) -> None:
        super()._wrap_add_message()
        stamped, touch = self.state.add_message, self.state.touch

        def add_message(chat, sender, **fields):
            message = stamped(chat, sender, **fields)
            if message.from_bot:
                self._card(message)
            return message

        def touched(chat) -> None:  # every visible change, edits included, ends here
            touch(chat)
            self._edited(chat)

        self.state.add_message, self.state.touch = add_message, touched

    def _card(self, message) -> None:
        for name, future in list(self.cards.items()):
            if f'"name": "{name}"' in (message.text or "") and not future.done():
                rows = (message.reply_markup or {}).get("inline_keyboard", [])
                data = {b["text"]: b.get("callback_data") for row in rows for b in row}
                future.set_result(Card(time.perf_counter(), message.message_id, data["Approve"]))

    def _edited(self, chat) -> None:
        for message_id, future in list(self.approvals.items()):
            message = chat.find(message_id)
            if message is not None and APPROVED in (message.text or "") and not future.done():
                future.set_result(time.perf_counter())

    def expect_card(self, name: str) -> asyncio.Future:
        self.cards[name] = asyncio.get_running_loop().create_future()
        return self.cards[name]

    def expect_approved(self, message_id: int) -> asyncio.Future:
        self.approvals[message_id] = asyncio.get_running_loop().create_future()
        return self.approvals[message_id]


# aegis, and the bare servers ------------------------------------------------------------------


@dataclass
class Aegis:
    emulator: Emulator
    database_url: str
    data_dir: Path
    mcp_url: str


@contextlib.asynccontextmanager
async def running_aegis(args) -> AsyncIterator[Aegis]:
    """``aegis up`` with this bench's aegis.yaml on a fresh database, its MCP server on a free
    port; as bench/runs.py starts it, with the MCP port added to the environment."""
    token = f"{secrets.randbelow(10**9) + 10**9}:{secrets.token_urlsafe(26)}"
    with tempfile.TemporaryDirectory(prefix="aegis-bench-") as directory:
        data_dir = Path(directory) / ".aegis"
        data_dir.mkdir()
        (Path(directory) / "aegis.yaml").write_text(aegis_yaml(), encoding="utf-8")
        async with fresh_database(args.database, data_dir) as database_url:
            emulator = Emulator(token)
            url = await emulator.start()
            port = fullstack.free_port()
            environment = fullstack.aegis_environment(token, url, data_dir, [PROBE_USER])
            environment.update(AEGIS_DATABASE_URL=database_url, AEGIS_MCP_PORT=str(port))
            process = subprocess.Popen(
                [sys.executable, "-m", "aegis.cli", "up"],
                cwd=directory,
                env=environment,
                stdout=subprocess.DEVNULL,
                stderr=open(Path(directory) / "aegis.log", "w"),
            )
            try:
                await fullstack.wait_until_answering(emulator, "aegis up")
                yield Aegis(emulator, database_url, data_dir, f"http://127.0.0.1:{port}{MCP_PATH}")
            finally:
                fullstack.stop(process)
                await emulator.runner.cleanup()


def bare_app(database_url: str | None):
    """The baseline: one tool returning a constant text, in aegis's transport mode; behind
    aegis's own token check when ``database_url`` is given."""

    async def list_tools(ctx, params) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {}}
        return types.ListToolsResult(tools=[types.Tool(name="now", input_schema=schema)])

    async def call_tool(ctx, params) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=BARE_TEXT)])

    server = Server(
        "bare",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=lambda name: None,  # as aegis: no tools/list run per call
    )
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True)
    store = None
    if database_url is not None:
        store = Store(database_url)  # no connection yet: it opens in uvicorn's loop
        app.add_middleware(RequireAgentToken, tokens=AgentTokens(store))
    return app, store


async def serve_bare(port: int, database_url: str | None) -> None:
    """A bare server's process: uvicorn on ``port``; says "ready" once it listens."""
    app, store = bare_app(database_url)
    config = uvicorn.Config(  # as aegis.mcp.server.serving configures its own
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():  # uvicorn says it listens only by this flag
        await asyncio.sleep(0.01)
    print("ready" if server.started else "failed", flush=True)
    await task  # uvicorn stops on SIGTERM by itself
    if store is not None:
        await store.close()


@contextlib.contextmanager
def bare_server(database_url: str | None = None):
    """A bare server in a process of its own; its URL."""
    port = fullstack.free_port()
    command = [sys.executable, __file__, "--serve-bare", str(port)]
    if database_url is not None:
        command += ["--bare-database", database_url]
    process = subprocess.Popen(
        command, env=fullstack.bench_environment(), stdout=subprocess.PIPE, text=True
    )
    try:
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("a bare MCP server did not start")
        yield f"http://127.0.0.1:{port}{MCP_PATH}"
    finally:
        fullstack.stop(process)


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str | None):
    """The real ``mcp`` client as tests/helpers/mcp.py holds one, at ``url``."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0))
    async with http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def text_of(result) -> str:
    return "\n".join(part.text for part in result.content)


# 1. A read-only call ------------------------------------------------------------------------


KINDS = (
    ("bare", "bare mcp server, constant tool (baseline)"),
    ("bare+auth", "bare + aegis's token check on its database"),
    ("aegis", "aegis: {tool}"),
)


async def timed_call(client, tool: str, arguments: dict) -> float:
    started = time.perf_counter()
    result = await client.call_tool(tool, arguments)
    elapsed = (time.perf_counter() - started) * 1000
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {text_of(result)}")
    return elapsed


async def bench_reads(args, aegis: Aegis, token: str) -> dict[str, list[float]]:
    arguments = READ_TOOLS[args.read_tool]
    with bare_server() as bare_url, bare_server(aegis.database_url) as auth_url:
        async with (
            mcp_client(bare_url, None) as bare,
            mcp_client(auth_url, token) as with_auth,
            mcp_client(aegis.mcp_url, token) as ours,
        ):
            calls = {
                "bare": lambda: timed_call(bare, "now", {}),
                "bare+auth": lambda: timed_call(with_auth, "now", {}),
                "aegis": lambda: timed_call(ours, args.read_tool, arguments),
            }
            order = list(calls)
            for _ in range(args.warmup):
                for kind in order:
                    await calls[kind]()
            samples: dict[str, list[float]] = {kind: [] for kind in order}
            for i in range(args.samples):
                for kind in order[i % 3 :] + order[: i % 3]:  # each goes first in turn
                    samples[kind].append(await calls[kind]())
    return samples


def print_reads(args, samples: dict[str, list[float]]) -> None:
    p50 = {kind: percentile(values, 0.5) for kind, values in samples.items()}
    p99 = {kind: percentile(values, 0.99) for kind, values in samples.items()}
    print(f"{'':48}{'p50 ms':>8}{'p99 ms':>8}{'× bare p50':>12}{'× bare p99':>12}")
    for kind, name in KINDS:
        print(
            f"{name.format(tool=args.read_tool):48}{p50[kind]:8.2f}{p99[kind]:8.2f}"
            f"{p50[kind] / p50['bare']:12.2f}{p99[kind] / p99['bare']:12.2f}"
        )
    ratio = p50["aegis"] / p50["bare"]
    print(
        f"\naegis's read: {ratio:.2f}× the bare server's p50 (target: under 1.5); of the "
        f"{p50['aegis'] - p50['bare']:.2f} ms it adds at p50, the token check alone "
        f"{p50['bare+auth'] - p50['bare']:.2f} ms"
    )


# The whole -----------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--samples", type=int, default=300, help="timed read calls to each server (300)"
    )
    parser.add_argument("--warmup", type=int, default=30, help="untimed rounds of reads first (30)")
    parser.add_argument(
        "--read-tool", choices=sorted(READ_TOOLS), default="demo-read_clock", help="aegis's read"
    )
    parser.add_argument("--taps", type=int, default=30, help="timed taps (30)")
    parser.add_argument("--tap-warmup", type=int, default=2, help="untimed taps first (2)")
    parser.add_argument(
        "--think", type=float, default=0.3, help="seconds from a card seen to its tap (0.3)"
    )
    parser.add_argument(
        "--part", choices=("all", "reads", "taps"), default="all", help="which part (all)"
    )
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--serve-bare", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--bare-database", metavar="URL", help=argparse.SUPPRESS)
    return parser.parse_args()


async def main(args) -> None:
    command = " ".join(["python bench/mcp_calls.py", *sys.argv[1:]])
    print(f"`{command}` ({args.database}, {os.cpu_count()} cores)")
    async with running_aegis(args) as aegis:
        token = await with_store(aegis.database_url, lambda store: AgentTokens(store).mint(AGENT))
        if args.part in ("all", "reads"):
            heading(
                f"1. A read-only tool call over HTTP, {args.samples} of each, interleaved "
                "call by call"
            )
            print_reads(args, await bench_reads(args, aegis, token))
        if args.part in ("all", "taps"):
            heading(f"2. A tap on Approve to the held call's result, {args.taps} taps")
            async with mcp_client(aegis.mcp_url, token) as client:
                taps = await bench_taps(args, aegis, client)
            print_taps(args, taps, await settled_at(aegis.database_url, taps))


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.serve_bare:
        asyncio.run(serve_bare(arguments.serve_bare, arguments.bare_database))
    else:
        asyncio.run(main(arguments))
