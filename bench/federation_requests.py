"""Federation benchmark, third part: a message from an agent on one aegis to an agent on another,
end to end on loopback, beside a bare aiohttp POST between the same two processes.

    python bench/federation_requests.py [--samples 200] [--rounds 3]
                                        [--server-cpu 0] [--client-cpu 1]
                                        [--redis-url redis://127.0.0.1:6379/9]

vps is a server process of its own, pinned to ``--server-cpu``: aegis's federation route over a
SQLite store, with the whole of what a peer's request goes through there (federation/acting.py:
the checks and the nonce in Redis, the request's row, the gate, the approval card for its owner,
its outbox row), and a bare aiohttp handler beside it on the same port. vps's owner is never
asked to tap here: what is measured ends when the card is waiting for them, and the card then
expires unanswered before the next sample (not measured), as the owner's silence would end it.

laptop is this process, pinned to ``--client-cpu``: an agent's ``messages.send`` to
``scout@vps`` as the tool makes it (the request queued as a row in laptop's own SQLite store),
then sent as jobs/peer_requests.py sends it (signed, over one keep-alive connection). For each
sample it measures, one at a time:

- the baseline: a bare POST of the same body to the bare handler and its answer;
- "taken": from the agent's call to vps's answer that it holds the request (its row made, the
  request on its way through the gate);
- "on the card": from the agent's call to the card waiting for vps's owner (vps's row says which
  card; read by asking again, as laptop's long polls do).

Not measured: the hop from laptop's web process to a worker through Redis (the Dramatiq job that
sends the request; bench/runs.py measures that hop), and the owner's tap. The two are
alternated round by round, and the first round warms up and is dropped. Numbers are only
comparable within one run; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from approvals import pinned_to
from federation_http import forget_nonces, free_port
from fullstack import heading, percentile

BARE = "/bare"
EXPIRE = "/bench/expire/"  # the bench's own, on vps's side: not an aegis route
CONFIG = """\
agents:
  laptop:
    peer: true
    tools: [messages.send]
  scout:
    tools: [messages.read]
"""


async def serve(port: int, data_dir: Path, redis_url: str, namespace: str) -> None:
    """vps: the federation route with the requests' driver, and the bare route, until killed.
    Prints the link's secret on stdout."""
    import redis.asyncio
    from aiohttp import web
    from sqlalchemy import update

    from bot.actions import held_calls
    from bot.config.secrets import SecretFiles, callback_signer
    from bot.config.settings import Settings
    from bot.core import Platform
    from bot.store import migrate
    from bot.store.database import Store
    from bot.store.tables import interactions
    from federation import server
    from federation.acting import Acting
    from federation.links import Direction, Peers
    from federation.requests import PeerRequests

    (data_dir / "aegis.yaml").write_text(CONFIG)
    settings = Settings(data_dir=data_dir, config_file=data_dir / "aegis.yaml", _env_file=None)
    store = Store(f"sqlite+aiosqlite:///{data_dir / 'aegis.sqlite3'}")
    await migrate.upgrade(store)

    async def enqueue(actor: str, *args, **kwargs) -> None:
        return None  # the cards' deliveries: their outbox rows are written, nothing sends them

    platform = Platform.build(settings, store, callback_signer(SecretFiles(data_dir)), enqueue)
    held = held_calls.HeldCalls(platform.actions)
    acting = Acting(PeerRequests(store), held, owner_chat=1)
    peers = Peers(store, SecretFiles(data_dir))
    await peers.invite("laptop", us="vps", url=f"http://127.0.0.1:{port}")
    await peers.claim("laptop", bytes(32))
    secret = peers.secret("laptop", Direction.IN)

    async def status() -> dict:
        return {"instance": "vps", "ok": True}

    async def bare(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"id": "0" * 32, "state": "waiting", "time": time.time()})

    async def expire(request: web.Request) -> web.Response:
        """Between samples: the card left unanswered expires, so open cards never pile up."""
        card = int(request.match_info["card"])
        async with store.write() as conn:  # its time is up
            due = datetime.now(UTC) - timedelta(seconds=1)
            await conn.execute(
                update(interactions).where(interactions.c.id == card).values(expires_at=due)
            )
        await platform.interactions.expire(card)
        return web.json_response({})

    app = web.Application()
    served = server.mount(app)
    app.router.add_post(BARE, bare)
    app.router.add_post(EXPIRE + "{card}", expire)
    client = redis.asyncio.Redis.from_url(redis_url)
    async with server.serving(peers, client, namespace, status, acting) as fed:
        served.federation = fed
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        print(secret.hex(), flush=True)
        await asyncio.Event().wait()


