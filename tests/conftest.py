"""Shared fixtures: real SQLite, real Postgres and a real Redis server where they run.

A test that needs Postgres or a Redis server is skipped with the reason where none is running,
and fails under CI=true, where they must run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import secrets
from collections.abc import AsyncIterator

import asyncpg
import pytest
import redis

# As `aegis` does (aegis/cli.py): PTB's RetryAfter reads as a timedelta, without a warning.
os.environ.setdefault("PTB_TIMEDELTA", "1")

from bot.store import migrate
from bot.store.database import Store
from bot.timeutil import show_times_in

CI = os.environ.get("CI") == "true"
REDIS_URL = os.environ.get("AEGIS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_DSN = os.environ.get("AEGIS_TEST_POSTGRES_DSN", "postgresql://127.0.0.1:5432/test")

# The fixtures claude_cli, codex_cli and opencode_cli: the real CLIs, installed from npm.
pytest_plugins = ("tests.helpers.vendor_clis",)


def require(service: str, problem: str) -> None:
    message = f"{service} is not available ({problem})"
    if CI:
        pytest.fail(f"{message}; under CI=true it must be", pytrace=False)
    pytest.skip(message)


@pytest.fixture(autouse=True)
def _no_aegis_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests build their settings explicitly; the developer's AEGIS_* must not leak in."""
    for name in list(os.environ):
        if name.startswith("AEGIS_") and not name.startswith("AEGIS_TEST_"):
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _times_shown_in_utc() -> None:
    """Each test starts with times shown in UTC; one that builds a platform for another zone
    changes it for itself only."""
    show_times_in(None)


@pytest.fixture(scope="session")
def redis_server_url() -> str:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        require("a Redis server at " + REDIS_URL, type(exc).__name__)
    return REDIS_URL


@pytest.fixture
def redis_namespace(redis_server_url: str) -> str:
    """A namespace of our own on the shared server, removed afterwards."""
    namespace = f"aegis-test-{secrets.token_hex(4)}"
    yield namespace
    client = redis.Redis.from_url(redis_server_url)
    keys = list(client.scan_iter(f"{namespace}:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    async def probe() -> None:
        connection = await asyncpg.connect(POSTGRES_DSN, timeout=2)
        await connection.close()

    try:
        # A thread of its own: this session fixture may be first asked for inside a running loop.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, probe()).result()
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        require("PostgreSQL at " + POSTGRES_DSN, type(exc).__name__)
    return POSTGRES_DSN


async def _create_database(admin_dsn: str) -> tuple[str, str]:
    name = f"aegis_test_{secrets.token_hex(6)}"
    connection = await asyncpg.connect(admin_dsn)
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
    base = admin_dsn.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    return name, f"{base}/{name}"


async def _drop_database(admin_dsn: str, name: str) -> None:
    connection = await asyncpg.connect(admin_dsn)
    try:
        await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await connection.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def database_url(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[str]:
    """The same test against SQLite and against Postgres (a fresh database each time)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'aegis.sqlite3'}"
        return
    admin = request.getfixturevalue("postgres_dsn")
    name, url = await _create_database(admin)
    try:
        yield url
    finally:
        await _drop_database(admin, name)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    store = Store(database_url)
    await migrate.upgrade(store)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def stack(tmp_path, database_url: str, redis_server_url: str, redis_namespace: str):
    """The whole of aegis against SQLite and Postgres and a Redis server."""
    from tests.helpers.stack import make_settings, running_stack

    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    async with running_stack(settings, namespace=redis_namespace) as running:
        yield running
