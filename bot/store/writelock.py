"""One writer at a time per SQLite file within a process, across event loops.

``aegis up`` runs the web server's loop and the worker's loop in one process, each with its own
engine. Left to SQLite, their writers would collide on the file lock and retry; a lock shared by
the process lets them queue instead, each awaiting its turn on its own loop. Other processes
still meet at SQLite's lock, where ``BEGIN IMMEDIATE`` is retried (bot/store/database.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator

_locks: dict[str, CrossLoopLock] = {}
_locks_guard = threading.Lock()


class CrossLoopLock:
    """A first-come, first-served mutex that coroutines on different event loops (threads) can
    await without blocking their loop. On release the lock passes straight to the longest
    waiter, so a loop with many writers cannot starve a loop with one."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._held = False
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = deque()

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._guard:
            if not self._held:
                self._held = True
                return
            waiter = loop.create_future()
            self._waiters.append((loop, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._guard:
                queued = (loop, waiter) in self._waiters
                if queued:
                    self._waiters.remove((loop, waiter))
            if not queued and not waiter.cancelled():
                self.release()  # handed to us just before the cancel: pass it on
            # (handed over but cancelled before _hand_over ran: _hand_over passes it on)
            raise

    def release(self) -> None:
        """Hand the lock to the longest waiter, or free it."""
        while True:
            with self._guard:
                if not self._waiters:
                    self._held = False
                    return
                loop, waiter = self._waiters.popleft()
            try:
                loop.call_soon_threadsafe(self._hand_over, waiter)
                return
            except RuntimeError:  # that waiter's loop has closed: try the next one
                continue

    def _hand_over(self, waiter: asyncio.Future) -> None:
        if waiter.done():  # cancelled meanwhile; acquire() will not release, so we do
            self.release()
        else:
            waiter.set_result(None)


def lock_for(path: str) -> CrossLoopLock:
    with _locks_guard:
        return _locks.setdefault(path, CrossLoopLock())
