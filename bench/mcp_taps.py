"""The second part of bench/mcp_calls.py: a tap on Approve to the held call's result (run by
it, with its aegis; see its docstring). The agent calls demo-write_file with a fresh file name;
the call is gated and held open; its card is tapped through the emulator's control API, and the
time runs from the tap to the held call returning its result."""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp
from capture import with_store
from fullstack import PROBE_USER, percentile
from sqlalchemy import select

from bot.actions.held_calls import POLL_SECONDS
from bot.chat.views.cards import SETTLED
from bot.store.tables import interactions
from emulator.client import EmulatorClient

if TYPE_CHECKING:
    from mcp_calls import Aegis

APPROVED = SETTLED["approved"]  # how a card reads once approved
OWNER = {"id": PROBE_USER, "first_name": "Owner"}  # the one owner, whose chat gets the cards


@dataclass
class Taps:
    result: list[float] = field(default_factory=list)  # ms, tap's POST -> held call returns
    edit: list[float] = field(default_factory=list)  # ms, tap's POST -> "✅ Approved" seen
    card: list[float] = field(default_factory=list)  # ms, the call made -> its card seen
    # file name -> wall clock at the tap and at the result, to place the card's resolved_at
    walls: dict[str, tuple[float, float]] = field(default_factory=dict)


async def one_tap(args, aegis: Aegis, client, control, number: int, taps: Taps | None) -> None:
    name = f"bench-{number}-{secrets.token_hex(4)}.txt"
    emulator = aegis.emulator
    card_seen = emulator.expect_card(name)
    called = time.perf_counter()
    held = asyncio.create_task(client.call_tool("demo-write_file", {"name": name, "text": "x"}))
    card = await asyncio.wait_for(card_seen, timeout=30)
    approved = emulator.expect_approved(card.message_id)
    await asyncio.sleep(args.think + random.uniform(0, POLL_SECONDS))
    tapped, tapped_wall = time.perf_counter(), time.time()
    await control.tap(PROBE_USER, card.message_id, card.approve, user=OWNER)
    result = await asyncio.wait_for(held, timeout=60)
    returned, returned_wall = time.perf_counter(), time.time()
    edited = await asyncio.wait_for(approved, timeout=30)
    del emulator.cards[name], emulator.approvals[card.message_id]
    if result.is_error or not (aegis.data_dir / "demo" / name).exists():
        raise RuntimeError(f"the approved call did not run: {result.content}")
    if taps is not None:
        taps.result.append((returned - tapped) * 1000)
        taps.edit.append((edited - tapped) * 1000)
        taps.card.append((card.seen - called) * 1000)
        taps.walls[name] = (tapped_wall, returned_wall)


async def bench_taps(args, aegis: Aegis, client) -> Taps:
    """Taps through the emulator's control API on the cards of ``client``'s held calls."""
    taps = Taps()
    async with aiohttp.ClientSession() as session:
        control = EmulatorClient(aegis.emulator.url, aegis.emulator.key, session=session)
        for i in range(args.tap_warmup + args.taps):
            await one_tap(args, aegis, client, control, i, taps if i >= args.tap_warmup else None)
    return taps


async def settled_at(database_url: str, taps: Taps) -> dict[str, list[float]]:
    """Each timed card's resolved_at (the tap's transaction, aegis's clock) placed between the
    tap and the result: the tap's own way, then the held call's poll and its second run (ms)."""

    async def rows(store):
        query = select(interactions.c.args, interactions.c.resolved_at).where(
            interactions.c.tool == "demo.write_file"
        )
        async with store.read() as conn:
            return (await conn.execute(query)).all()

    stages: dict[str, list[float]] = {"tap": [], "held": []}
    for row in await with_store(database_url, rows):
        walls = taps.walls.get(row.args["name"])
        if walls is not None and row.resolved_at is not None:
            settled = row.resolved_at.timestamp()
            stages["tap"].append((settled - walls[0]) * 1000)
            stages["held"].append((walls[1] - settled) * 1000)
    return stages


def print_taps(args, taps: Taps, stages: dict[str, list[float]]) -> None:
    print(f"{'':52}{'p50 ms':>8}{'p99 ms':>8}{'min':>8}{'max':>8}")
    for name, values in (
        ("tap → the held call returns its result", taps.result),
        ("  tap → its card settled in the database", stages["tap"]),
        ("  settled → the held call returns (poll, rerun)", stages["held"]),
        (f'tap → the card\'s edit "{APPROVED}" in the chat', taps.edit),
        ("(the gated call made → its card in the chat)", taps.card),
    ):
        print(
            f"{name:52}{percentile(values, 0.5):8.1f}{percentile(values, 0.99):8.1f}"
            f"{min(values):8.1f}{max(values):8.1f}"
        )
    print(
        f"(a held call looks at its card every {POLL_SECONDS * 1000:.0f} ms; each tap came "
        f"{args.think:g} s + a random part of that poll after its card; resolved_at is "
        "aegis's wall clock, the same machine's as the bench's)"
    )
