"""Federation benchmark: checking a peer's signed request on one core, beside a bare HMAC.

    python bench/federation.py [--requests 20000] [--rounds 5] [--body-bytes 256] [--cpu 0]
                               [--redis-url redis://127.0.0.1:6379/9]

Requests are signed beforehand (each with its own nonce), then checked one at a time, the
process pinned to one core (``--cpu``; -1 leaves it unpinned). Four ways, interleaved round by
round so that a noisy neighbour hits them alike:

1. the baseline: what any signature check must do for these bytes, sha256 of the body and one
   HMAC-SHA256 of the canonical string, compared with ``hmac.compare_digest``;
2. ``checks.check``: the strict header parse, the link, the clock and the signature;
3. ``checks.verify`` with the nonces in a set in memory: what the checks cost in the event loop;
4. ``checks.verify`` with the nonces in Redis (``--redis-url``; ``none`` skips it): what the web
   process does, a round trip to Redis included; one at a time, then 64 at once (the Redis
   server runs on its own core, unpinned: only this process is).

Each call is timed alone (``perf_counter_ns``); requests per second are the calls divided by
the sum of their times. Numbers are only comparable within one run; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.asyncio
from approvals import pinned_to
from fullstack import heading, percentile

from federation.checks import Link, LinkKey, Request, check, verify
from federation.nonces import RedisNonces
from federation.signing import Signer, canonical, direction_key

CALLER, CALLEE, PATH = "laptop", "vps", "/federation/v1/status"
AT_ONCE = 64


class MemoryNonces:
    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()

    async def claim(self, peer: str, nonce: str, ttl: int) -> bool:
        if (peer, nonce) in self.seen:
            return False
        self.seen.add((peer, nonce))
        return True


def signed_requests(count: int, body: bytes, now: int) -> tuple[list[Request], Link]:
    secret = secrets.token_bytes(32)
    signer = Signer.for_link(secret, CALLER, CALLEE)
    requests = []
    for _ in range(count):
        headers = signer.headers("POST", PATH, body, ts=now)
        pairs = (("Host", "vps.example:8742"), ("Content-Type", "application/json"))
        pairs += tuple(headers.items())
        requests.append(Request("POST", PATH, pairs, body, len(body)))
    return requests, Link(CALLER, CALLEE, (LinkKey(direction_key(secret, CALLER, CALLEE)),))


def baseline(link: Link, now: int) -> Callable[[Request], None]:
    key = link.keys[0].key

    def bare(request: Request) -> None:
        given = dict(request.headers)
        message = canonical("POST", PATH, CALLER, CALLEE, now, given["X-Aegis-Nonce"], request.body)
        expected = "v1=" + hmac.new(key, message, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(expected, given["X-Aegis-Signature"])

    return bare


def timed(call: Callable[[Request], None], requests: list[Request]) -> list[int]:
    times = []
    for request in requests:
        started = time.perf_counter_ns()
        call(request)
        times.append(time.perf_counter_ns() - started)
    return times


async def timed_async(call: Callable[[Request], Awaitable], requests: list[Request]) -> list[int]:
    times = []
    for request in requests:
        started = time.perf_counter_ns()
        await call(request)
        times.append(time.perf_counter_ns() - started)
    return times


async def one_round(
    requests: list[Request], link: Link, now: int, memory: MemoryNonces, in_redis
) -> dict[str, list[int]]:
    links = {CALLER: link}
    times = {
        "baseline: sha256 + HMAC-SHA256": timed(baseline(link, now), requests),
        "check (headers, peer, clock, signature)": timed(
            lambda r: check(r, links.get, now), requests
        ),
        "verify, nonces in memory": await timed_async(
            lambda r: verify(r, links.get, memory, now), requests
        ),
    }
    if in_redis is not None:
        times["verify, nonces in Redis"] = await timed_async(
            lambda r: verify(r, links.get, in_redis, now), requests
        )
        fresh, link = signed_requests(len(requests), requests[0].body, now)
        links[CALLER] = link
        times[f"verify, nonces in Redis, {AT_ONCE} at once"] = await timed_together(
            lambda r: verify(r, links.get, in_redis, now), fresh
        )
    return times


async def timed_together(call: Callable[[Request], Awaitable], requests: list[Request]):
    """``AT_ONCE`` calls in flight, as a busy web process has them: each call's time is its
    share of its batch's wall time, so their sum is the wall time (the rate is right; the
    percentiles are of batches)."""
    times = []
    for start in range(0, len(requests), AT_ONCE):
        batch = requests[start : start + AT_ONCE]
        started = time.perf_counter_ns()
        await asyncio.gather(*(call(request) for request in batch))
        times += [(time.perf_counter_ns() - started) // len(batch)] * len(batch)
    return times


async def bench(args: argparse.Namespace) -> dict[str, list[int]]:
    now = int(time.time())
    body = b'{"ask":"status","pad":"' + b"x" * max(0, args.body_bytes - 24) + b'"}'
    memory = MemoryNonces()
    client = None if args.redis_url == "none" else redis.asyncio.Redis.from_url(args.redis_url)
    in_redis = None if client is None else RedisNonces(client, f"bench-{secrets.token_hex(4)}")
    results: dict[str, list[int]] = {}
    try:
        for round_ in range(args.rounds + 1):  # the first round warms up and is dropped
            requests, link = signed_requests(args.requests, body, now)
            times = await one_round(requests, link, now, memory, in_redis)
            for name, taken in times.items():
                if round_:
                    results.setdefault(name, []).extend(taken)
    finally:
        if client is not None:
            async for key in client.scan_iter(f"{in_redis.prefix}*", count=1000):
                await client.delete(key)
            await client.aclose()
    return results


def report(results: dict[str, list[int]]) -> None:
    heading("Checking a signed request, one at a time, on one core")
    base = sum(next(iter(results.values())))
    print(f"{'':42} {'per second':>11} {'p50 µs':>8} {'p99 µs':>8} {'× baseline':>11}")
    for name, times in results.items():
        rate = len(times) / (sum(times) / 1e9)
        p50, p99 = percentile(times, 0.5) / 1000, percentile(times, 0.99) / 1000
        print(f"{name:42} {rate:11,.0f} {p50:8.1f} {p99:8.1f} {sum(times) / base:11.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000, help="per way and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--body-bytes", type=int, default=256)
    parser.add_argument("--cpu", type=int, default=0, help="the core to pin to (-1: none)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/9")
    args = parser.parse_args()
    with pinned_to(args.cpu):
        results = asyncio.run(bench(args))
    print(
        f"{args.requests} requests × {args.rounds} rounds per way, body {args.body_bytes} bytes, "
        f"pinned to cpu {args.cpu}, Python {sys.version.split()[0]}"
    )
    report(results)


if __name__ == "__main__":
    main()
