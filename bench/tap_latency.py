"""Part 2 of bench/approvals.py: a tap on Approve to its continuation starting in the worker,
through the real Telegram path in the emulator, against a bare Dramatiq send-to-start of a no-op
actor measured in the same run. Run it with ``python bench/approvals.py --part tap``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import aiosqlite
import aiosqlite.core
import dramatiq
import redis

from bot.actions.call import CallStatus, Continuation, ToolCall
from bot.agents import demo
from bot.chat.views.cards import CALLBACK_KIND, SETTLED
from emulator import DEFAULT_USER

ROOT = Path(__file__).resolve().parent.parent
TAP_P50_TARGET_MS = 50.0
TAP_RATIO_TARGET = 2.0
CONTINUATION_ACTOR = "bench_continuation"
NOOP_ACTOR = "bench_noop"
OWNER_CHAT = DEFAULT_USER["id"]  # the emulator's user, an owner in emulator mode


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def heading(text: str) -> None:
    print(f"\n{text}\n{'=' * len(text)}")


# Part 2: a tap to its continuation -----------------------------------------------------------


class Starts:
    """When a worker thread took each bench message, and when the actor's first line ran;
    the latter handed from the worker's loop to the bench's."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.waiting: dict[str, asyncio.Future] = {}
        self.taken: dict[str, float] = {}

    def expect(self, token: str) -> asyncio.Future:
        future = self.loop.create_future()
        self.waiting[token] = future
        return future

    def started(self, token: str, moment: float) -> None:
        future = self.waiting.pop(token, None)
        if future is not None:
            self.loop.call_soon_threadsafe(_settle, future, moment)


def _settle(future: asyncio.Future, moment: float) -> None:
    if not future.done():
        future.set_result(moment)


class TakenStamp(dramatiq.Middleware):
    """Notes when a worker thread takes a bench message: the end of the queue's share."""

    def __init__(self, starts: Starts) -> None:
        self.starts = starts

    def before_process_message(self, broker, message) -> None:
        if message.actor_name in (CONTINUATION_ACTOR, NOOP_ACTOR):
            self.starts.taken[message.kwargs["token"]] = time.perf_counter()


def declare_actors(broker, starts: Starts) -> dramatiq.Actor:
    """The continuation and the no-op, both async like aegis's own continuations, on the
    ``default`` queue like them; returns the no-op actor."""

    async def continuation(token: str, interaction_id: int | None = None) -> dict:
        starts.started(token, time.perf_counter())
        return {}

    async def noop(token: str) -> dict:
        starts.started(token, time.perf_counter())
        return {}

    broker.add_middleware(TakenStamp(starts))
    options = {"queue_name": "default", "max_retries": 0, "broker": broker}
    dramatiq.actor(continuation, actor_name=CONTINUATION_ACTOR, **options)
    return dramatiq.actor(noop, actor_name=NOOP_ACTOR, **options)


# The way of a tap, in the order it is taken; each stage ends at its stamp.
STAGES = (
    ("polled", "emulator, getUpdates returning the tap"),
    ("tapped", "update recorded, PTB, gate, handler"),
    ("committed", "the tap's transaction (grant, audit, edit)"),
    ("enqueued", "announce, up to the continuation's enqueue"),
    ("taken", "enqueue -> a worker thread takes it"),
    ("started", "-> the actor's first line (worker loop)"),
)
BARE_STAGES = (
    ("taken", "send -> a worker thread takes it"),
    ("started", "-> the actor's first line (worker loop)"),
)


@dataclass
class Samples:
    tap: list[float] = field(default_factory=list)  # ms, tap -> continuation's first line
    stages: dict[str, list[float]] = field(default_factory=dict)  # ms per stage of the tap
    bare: list[float] = field(default_factory=list)  # ms, actor.send -> no-op's first line
    bare_stages: dict[str, list[float]] = field(default_factory=dict)
    trips: dict[str, list[int]] = field(default_factory=dict)  # round trips per stage of a tap

    def add(self, total: float, marks: dict[str, float], trips: dict[str, int], bare: bool):
        (self.bare if bare else self.tap).append(total * 1000)
        if not bare:
            for mark, _ in STAGES:
                self.trips.setdefault(mark, []).append(trips.get(mark, 0))
        stages = self.bare_stages if bare else self.stages
        previous = marks["start"]
        for mark, _ in BARE_STAGES if bare else STAGES:
            at = marks.get(mark, previous)
            stages.setdefault(mark, []).append((at - previous) * 1000)
            previous = at


