"""The servers a bench run uses, and what they cost it: a PostgreSQL database of the run's own
(made and dropped), an emptied Redis database, and the CPU and round trips a burst took from
them and from the bot's own processes."""

from __future__ import annotations

import contextlib
import secrets

import psutil
from sqlalchemy.engine import make_url


@contextlib.asynccontextmanager
async def servers(postgres_url: str, redis_url: str):
    """A new database on the PostgreSQL server (dropped after) and an emptied Redis database:
    the AEGIS_DATABASE_URL and AEGIS_REDIS_URL of one run."""
    import asyncpg
    import redis

    admin = make_url(postgres_url)
    name = f"aegis_bench_{secrets.token_hex(4)}"
    connection = await asyncpg.connect(**asyncpg_arguments(admin))
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
        broker = redis.Redis.from_url(redis_url)
        broker.flushdb()
        try:
            yield {
                "AEGIS_DATABASE_URL": admin.set(
                    drivername="postgresql+asyncpg", database=name
                ).render_as_string(hide_password=False),
                "AEGIS_REDIS_URL": redis_url,
            }
        finally:
            broker.flushdb()
            broker.close()
            await connection.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        await connection.close()


def asyncpg_arguments(url) -> dict:
    return {
        "host": url.host or "127.0.0.1",
        "port": url.port or 5432,
        "user": url.username,
        "password": url.password,
        "database": url.database or "postgres",
    }


class Meter:
    """What one run costs the servers: transactions of its Postgres database and the CPU of
    that database's backends; calls to Redis and the Redis server's CPU (the whole server's:
    exact only while nothing else uses it)."""

    def __init__(self, urls: dict[str, str]) -> None:
        url = make_url(urls["AEGIS_DATABASE_URL"])
        self.database = url.database
        self.admin = asyncpg_arguments(url.set(database="postgres"))
        self.redis_url = urls["AEGIS_REDIS_URL"]

    async def read(self) -> dict[str, float]:
        import asyncpg
        import redis

        connection = await asyncpg.connect(**self.admin)
        try:
            transactions = await connection.fetchval(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1",
                self.database,
            )
            backends = await connection.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1", self.database
            )
        finally:
            await connection.close()
        client = redis.Redis.from_url(self.redis_url)
        try:
            stats = client.info("commandstats")
            cpu = client.info("cpu")
        finally:
            client.close()
        return {
            "transactions": float(transactions),
            "postgres_cpu_ms": cpu_seconds([row["pid"] for row in backends]) * 1000,
            # A script's own commands count as commands; a script is one round trip.
            "redis_commands": float(sum(stat["calls"] for stat in stats.values())),
            "redis_scripts": float(
                sum(
                    stats.get(name, {}).get("calls", 0)
                    for name in ("cmdstat_evalsha", "cmdstat_eval")
                )
            ),
            "redis_cpu_ms": (cpu["used_cpu_user"] + cpu["used_cpu_sys"]) * 1000,
        }


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time the processes have used so far."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total