async def laptop(data_dir: Path, base: str, secret: bytes):
    """laptop's store with its link to vps, and the client that asks it."""
    from bot.config.secrets import SecretFiles
    from bot.store import migrate
    from bot.store.database import Store
    from federation.client import PeerClient
    from federation.invitations import Invitation
    from federation.links import Peers
    from federation.requests import PeerRequests

    store = Store(f"sqlite+aiosqlite:///{data_dir / 'aegis.sqlite3'}")
    await migrate.upgrade(store)
    peers = Peers(store, SecretFiles(data_dir))
    expires = int(time.time()) + 600
    invitation = Invitation("0" * 32, "vps", "laptop", base, "0" * 64, expires)
    await peers.add("vps", invitation, secret=secret.hex())
    return store, peers, PeerRequests(store), PeerClient


async def one_sample(requests, client, session, base: str, text: str) -> tuple[int, int]:
    """The agent's message to scout@vps: ns until vps took it, and until its card waits.
    Then the card expires unanswered (not measured), as the owner's silence would end it."""
    started = time.perf_counter_ns()
    async with requests.store.write() as conn:
        row_id = await requests.queue(conn, "vps", "message", {"to": "scout", "text": text})
    request = await requests.get(row_id)
    answer = await client.request(request)
    taken = time.perf_counter_ns() - started
    while answer.get("card") is None:
        answer = await client.request(request)
    carded = time.perf_counter_ns() - started
    if answer["state"] != "waiting":
        raise RuntimeError(f"vps did not hold the request on a card: {answer}")
    async with session.post(f"{base}{EXPIRE}{answer['card']}") as expired:
        assert expired.status == 200, expired.status
    while answer["state"] == "waiting":
        answer = await client.request(request, wait=5)
    return taken, carded


async def bare_sample(session, url: str, body: bytes) -> int:
    started = time.perf_counter_ns()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        await r.read()
        assert r.status == 200, r.status
    return time.perf_counter_ns() - started


async def bench(args, base: str, secret: bytes, data_dir: Path) -> dict[str, list[int]]:
    store, peers, requests, client_class = await laptop(data_dir, base, secret)
    found: dict[str, list[int]] = {}
    body = b'{"id":"' + b"0" * 32 + b'","action":"message","args":{"to":"scout","text":"x"}}'
    try:
        async with aiohttp.ClientSession() as session:
            client = client_class(peers, session, tries=1)
            for round_ in range(args.rounds + 1):  # the first warms up and is dropped
                bare, taken, carded = [], [], []
                for _ in range(args.samples):
                    bare.append(await bare_sample(session, base + BARE, body))
                for sample in range(args.samples):
                    text = f"round {round_} sample {sample}: {secrets.token_hex(8)}"
                    took, card = await one_sample(requests, client, session, base, text)
                    taken.append(took)
                    carded.append(card)
                if round_:
                    found.setdefault("baseline: bare aiohttp POST", []).extend(bare)
                    found.setdefault("message taken by vps", []).extend(taken)
                    found.setdefault("message on vps's card", []).extend(carded)
    finally:
        await store.close()
    return found


def report(found: dict[str, list[int]]) -> None:
    heading("A message from an agent on laptop to an agent on vps, beside a bare POST")
    print(f"{'':30} {'p50 ms':>8} {'p99 ms':>8} {'p50 ×':>7} {'p99 ×':>7}")
    base50 = base99 = None
    for name, times in found.items():
        p50, p99 = percentile(times, 0.5) / 1e6, percentile(times, 0.99) / 1e6
        base50, base99 = base50 or p50, base99 or p99
        print(f"{name:30} {p50:8.2f} {p99:8.2f} {p50 / base50:7.1f} {p99 / base99:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200, help="per kind and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/9")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--namespace", default=f"bench-{secrets.token_hex(4)}", help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve:
        with pinned_to(args.server_cpu):
            asyncio.run(serve(args.serve, args.data_dir, args.redis_url, args.namespace))
        return
    port = free_port()
    with contextlib.ExitStack() as stack:
        vps_dir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        laptop_dir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        command = [sys.executable, __file__, "--serve", str(port), "--data-dir", str(vps_dir)]
        command += ["--server-cpu", str(args.server_cpu), "--redis-url", args.redis_url]
        command += ["--namespace", args.namespace]
        stack.callback(forget_nonces, args.redis_url, args.namespace)
        server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ)
        stack.callback(server.wait, 10)
        stack.callback(server.terminate)
        secret = bytes.fromhex(server.stdout.readline().strip())
        with pinned_to(args.client_cpu):
            base = f"http://127.0.0.1:{port}"
            found = asyncio.run(bench(args, base, secret, laptop_dir))
    print(
        f"{args.samples} samples per kind and round, one at a time, {args.rounds} rounds; "
        f"vps on cpu {args.server_cpu}, laptop on cpu {args.client_cpu}; both on SQLite"
    )
    report(found)


if __name__ == "__main__":
    main()
