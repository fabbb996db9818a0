"""The Dramatiq worker aegis runs: Dramatiq's own, except that its idle threads do not poll.

Dramatiq's worker threads wait on the in-memory work queue ``worker_timeout`` at a time, only to
look whether they have been told to stop. With aegis's 100 ms (aegis/processes.py: it sets how
often a consumer holding messages polls Redis) four idle threads woke forty times a second,
about 4 ms of CPU a second of an idle ``aegis up``, and more under load, as each wake queues for
the interpreter behind the threads doing work (bench/idle.py, bench/monitors.py). Here a worker
thread waits up to ``IDLE_WAIT_SECONDS``, and telling it to stop (or to pause) wakes it at once,
so a worker stops as soon as its running jobs are done, as before.
"""

from __future__ import annotations

from queue import Empty, PriorityQueue

import dramatiq
from dramatiq.worker import WorkerThread

IDLE_WAIT_SECONDS = 5.0


class _Wake:
    """What a stop puts on the work queue for a waiting thread: it sorts before any message,
    so the thread that takes it takes nothing else on its way out."""

    def __lt__(self, other: object) -> bool:
        return other is not self

    def __gt__(self, other: object) -> bool:
        return False


_WAKE = _Wake()


class _WorkQueue(PriorityQueue):
    """Dramatiq's work queue, which also carries wakes: a thread waiting for work that gets one
    is told the queue is empty, and goes back to its loop, where it sees it is to stop.

    Dramatiq tells its threads to stop one after the other, so a thread not yet told may take
    the wake meant for one that was, and wait again. Each wake is therefore one for every
    thread: after the last thread is told, each is sure to find one."""

    def __init__(self, threads: int) -> None:
        super().__init__()
        self.threads = threads

    def wake(self) -> None:
        for _ in range(self.threads):
            self.put(_WAKE)

    def get(self, block: bool = True, timeout: float | None = None):
        while True:
            item = super().get(block, timeout)
            if item is not _WAKE:
                return item
            self.task_done()
            if block:
                raise Empty
            # Not waiting (Dramatiq empties the queue this way at stop, to requeue what is in
            # it): a wake left over, its thread busy to the end, is passed over.


class _WorkerThread(WorkerThread):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.timeout = IDLE_WAIT_SECONDS  # a stop or a pause wakes it; this is a backstop

    def stop(self) -> None:
        super().stop()
        self.work_queue.wake()

    def pause(self) -> None:
        super().pause()
        self.work_queue.wake()


class Worker(dramatiq.Worker):
    """``dramatiq.Worker`` whose idle worker threads wait for work or a wake, not poll; its
    consumers still poll Redis every ``worker_timeout`` while they hold messages."""

    def __init__(self, broker: dramatiq.Broker, **options) -> None:
        super().__init__(broker, **options)
        # Before start(): the threads and the consumers share it.
        self.work_queue = _WorkQueue(self.worker_threads)

    def _add_worker(self) -> None:
        # Dramatiq's own, but for the class of the thread.
        thread = _WorkerThread(
            broker=self.broker,
            consumers=self.consumers,
            work_queue=self.work_queue,
            worker_timeout=self.worker_timeout,
        )
        thread.start()
        self.workers.append(thread)
