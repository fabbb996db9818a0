"""Worker middleware: a ``runs`` row for every job (a job run), the worker's heartbeat, the agent
runs it carries handed back at shutdown, and its resources closed."""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any

from dramatiq import Middleware
from dramatiq.asyncio import get_event_loop_thread

from bot.timeutil import now
from bot.upkeep.heartbeats import BEAT_EVERY, process_id
from bot.upkeep.job_runs import JobRunRecord, JobRunStatus
from jobs import running
from jobs.worker.outages import dependency_of, outages
from jobs.worker.resources import close_resources, resources

logger = logging.getLogger(__name__)


def _run_on_worker_loop(coroutine) -> Any:
    return get_event_loop_thread().run_coroutine(coroutine)


class JobRunRecorder(Middleware):
    """Writes what each job did to ``runs``; the actor's return value is its summary.

    Rows are written in batches, every ``FLUSH_EVERY`` seconds, by a thread of their own: one
    transaction for many jobs instead of one per job (a delivery per message sent would double
    the writes). The price is that a worker killed outright loses at most that much of its
    run history, never a job: a job's own effects are committed by the job itself.
    """

    FLUSH_EVERY = 0.2

    def __init__(self) -> None:
        self._started: dict[str, datetime] = {}
        self._finished: list[JobRunRecord] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def before_process_message(self, broker, message) -> None:
        self._started[message.message_id] = now()

    def after_process_message(self, broker, message, *, result=None, exception=None) -> None:
        started = self._started.pop(message.message_id, now())
        status, error = JobRunStatus.COMPLETED, None
        if exception is not None:
            retries_left = message.options.get("retries", 0) < _max_retries(broker, message)
            status = JobRunStatus.RETRYING if retries_left else JobRunStatus.FAILED
            error = f"{type(exception).__name__}: {exception}"
        summary = result if isinstance(result, dict) else {}
        record = JobRunRecord(
            message.actor_name, message.message_id, status, started, now(), summary, error
        )
        with self._lock:
            self._finished.append(record)

    def after_skip_message(self, broker, message) -> None:
        self._started.pop(message.message_id, None)

    def after_worker_boot(self, broker, worker) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="aegis-job-runs", daemon=True)
        self._thread.start()

    def after_worker_shutdown(self, broker, worker) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()

    def flush(self) -> None:
        with self._lock:
            batch, self._finished = self._finished, []
        if not batch:
            return
        try:
            _run_on_worker_loop(_record_many(batch))
        except Exception as exc:
            if not _away(exc, "job-runs"):
                logger.exception("could not record %d job runs", len(batch))
            return
        outages.worked("job-runs")

    def _loop(self) -> None:
        while not self._stop.wait(self.FLUSH_EVERY):
            self.flush()


async def _record_many(batch: list[JobRunRecord]) -> None:
    await (await resources()).platform.job_runs.record_many(batch)


def _away(exc: Exception, what: str) -> bool:
    """True when ``exc`` says a dependency is away (counted in ``outages``, not a bug)."""
    dependency = dependency_of(exc)
    if dependency is not None:
        outages.failed(dependency, exc, what)
    return dependency is not None


def _max_retries(broker, message) -> int:
    actor = broker.get_actor(message.actor_name)
    return message.options.get("max_retries", actor.options.get("max_retries", 20))


class WorkerHeartbeat(Middleware):
    """Beats every few seconds while the worker runs, so /status can show it alive."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.process = process_id("worker")
        self.started_at = now()

    def after_worker_boot(self, broker, worker) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="aegis-heartbeat", daemon=True)
        self._thread.start()

    def before_worker_shutdown(self, broker, worker) -> None:
        self._stop.set()
        try:
            _run_on_worker_loop(self._beat(stop=True))
        except Exception:
            logger.warning("could not remove the worker heartbeat", exc_info=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                _run_on_worker_loop(self._beat())
                outages.worked("heartbeat")
            except Exception as exc:
                if not _away(exc, "heartbeat"):
                    logger.warning("worker heartbeat failed", exc_info=True)
            self._stop.wait(BEAT_EVERY.total_seconds())

    async def _beat(self, *, stop: bool = False) -> None:
        beats = (await resources()).platform.heartbeats
        if stop:
            await beats.stop(self.process)
        else:
            await beats.beat(self.process, "worker", self.started_at)


class AgentRunsHandBack(Middleware):
    """At shutdown, stops the agent runs this worker carries and queues them again."""

    def before_worker_shutdown(self, broker, worker) -> None:
        try:
            _run_on_worker_loop(_hand_back_runs())
        except Exception:
            logger.warning("could not hand back the running agents", exc_info=True)


async def _hand_back_runs() -> None:
    if running.carried():
        agent_runs = (await resources()).platform.runs
        count = await running.stop_all(agent_runs.hand_back)
        logger.info("handed back %d agent runs", count)


class WorkerResources(Middleware):
    """Closes the worker's store and Bot on its own loop before that loop stops.

    Added after the AsyncIO middleware: Dramatiq runs ``after_*`` hooks in reverse order, so
    this one runs after the worker threads finished their messages and before the loop stops.
    """

    def after_worker_shutdown(self, broker, worker) -> None:
        try:
            _run_on_worker_loop(close_resources())
        except Exception:
            logger.warning("could not close the worker's resources", exc_info=True)
