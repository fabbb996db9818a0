"""The embedded Redis is a real Redis: shared by processes, started once, and durable."""

from __future__ import annotations

import concurrent.futures

import redis

from aegis.embedded_redis import EmbeddedRedis


def test_concurrent_starts_share_one_server_and_data_survives_a_restart(tmp_path):
    embedded = EmbeddedRedis(tmp_path)
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            started = list(pool.map(lambda _: EmbeddedRedis(tmp_path).ensure_running(), range(4)))
        assert started.count(True) == 1
        client = redis.Redis.from_url(embedded.url)
        client.rpush("queued", "a job")
        embedded.stop()
        assert not embedded.is_running()
        assert embedded.ensure_running() is True
        assert redis.Redis.from_url(embedded.url).lrange("queued", 0, -1) == [b"a job"]
    finally:
        embedded.stop()


def test_socket_is_private_to_the_owner(tmp_path):
    embedded = EmbeddedRedis(tmp_path)
    try:
        embedded.ensure_running()
        assert oct(embedded.socket.stat().st_mode & 0o777) == "0o700"
    finally:
        embedded.stop()