class TapBench:
    """One running stack, its emulator, and the two kinds of sample."""

    def __init__(self, stack, client, noop, starts: Starts, args) -> None:
        self.stack, self.client, self.noop, self.starts = stack, client, noop, starts
        self.args = args
        self.platform = stack.services.platform
        self.signer = stack.services.signer
        self.marks: dict[str, float] | None = None  # the stages of the tap in flight
        self.trips: dict[str, int] = {}  # its round trips to aiosqlite's thread, per stage
        self.last_message = 0
        self.count = 0
        self.run = secrets.token_hex(3)
        self._stamp_stages()

    def _stamp_stages(self) -> None:
        """Wrap, on these instances only, the steps a tap takes in the web process, to note
        when each is reached (the first time, while a measured tap is in flight)."""

        def stamp(owner, name: str, mark: str, when=lambda *a, **k: True) -> None:
            original = getattr(owner, name)

            async def stamped(*args, **kwargs):
                if self.marks is not None and when(*args, **kwargs):
                    self.marks.setdefault(mark, time.perf_counter())
                return await original(*args, **kwargs)

            setattr(owner, name, stamped)

        interactions = self.platform.interactions
        stamp(self.stack.intake, "_take", "polled", lambda batch, *_: bool(batch))
        stamp(interactions, "tap", "tapped")
        stamp(interactions, "announce", "committed")
        stamp(
            interactions, "enqueue", "enqueued", lambda name, *_, **__: name == CONTINUATION_ACTOR
        )

    @contextlib.contextmanager
    def counting_round_trips(self) -> Iterator[None]:
        """Count the web loop's round trips to aiosqlite's threads, per stage of the tap."""
        original = aiosqlite.core.Connection._execute
        web_thread = threading.current_thread()
        web_stages = [mark for mark, _ in STAGES[:4]]

        async def counted(connection, function, *args, **kwargs):
            marks = self.marks
            if marks is not None and threading.current_thread() is web_thread:
                stage = next((mark for mark in web_stages if mark not in marks), None)
                if stage is not None:
                    self.trips[stage] = self.trips.get(stage, 0) + 1
            return await original(connection, function, *args, **kwargs)

        aiosqlite.core.Connection._execute = counted
        try:
            yield
        finally:
            aiosqlite.core.Connection._execute = original

    async def open_chat(self) -> None:
        """The owner writes first, as on Telegram: the chat exists from then on."""
        sent = await self.client.send_message("/ping")
        replies = await self.client.wait_for_bot_messages(
            OWNER_CHAT, 1, after=sent["message"]["message_id"], timeout=30
        )
        self.last_message = max(m["message_id"] for m in replies)

    async def tap_sample(self) -> tuple[float, dict[str, float], dict[str, int]]:
        """Seconds from the tap to the continuation's first line, the stages' stamps, and the
        round trips to aiosqlite's thread in each."""
        i = self.count = self.count + 1  # a new call each time: no grant or open card reused
        token = f"tap-{self.run}-{i}"
        args = {"name": f"bench-{self.run}-{i}.txt", "text": "from bench/approvals.py"}
        outcome = await self.platform.actions.perform(
            ToolCall(demo.AGENT, "demo.write_file", args, OWNER_CHAT),
            continuation=Continuation(CONTINUATION_ACTOR, {"token": token}),
        )
        if outcome.status is not CallStatus.GATED:
            raise RuntimeError(f"expected a gated call, got {outcome}")
        approve = self.signer.sign(CALLBACK_KIND, str(outcome.interaction_id), "approve")
        card = await self._card_with(approve)
        started = self.starts.expect(token)
        await asyncio.sleep(self.args.idle)
        self.marks, self.trips = {}, {}
        tapped_at = time.perf_counter()
        tapped = await self.client.tap(OWNER_CHAT, card["message_id"], approve)
        began = await asyncio.wait_for(started, timeout=30)
        marks, self.marks = self.marks, None
        marks.update(start=tapped_at, taken=self.starts.taken.pop(token), started=began)
        await self._settled(card["message_id"], tapped["callback_query_id"])
        return began - tapped_at, marks, dict(self.trips)

    async def bare_sample(self) -> tuple[float, dict[str, float], dict[str, int]]:
        i = self.count = self.count + 1
        token = f"noop-{self.run}-{i}"
        started = self.starts.expect(token)
        await asyncio.sleep(self.args.idle)
        sent_at = time.perf_counter()
        self.noop.send(token=token)
        began = await asyncio.wait_for(started, timeout=30)
        marks = {"start": sent_at, "taken": self.starts.taken.pop(token), "started": began}
        return began - sent_at, marks, {}

    async def _card_with(self, approve: str) -> dict:
        """The card message whose Approve button carries ``approve``, once it is delivered."""
        deadline = time.perf_counter() + 30
        while time.perf_counter() < deadline:
            messages = await self.client.wait_for_bot_messages(
                OWNER_CHAT, 1, after=self.last_message, timeout=30
            )
            for message in messages:
                self.last_message = max(self.last_message, message["message_id"])
                rows = (message.get("reply_markup") or {}).get("inline_keyboard", [])
                if any(b.get("callback_data") == approve for row in rows for b in row):
                    return message
        raise TimeoutError("the card never reached the emulator")

    async def _settled(self, message_id: int, callback_query_id: str) -> None:
        """Wait out the tap's other effects (its answer, the card's edit) before the next
        sample, so they do not land inside it."""
        deadline = time.perf_counter() + 30
        answered = edited = False
        while not (answered and edited):
            if time.perf_counter() > deadline:
                raise TimeoutError("the tap was never answered, or the card never edited")
            answered = answered or await self.client.callback_answer(callback_query_id) is not None
            if not edited:
                messages = await self.client.messages(OWNER_CHAT, message_id - 1)
                card = next(m for m in messages if m["message_id"] == message_id)
                edited = (card.get("text") or "").startswith(SETTLED["approved"])
            await asyncio.sleep(0.005)

    async def measure(self, count: int, samples: Samples | None) -> None:
        order = random.Random(count)
        for i in range(count):
            kinds = ["tap", "bare"]
            order.shuffle(kinds)  # neither kind always runs right after the other
            for kind in kinds:
                sample = self.tap_sample if kind == "tap" else self.bare_sample
                total, marks, trips = await sample()
                if samples is not None:
                    samples.add(total, marks, trips, bare=kind == "bare")
            if samples is not None and (i + 1) % 50 == 0:
                print(f"  {i + 1}/{count} pairs done", flush=True)


