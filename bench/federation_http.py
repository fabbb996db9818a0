"""Federation benchmark, second part: the route over HTTP beside a bare aiohttp handler.

    python bench/federation_http.py [--requests 3000] [--rounds 3] [--concurrency 32]
                                    [--server-cpu 0] [--client-cpu 1]
                                    [--redis-url redis://127.0.0.1:6379/9]

A server process of its own, pinned to ``--server-cpu``, serves two routes on one port:

- the baseline, ``POST /bare``: a bare aiohttp handler that reads the body and answers the same
  small JSON object;
- ``POST /federation/v1/status``: aegis's route (federation/server.py), every check and the
  nonce in Redis, over a link in a SQLite store of its own; its status is that same constant
  object, so what differs is the checks alone.

This process, pinned to ``--client-cpu``, signs every request beforehand, then sends them over
one keep-alive connection one at a time (round-trip p50 and p99), and then ``--concurrency`` at
once (requests per second the server's one core carries). The two routes alternate round by
round. Numbers are only comparable within one run; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from approvals import pinned_to
from fullstack import heading, percentile

from federation.signing import Signer

PATH, BARE = "/federation/v1/status", "/bare"
ANSWER = {"instance": "vps", "ok": True}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def serve(port: int, data_dir: Path, redis_url: str, namespace: str) -> None:
    """The server process: both routes, until killed. Prints the link's secret on stdout."""
    import redis.asyncio
    from aiohttp import web

    from bot.config.secrets import SecretFiles
    from bot.store import migrate
    from bot.store.database import Store
    from federation import server
    from federation.links import Direction, Peers

    store = Store(f"sqlite+aiosqlite:///{data_dir / 'aegis.sqlite3'}")
    await migrate.upgrade(store)
    peers = Peers(store, SecretFiles(data_dir))
    await peers.invite("laptop", us="vps", url=f"http://127.0.0.1:{port}")
    await peers.claim("laptop", bytes(32))
    secret = peers.secret("laptop", Direction.IN)

    async def status() -> dict:
        return dict(ANSWER)

    async def bare(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(ANSWER | {"time": time.time()})

    app = web.Application()
    served = server.mount(app)
    app.router.add_post(BARE, bare)
    client = redis.asyncio.Redis.from_url(redis_url)
    async with server.serving(peers, client, namespace, status) as fed:
        served.federation = fed
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        print(secret.hex(), flush=True)
        await asyncio.Event().wait()


def forget_nonces(redis_url: str, namespace: str) -> None:
    """The server's nonces, which would otherwise stay in Redis for their ten minutes."""
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(f"{namespace}:*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
    client.close()


def requests_for(secret: bytes, count: int) -> list[tuple[str, dict, bytes]]:
    signer = Signer.for_link(secret, "laptop", "vps")
    body, now = b"{}", int(time.time())
    signed = [(PATH, signer.headers("POST", PATH, body, ts=now), body) for _ in range(count)]
    return signed


async def one_at_a_time(session, base: str, requests) -> list[int]:
    times = []
    for path, headers, body in requests:
        started = time.perf_counter_ns()
        async with session.post(base + path, data=body, headers=headers) as response:
            await response.read()
            assert response.status == 200, response.status
        times.append(time.perf_counter_ns() - started)
    return times


async def at_once(session, base: str, requests, concurrency: int) -> float:
    queue = list(reversed(requests))

    async def sender() -> None:
        while queue:
            path, headers, body = queue.pop()
            async with session.post(base + path, data=body, headers=headers) as response:
                await response.read()
                assert response.status == 200, response.status

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(concurrency)))
    return len(requests) / (time.perf_counter() - started)


async def bench(args, base: str, secret: bytes) -> tuple[dict, dict]:
    latencies: dict[str, list[int]] = {}
    rates: dict[str, list[float]] = {}
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        for round_ in range(args.rounds + 1):  # the first warms up and is dropped
            for name in ("baseline: bare aiohttp handler", "federation route"):
                signed = requests_for(secret, args.requests)
                if name.startswith("baseline"):
                    signed = [(BARE, {}, body) for _, _, body in signed]
                times = await one_at_a_time(session, base, signed[: args.requests // 3])
                rate = await at_once(session, base, signed[args.requests // 3 :], args.concurrency)
                if round_:
                    latencies.setdefault(name, []).extend(times)
                    rates.setdefault(name, []).append(rate)
    return latencies, rates


def report(latencies: dict, rates: dict, concurrency: int) -> None:
    heading("The federation route over HTTP, beside a bare aiohttp handler (server on one core)")
    print(f"{'':32} {'p50 µs':>8} {'p99 µs':>8} {f'per second ({concurrency} at once)':>26}")
    base_rate = None
    for name, times in latencies.items():
        rate = sorted(rates[name])[len(rates[name]) // 2]
        base_rate = base_rate or rate
        p50, p99 = percentile(times, 0.5) / 1000, percentile(times, 0.99) / 1000
        print(f"{name:32} {p50:8.0f} {p99:8.0f} {rate:17,.0f} ({rate / base_rate:.2f}×)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="per route and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
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
    with tempfile.TemporaryDirectory() as data_dir, contextlib.ExitStack() as stack:
        command = [sys.executable, __file__, "--serve", str(port), "--data-dir", data_dir]
        command += ["--server-cpu", str(args.server_cpu), "--redis-url", args.redis_url]
        command += ["--namespace", args.namespace]
        stack.callback(forget_nonces, args.redis_url, args.namespace)
        server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ)
        stack.callback(server.wait, 10)
        stack.callback(server.terminate)
        secret = bytes.fromhex(server.stdout.readline().strip())
        with pinned_to(args.client_cpu):
            latencies, rates = asyncio.run(bench(args, f"http://127.0.0.1:{port}", secret))
    print(
        f"{args.requests} requests per route and round ({args.requests // 3} one at a time, the "
        f"rest {args.concurrency} at once), {args.rounds} rounds; server on cpu "
        f"{args.server_cpu}, client on cpu {args.client_cpu}"
    )
    report(latencies, rates, args.concurrency)


if __name__ == "__main__":
    main()
