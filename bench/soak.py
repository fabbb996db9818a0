"""The soak: a long stream of messages through ``aegis up``, and what its memory does.

    python bench/soak.py [--messages 100000] [--step 10000] [--chats 20]

``aegis up`` (one process, SQLite and its embedded Redis, pointed at an emulator in this
process as if it were Telegram) takes the messages in bursts of ``--step``; after each burst,
once every reply is in and a few seconds have passed, the resident memory of aegis and of its
Redis is read. The bare echo bot (bench/echo_bot.py) takes the same stream beside it, in the same
run, as the baseline: a process that holds nothing between messages.

It prints the memory curve of both and the growth per 10,000 messages after the first burst
(the warm-up: caches, pools, the first pages of SQLite). The target: aegis grows by at most 5 MB
per 10,000 messages after warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import tempfile
import time
from pathlib import Path

from fullstack import (
    FIRST_USER,
    PROBE_USER,
    Emulator,
    burst,
    rss_mb,
    start_aegis,
    start_echo,
    stop,
    wait_until_answering,
)

SETTLE_SECONDS = 3.0


async def soak(name: str, start, args) -> list[tuple[int, float, float, int, int]]:
    """(messages so far, RSS MB, updates/s of the burst, lost, doubled) after each burst."""
    token = f"{secrets.randbelow(10**9) + 10**9}:{secrets.token_urlsafe(26)}"
    emulator = Emulator(token)
    url = await emulator.start()
    process, pids = start(token, url)
    curve = []
    try:
        await wait_until_answering(emulator, name)
        sent = 0
        while sent < args.messages:
            step = min(args.step, args.messages - sent)
            rate, lost, doubled = await burst(emulator, name, step, args.chats)
            sent += step
            await asyncio.sleep(SETTLE_SECONDS)
            curve.append((sent, rss_mb(pids()), rate, lost, doubled))
            print(
                f"  {name}: {sent:>7} messages, {curve[-1][1]:6.1f} MB, {rate:5.0f}/s, "
                f"lost {lost}, doubled {doubled}",
                flush=True,
            )
    finally:
        stop(process)
        await emulator.runner.cleanup()
    return curve


def growth_per_10k(curve: list[tuple[int, float, float, int, int]]) -> float:
    """MB per 10,000 messages from the end of the first burst (the warm-up) to the last."""
    (first, first_mb, *_), (last, last_mb, *_) = curve[0], curve[-1]
    return (last_mb - first_mb) * 10_000 / (last - first) if last > first else 0.0


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages in all")
    parser.add_argument("--step", type=int, default=10_000, help="messages between readings")
    parser.add_argument("--chats", type=int, default=20, help="users sending them")
    args = parser.parse_args()
    users = [PROBE_USER] + [FIRST_USER + i for i in range(args.chats)]
    began = time.perf_counter()

    def echo(token, url):
        process = start_echo(token, url)
        return process, lambda: [process.pid]

    with tempfile.TemporaryDirectory(prefix="aegis-soak-") as directory:
        data_dir = Path(directory) / ".aegis"
        data_dir.mkdir()

        def aegis(token, url):
            process = start_aegis(token, url, data_dir, users)

            def pids():
                redis_pid = int((data_dir / "redis" / "redis.pid").read_text())
                return [process.pid, redis_pid]

            return process, pids

        echo_curve = await soak("echo", echo, args)
        aegis_curve = await soak("aegis up", aegis, args)
    print(f"\n{'messages':>9}{'echo MB':>9}{'aegis MB':>10}{'aegis /s':>10}", end="")
    print(f"{'lost':>6}{'doubled':>8}")
    for (sent, echo_mb, *_), (_, aegis_mb, rate, lost, doubled) in zip(
        echo_curve, aegis_curve, strict=True
    ):
        print(f"{sent:9}{echo_mb:9.1f}{aegis_mb:10.1f}{rate:10.0f}{lost:6}{doubled:8}")
    echo_growth, aegis_growth = growth_per_10k(echo_curve), growth_per_10k(aegis_curve)
    print(
        f"\ngrowth after the first {args.step} (warm-up), per 10,000 messages: "
        f"aegis up {aegis_growth:+.2f} MB (target <= 5 MB), echo bot {echo_growth:+.2f} MB"
    )
    print("aegis MB: the aegis process and its embedded Redis together")
    print(f"{time.perf_counter() - began:.0f} s in all")


if __name__ == "__main__":
    asyncio.run(main())