def start_worker(broker, threads: int, timeout_ms: int) -> dramatiq.Worker:
    """The worker as ``aegis worker`` starts it (aegis/processes.py), in this process."""
    worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=timeout_ms)
    worker.start()
    return worker


async def bench_tap(args) -> None:
    sys.path.insert(0, str(ROOT))  # tests.helpers, when run as ``python bench/approvals.py``
    from aegis.botapi.endpoint import EMULATOR_PREFIX, emulator_key
    from emulator.client import EmulatorClient
    from tests.helpers.stack import make_settings, running_stack

    heading("2. a tap on Approve to its continuation starting in the worker")
    try:
        redis.Redis.from_url(args.redis_url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        raise SystemExit(f"no Redis at {args.redis_url} ({type(exc).__name__}); start one") from exc
    namespace = f"aegis-bench-{secrets.token_hex(4)}"
    print(
        f"web app + emulator + PTB polling + Dramatiq worker ({args.worker_threads} threads, "
        f"worker_timeout {args.worker_timeout} ms) in this process;\nRedis {args.redis_url} "
        f"under {namespace!r}; SQLite in a temp dir. {args.samples} taps and {args.samples} "
        f"bare sends, interleaved,\neach after {args.idle * 1000:.0f} ms with no job, as a tap "
        f"comes to an idle worker; {args.warmup} pairs of warm-up first."
    )
    with tempfile.TemporaryDirectory(prefix="aegis-bench-") as directory:
        data_dir = Path(directory) / "data"
        data_dir.mkdir()
        settings = make_settings(
            data_dir, f"sqlite+aiosqlite:///{data_dir / 'aegis.sqlite3'}", args.redis_url
        )
        try:
            async with running_stack(settings, namespace=namespace, worker=False) as stack:
                starts = Starts()
                noop = declare_actors(stack.broker, starts)
                url = settings.web_url + EMULATOR_PREFIX
                async with aiohttp.ClientSession() as session:
                    client = EmulatorClient(url, emulator_key(settings), session=session)
                    bench = TapBench(stack, client, noop, starts, args)
                    worker = start_worker(stack.broker, args.worker_threads, args.worker_timeout)
                    try:
                        samples = Samples()
                        await bench.open_chat()
                        with bench.counting_round_trips():
                            await bench.measure(args.warmup, None)
                            await bench.measure(args.samples, samples)
                    finally:
                        # Off the loop: a job still running may need this loop to finish.
                        await asyncio.to_thread(worker.stop)
        finally:
            forget_namespace(args.redis_url, namespace)
    report_tap(samples, args.worker_timeout)


def forget_namespace(redis_url: str, namespace: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(f"{namespace}:*", count=1000))
    if keys:
        client.delete(*keys)


def report_tap(samples: Samples, timeout_ms: int) -> None:
    web = [mark for mark, _ in STAGES[:4]]
    rows = [("tap -> continuation starts", samples.tap, "")]
    for mark, label in STAGES:
        trips = f"{statistics.median(samples.trips[mark]):.0f}" if mark in web else ""
        rows.append((f"  {label}", samples.stages[mark], trips))
    rows += [("bare send -> no-op starts (the baseline)", samples.bare, "")]
    rows += [(f"  {label}", samples.bare_stages[mark], "") for mark, label in BARE_STAGES]
    print(f"\n{'ms':50}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}{'trips':>7}")
    for label, values, trips in rows:
        cells = [percentile(values, q) for q in (0.5, 0.9, 0.99)] + [max(values)]
        print(f"{label:50}" + "".join(f"{v:8.1f}" for v in cells) + f"{trips:>7}")
    print(
        "(a stage's percentiles are its own: they need not add up to the total's; trips: the"
        " web loop's round trips\nto aiosqlite's threads in the stage, median)"
    )
    p50, p99 = percentile(samples.tap, 0.5), percentile(samples.tap, 0.99)
    bare50, bare99 = percentile(samples.bare, 0.5), percentile(samples.bare, 0.99)
    verdict = lambda ok: "met" if ok else "MISSED"  # noqa: E731
    print(
        f"\ntap p50 {p50:.1f} ms (target < {TAP_P50_TARGET_MS:.0f} ms: "
        f"{verdict(p50 < TAP_P50_TARGET_MS)})"
        f"\nratio to the baseline: p50 {p50 / bare50:.2f}, p99 {p99 / bare99:.2f} "
        f"(target < {TAP_RATIO_TARGET:.0f}: {verdict(p50 / bare50 < TAP_RATIO_TARGET)} at p50, "
        f"{verdict(p99 / bare99 < TAP_RATIO_TARGET)} at p99)"
    )
    print(
        "\nAn idle consumer of aegis's broker waits on Redis for the wake each enqueue pushes"
        f" (jobs/worker/broker.py);\nworker_timeout ({timeout_ms} ms) bounds only the sleep between"
        " polls of a consumer holding messages."
    )


# Entry point ---------------------------------------------------------------------------------
